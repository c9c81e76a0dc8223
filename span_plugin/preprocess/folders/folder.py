"""A task folder from rows already read (GLUE TSVs or a user's table), laid out as
fairseq's RoBERTa GLUE recipe lays it out, with span files and the data record
(:func:`write_task_folder`); the label set is the train split's
(:func:`restrict_to_train_labels`), and every builder writes whole or not at all
(:func:`whole_folder`). The folder's files: docs/PREPROCESS.md, section "Module notes"."""

import contextlib
import functools
import logging
import os
import shutil

from span_plugin.files.atomic import staged_folder
from span_plugin.files.outputs import locked
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_file_lines, regular_file
from span_plugin.preprocess.records import provenance
from span_plugin.preprocess.binary.binarize import binarize_file, write_dict
from span_plugin.preprocess.binary.labels import binarize_labels, write_label_dict
from span_plugin.preprocess.binary.vocab import Vocab

logger = logging.getLogger(__name__)

UNKNOWN_LABELS = ("error", "skip")


def folder_name(out_dir):
    """The default task name of a folder: its own name (``data-bin/RTE`` -> ``RTE``)."""
    return os.path.basename(os.path.normpath(str(out_dir)))


@contextlib.contextmanager
def whole_folder(out_dir):
    """Build a folder whole or not at all: yields the temporary folder
    ``OUT.partial-PID`` (same parent, so the same file system) to write into; when
    the block ends without an exception it takes ``OUT``'s place
    (:func:`span_plugin.files.atomic.staged_folder`), else it is removed.

    An existing ``OUT`` is replaced only when it is empty or holds a data record (a
    folder span-preprocess made); any other folder or file is refused before anything
    is written, since its files would be lost. ``OUT`` is locked meanwhile: a second
    build of it stops, naming this one (:func:`span_plugin.files.outputs.locked`).
    """
    out_dir = os.path.normpath(str(out_dir))
    with locked(out_dir):  # one writer at a time (span_plugin.files.outputs)
        with _replacing(out_dir) as tmp:
            yield tmp


@contextlib.contextmanager
def _replacing(out_dir):
    """:func:`whole_folder` under its lock. A symbolic link is written where it points
    (:func:`span_plugin.files.atomic.staged_folder`): what is checked is that folder."""
    real = os.path.realpath(out_dir)
    if os.path.lexists(real):
        if not os.path.isdir(real):
            raise BadInputError(f"{out_dir}: exists and is not a folder; give another --out")
        if os.listdir(real) and not os.path.exists(os.path.join(real, provenance.RECORD_NAME)):
            raise BadInputError(
                f"{out_dir}: exists and is not a folder span-preprocess made (it has no "
                f"{provenance.RECORD_NAME}: files of your own, or a build that did not "
                f"finish); it is not replaced. Remove it or give another --out")
    with staged_folder(out_dir) as tmp:
        yield os.fspath(tmp)


def builds_whole_folder(prepare):
    """Decorator of a builder ``prepare(out_dir, ...)`` whose other arguments do not
    depend on the folder's name: it runs on :func:`whole_folder`'s temporary folder."""
    @functools.wraps(prepare)
    def build(out_dir, *args, **kwargs):
        with whole_folder(out_dir) as tmp:
            return prepare(tmp, *args, **kwargs)

    return build


