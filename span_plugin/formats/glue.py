"""GLUE (and SNLI) TSV files: the task table and the reading of one split into rows.

Splits: train, dev -> valid, test -> test; MNLI dev_matched/dev_mismatched -> valid/
valid1 and test_matched/test_mismatched -> test/test1. Labels are read for train and
valid splits (test.tsv has none), except SNLI whose test set is labelled.

Columns (1-based, as the recipe's ``cut -f``) and row checks: every row must have the
header's number of tab-separated fields (CoLA train/dev have no header: 4 fields).
Fields are split on tabs with no quoting, as GLUE's own tooling reads them
(:mod:`span_plugin.formats.tsv`). A row with another count (a tab inside a field, a
missing column, a blank line), or a CSV-quoted field holding a tab or a line break, is
an error naming the file and line; for QQP train/dev such rows are dropped, as the
recipe's ``awk NF==6`` does, and listed with their reason. STS-B scores are numbers
in ASCII decimal notation. Dropping removes the whole
row from every input and the label, so nothing shifts. Each row keeps its line
(``SplitRows.lines``) for the label check of the folder writer
(:func:`span_plugin.preprocess.folders.folder.restrict_to_train_labels`).
"""

from dataclasses import dataclass

from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_file_lines
from span_plugin.formats.rows import SplitRows, read_decimal
from span_plugin.formats.unicode_text import class_label, label_problem
from span_plugin.formats.tsv import split_rows


@dataclass(frozen=True)
class Task:
    name: str
    inputs: tuple  # 1-based columns of the inputs in train/dev files
    test_inputs: tuple  # ... in test files
    label: int  # 1-based label column; -1: the last column
    dev_label: int = None  # MNLI dev files keep gold_label elsewhere
    splits: tuple = (("train", "train"), ("dev", "valid"), ("test", "test"))
    header: str = "all"  # "all" or "test" (CoLA: only test.tsv has a header)
    regression: bool = False
    drop_malformed: bool = False  # QQP train/dev: drop rows with a wrong field count
    labelled_test: bool = False
    drop_labels: tuple = ()  # rows whose label is one of these are left out
    positive: str = None  # the class F1 counts as positive (binary tasks)


TASKS = {t.name: t for t in [
    Task("CoLA", (4,), (2,), 2, header="test", positive="1"),
    Task("SST-2", (1,), (2,), 2, positive="1"),
    Task("MRPC", (4, 5), (4, 5), 1, positive="1"),
    Task("STS-B", (8, 9), (8, 9), 10, regression=True),
    Task("QQP", (4, 5), (2, 3), 6, drop_malformed=True, positive="1"),
    Task("MNLI", (9, 10), (9, 10), 12, dev_label=16,
         splits=(("train", "train"), ("dev_matched", "valid"), ("dev_mismatched", "valid1"),
                 ("test_matched", "test"), ("test_mismatched", "test1"))),
    Task("QNLI", (2, 3), (2, 3), 4, positive="entailment"),
    Task("RTE", (2, 3), (2, 3), 4, positive="entailment"),
    Task("WNLI", (2, 3), (2, 3), 4, positive="1"),
    # GLUE's SNLI folder: sentence1/sentence2 in columns 8/9, gold_label last; "-"
    # (no annotator majority) is not a class and is dropped, as usual for SNLI.
    Task("SNLI", (8, 9), (8, 9), -1, labelled_test=True, drop_labels=("-",)),
]}


def _is_test(raw_split):
    return raw_split.startswith("test")


def read_split(task, path, raw_split, bad_rows="error", bad_utf8="error"):
    """Read one TSV into fields. bad_rows: "error", "skip", or "default" (the task's
    own rule: skip for QQP train/dev, error elsewhere)."""
    test = _is_test(raw_split)
    if bad_rows == "default":
        bad_rows = "skip" if task.drop_malformed and not test else "error"
    lines = read_file_lines(path, bad_utf8)
    has_header = task.header == "all" or test
    first = 1 if has_header else 0
    if has_header:
        if not lines:
            raise BadInputError(f"{path}:1: expected a header line, the file is empty")
        expected = len(lines[0].split("\t"))
    else:
        expected = 4  # CoLA: source, label, original label, sentence
    cols = task.test_inputs if test else task.inputs
    with_label = not test or task.labelled_test
    label_col = task.dev_label if (task.dev_label and raw_split != "train") else task.label
    need = max(cols + ((label_col,) if with_label and label_col > 0 else ()))
    if expected < need:
        raise BadInputError(f"{path}:1: header has {expected} fields, {task.name} needs "
                            f"column {need}")
    out = SplitRows(inputs=[[] for _ in cols], labels=[] if with_label else None,
                    replacements=lines.replacements)
    for lineno, fields, problem in split_rows(lines, first, expected):
        if fields is None:
            kind, reason = problem
            if bad_rows == "skip":
                out.dropped.append((lineno, reason))
                continue
            fix = ("remove the quotes around that field (GLUE files are read without "
                   "quoting)" if kind == "quoted" else
                   "fix the row (a tab inside a field or a missing column)")
            raise BadInputError(f"{path}:{lineno}: {reason}; {fix}, or pass --bad-rows "
                                f"skip to leave such rows out")
        if with_label:
            raw = fields[label_col - 1 if label_col > 0 else -1]
            label = raw.strip() if task.regression else class_label(raw)
            if label in task.drop_labels:
                out.dropped.append((lineno, f"label {label!r}"))
                continue
            if task.regression:
                value = read_decimal(label)
                if value is None:
                    raise BadInputError(f"{path}:{lineno}: label {label!r} is not a number "
                                        f"in ASCII decimal notation, finite in float32 (STS-B "
                                        f"scores are 0..5)")
                label = "%.6g" % (value / 5.0)  # awk '{print $1 / 5.0}'
            elif not label:
                raise BadInputError(f"{path}:{lineno}: empty label in column {label_col}")
            elif label_problem(label):
                # A class label is one token of label/dict.txt: '1\xa00' would become two
                # labels of one row, and a '\r' inside one would split label/train.label
                # into an extra row (read with universal newlines), shifting every label.
                raise BadInputError(f"{path}:{lineno}: label {label!r} in column {label_col} "
                                    f"{label_problem(label)}")
            if task.regression:
                out.labels.append(label)
            else:
                out.add_label(raw, label)
        for k, c in enumerate(cols):
            # Newline-free by construction (lines are split on \n); a lone \r would
            # split the line when fairseq reads text, so it becomes a space.
            out.inputs[k].append(fields[c - 1].replace("\r", " ").strip())
        out.lines.append(lineno)
        out.rows += 1
    return out