def _write_lines(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def given_splits(files):
    """``(split, path)`` of ``files`` = {"train": path, "valid": path, "test": path} (any
    subset) in train, valid, test order; a missing file is an error naming its flag."""
    for split in ("train", "valid", "test"):
        path = files.get(split)
        if path is None:
            continue
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file (--{split})")
        regular_file(path, f"--{split}")
        yield split, path


def restrict_to_train_labels(splits, unknown_labels="error", regression=False):
    """Check ``splits`` (``(split, source_path, SplitRows)``) against the train split.

    A train split without rows is an error naming its file. Class labels: every label of
    another labelled split must be one of train's; one that is not is an error
    ``FILE:LINE: label ...`` (``unknown_labels="error"``) or its row is left out of
    every input and the label and listed with its reason (``"skip"``). Unlabelled
    splits, regression labels and a set of splits without train are not checked.
    Returns ``{split: rows left out}``.
    """
    if unknown_labels not in UNKNOWN_LABELS:
        raise ValueError(f"unknown_labels {unknown_labels!r}: expected one of {UNKNOWN_LABELS}")
    train = [(path, rows) for split, path, rows in splits if split == "train"]
    if not train:
        return {}
    train_path, train_rows = train[0]
    if train_rows.rows == 0:
        if train_rows.dropped:
            line, why = train_rows.dropped[0]
            raise BadInputError(f"{train_path}: the training split has no rows left: all "
                                f"{len(train_rows.dropped)} were left out (line {line}: {why}, "
                                f"...); nothing to train on")
        raise BadInputError(f"{train_path}: the training split has no rows (an empty file or "
                            f"a header line only); nothing to train on")
    if regression or train_rows.labels is None:
        return {}
    known = set(train_rows.labels)
    names = sorted(known)
    dropped = {}
    for split, path, rows in splits:
        if split == "train" or rows.labels is None:
            continue
        bad = {}
        for i, label in enumerate(rows.labels):
            if label in known:
                continue
            line = rows.lines[i] if rows.lines else f"row {i + 1}"
            if unknown_labels == "error":
                raise BadInputError(
                    f"{path}:{line}: label {label!r} is not a label of the training split "
                    f"({train_path} has {names}); fix the row or pass --unknown-labels skip "
                    f"to leave such rows out")
            bad[i] = f"label {label!r} not in the training split's labels {names}"
        if bad:
            found = sorted({rows.labels[i] for i in bad})
            logger.warning("%s: %d row%s with a label the training split does not have "
                           "(%s) left out, listed in dropped_rows.tsv", path, len(bad),
                           "s" * (len(bad) != 1), ", ".join(map(repr, found)))
            rows.leave_out(bad)
            dropped[split] = len(bad)
    return dropped


def dropped_summary(out_dir):
    """``"OUT/dropped_rows.tsv: N rows left out (valid 2, test 1)"``, or None when the
    folder's list is empty (or absent)."""
    path = os.path.join(out_dir, "dropped_rows.tsv")
    if not os.path.exists(path):
        return None
    splits = [line.split("\t", 1)[0] for line in read_file_lines(path)[1:] if line.strip()]
    if not splits:
        return None
    per = {s: splits.count(s) for s in dict.fromkeys(splits)}
    return (f"{path}: {len(splits)} row{'s' * (len(splits) != 1)} left out ("
            + ", ".join(f"{s} {n}" for s, n in per.items()) + ")")


def label_names(dict_path):
    """Class names of a label dict.txt in index order (fairseq's padding left out)."""
    names = [line.rsplit(" ", 1)[0] for line in read_file_lines(dict_path) if line.strip()]
    return [n for n in names if not n.startswith("madeupword")]


def write_task_folder(out_dir, splits, options, *, task, regression=False, positive=None,
                      label_scale=1.0, label_range=None):
    """Write the folder of rows already read.

    splits: list of ``(split, source_path, SplitRows)``, in order (train first).
    options: :class:`~span_plugin.preprocess.folders.options.FolderOptions`; its
    unknown_labels (None: "error") says what a valid/test label train does not have
    does: "error" or "skip" (:func:`restrict_to_train_labels`, applied first, before
    anything is written); its bad_utf8 says how the sources were read, which the record
    keeps with the replacements each split's rows counted (``SplitRows.replacements``).
    task: the task name in the record.
    positive: the class F1 counts as positive (two classes only), or None.
    label_scale, label_range: regression only; values are stored divided by the scale
    (STS-B: 5) and predictions are clipped to the range (STS-B: [0, 5]).
    Returns ``{split: rows written}``.
    """
    restrict_to_train_labels(splits, options.unknown_labels or "error", regression)
    raw_dir = os.path.join(out_dir, "raw")
    os.makedirs(raw_dir, exist_ok=True)
    counts, dropped, present = {}, [], []
    for split, path, rows in splits:
        for k, col in enumerate(rows.inputs):
            _write_lines(os.path.join(raw_dir, f"{split}.input{k}"), col)
        if rows.labels is not None:
            _write_lines(os.path.join(raw_dir, f"{split}.label"), rows.labels)
        dropped += [(split, path, ln, why) for ln, why in rows.dropped]
        present.append((split, rows.labels is not None, len(rows.inputs)))
        counts[split] = rows.rows
    n_inputs = {n for _, _, n in present}
    if len(n_inputs) != 1:
        raise BadInputError(f"{task}: splits have different numbers of inputs "
                            f"({ {s: n for s, _, n in present} })")
    with open(os.path.join(out_dir, "dropped_rows.tsv"), "w", encoding="utf-8") as f:
        f.write("split\tfile\tline\treason\n")
        for split, path, ln, why in dropped:
            f.write(f"{split}\t{path}\t{ln}\t{why}\n")

    for split, _, n in present:
        for k in range(n):
            binarize_file(os.path.join(raw_dir, f"{split}.input{k}"),
                          os.path.join(out_dir, f"input{k}", split), options.spec,
                          options.dict_path, workers=options.workers, bad_utf8="error")
    for k in range(n_inputs.pop()):
        write_dict(options.dict_path, os.path.join(out_dir, f"input{k}"))

    labelled = [s for s, has_label, _ in present if has_label]
    label_dir = os.path.join(out_dir, "label")
    # Start the label folder afresh on a re-run: no stale split of an earlier run.
    shutil.rmtree(label_dir, ignore_errors=True)
    os.makedirs(label_dir, exist_ok=True)
    if regression:
        for split in labelled:
            os.replace(os.path.join(raw_dir, f"{split}.label"),
                       os.path.join(label_dir, f"{split}.label"))
        labels = {"kind": "regression", "scale": label_scale, "range": label_range}
    elif labelled:
        _binarize_labels(task, raw_dir, label_dir, labelled)
        names = label_names(os.path.join(label_dir, "dict.txt"))
        if positive is not None and positive not in names:
            raise BadInputError(
                f"{task}: positive label {positive!r} is not a label of the labelled "
                f"splits (labels: {names})")
        merged = _merged_label_variants(splits)
        labels = {"kind": "classes", "names": names, "positive": positive,
                  **({"merged_variants": merged} if merged else {})}
    else:
        labels = {"kind": "none"}
    provenance.write_record(out_dir, provenance.RecordFields(
        command=options.record_command(), task=task, inputs=len(splits[0][2].inputs),
        encoder=provenance.encoder_record(options.spec, options.dict_path), labels=labels,
        source={split: provenance.file_entry(path) for split, path, _ in splits}, rows=counts,
        bad_utf8=provenance.utf8_entry(options.bad_utf8, {split: rows.replacements
                                                          for split, _, rows in splits})))
    return counts


def _merged_label_variants(splits):
    """The class labels that NFC and stripping white space changed, per split, for the
    record (``[{"split", "written", "read_as", "rows"}]``), each file's logged once."""
    merged = []
    for split, path, rows in splits:
        variants = sorted(rows.label_variants.items())
        if not variants:
            continue
        merged += [{"split": split, "written": raw, "read_as": label, "rows": n}
                   for (raw, label), n in variants]
        logger.warning("%s: %d class label%s written otherwise than read (Unicode NFC, "
                       "surrounding white space stripped): %s", path,
                       sum(n for _, n in variants), "s" * (sum(n for _, n in variants) != 1),
                       ", ".join(f"{ascii(raw)} as {ascii(label)} ({n} row{'s' * (n != 1)})"
                                 for (raw, label), n in variants))
    return merged


def _binarize_labels(task, raw_dir, label_dir, labelled):
    """label/dict.txt from the train labels (from every labelled split, with a warning,
    when there is no train split) and label/{split}.{bin,idx} for each labelled split."""
    files = {s: os.path.join(raw_dir, f"{s}.label") for s in labelled}
    if "train" in files:
        dict_from = [files["train"]]
    else:
        logger.warning("%s: no train split; label dictionary built from %s", task, labelled)
        dict_from = list(files.values())
    vocab = Vocab(write_label_dict(dict_from, os.path.join(label_dir, "dict.txt")))
    for split, path in files.items():
        binarize_labels(path, os.path.join(label_dir, split), vocab)
