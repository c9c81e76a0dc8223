"""Validate a task folder of any kind the package writes (``span-preprocess check DIR``,
:func:`check_folder`, which also prints the record): the record's hashes, one item per
row in every file, span files lined up with the tokens, then the checks of its kind
(tags, QA windows, pre-training, span pairs). What each kind checks: docs/PREPROCESS.md,
section "Module notes"."""

import glob
import os
import re

import numpy as np

from span_plugin.files.errors import NotAFileError
from span_plugin.formats.lines import bounded_lines, open_bytes, read_file_lines, regular_file
from span_plugin.preprocess.binary import indexed, span_files

from span_plugin.preprocess.records import provenance


class CheckError(ValueError):
    """The first problem found; the message names the file and the 1-based line."""


RAW_TEXT = re.compile(r"\.(input\d+|label|source)$")  # raw/ files with one line a row


def _splits(input_dir):
    out = []
    for idx in sorted(glob.glob(os.path.join(input_dir, "*.idx"))):
        name = os.path.basename(idx)[:-len(".idx")]
        if not name.endswith(span_files.SPAN_SUFFIX) and ".shard" not in name:
            out.append(name)
    return out


def _count_text_lines(path):
    with open_bytes(path) as f:
        return sum(1 for _ in bounded_lines(f, path))


def _only_files(folder):
    """Every entry under ``folder`` is a folder or a regular file (links followed): a
    device, FIFO or socket where a file of the folder belongs would be read for ever or
    block the check. Refused by ``stat`` alone, before anything is opened."""
    for root, dirs, files in os.walk(folder):
        for name in files + dirs:
            path = os.path.join(root, name)
            if not os.path.exists(path) or os.path.isdir(path):
                continue  # a broken link: the check that reads it names it
            try:
                regular_file(path)
            except NotAFileError as err:
                raise CheckError(str(err)) from None


def _sizes(prefix):
    """Item sizes of an indexed file (a copy: the reader's map closes with it)."""
    return np.array(indexed.IndexedReader(prefix).sizes, dtype=np.int64)


def _flat(prefix, dtype=np.int32):
    return np.fromfile(indexed.data_file_path(prefix), dtype=dtype)


def _require(prefix, what):
    if not indexed.exists(prefix):
        raise CheckError(f"{indexed.data_file_path(prefix)}: missing ({what})")


def _record(folder):
    if not os.path.isdir(folder):
        raise CheckError(f"{folder}: no such folder" if not os.path.lexists(folder) else
                         f"{folder}: not a folder; give the task folder span-preprocess wrote")
    try:
        record = provenance.read_record(folder)
    except provenance.ProvenanceError as err:
        raise CheckError(str(err)) from None
    if record is None:
        raise CheckError(
            f"{folder}: no {provenance.RECORD_NAME}: a build that did not finish, a folder "
            f"made by hand or before span_plugin 0.2; nothing says how it was tokenized, "
            f"segmented and labelled, or which files it holds. Rebuild it with "
            f"span-preprocess")
    for key in ("labels", "rows", "files", "encoder"):
        if not isinstance(record.get(key), dict):
            raise CheckError(f"{os.path.join(folder, provenance.RECORD_NAME)}: no {key!r} "
                             f"entry; rebuild the folder with span-preprocess")
    return record


def _same_counts(items):
    """``items``: ``[(file, count)]`` of one split; the first that differs is an error."""
    counts = {n for _, n in items}
    if len(counts) > 1:
        first = items[0]
        bad = next(x for x in items if x[1] != first[1])
        raise CheckError(f"{bad[0]}: {bad[1]} items but {first[0]} has {first[1]}; "
                         f"line {min(bad[1], first[1]) + 1} has no partner")


def check_folder(folder):
    """Check ``folder`` (module docstring). Returns a list of report lines; raises
    CheckError on the first problem."""
    if os.path.isdir(folder):
        _only_files(folder)
    record = _record(folder)
    kind = record["labels"].get("kind")
    inputs = sorted(d for d in glob.glob(os.path.join(folder, "input*")) if os.path.isdir(d))
    if record.get("task") == "pretrain":  # span-preprocess pretrain: the splits at the top
        inputs = [folder]
    if not inputs:
        raise CheckError(f"{folder}: no input*/ folders (is this a binarized task folder?)")
    report, sizes = [], {}
    for d in inputs:
        splits = _splits(d)
        if not splits:
            raise CheckError(f"{d}: no token files (*.bin/*.idx)")
        for split in splits:
            prefix = os.path.join(d, split)
            tokens = indexed.IndexedReader(prefix)
            sp = span_files.span_prefix(prefix)
            if not span_files.exists(sp):
                raise CheckError(f"{sp}.bin: missing span index for {prefix}.bin")
            spans = span_files.read_spans(sp)
            try:
                span_files.check_alignment(sp, spans, tokens.sizes - 1)
            except span_files.SpanAlignmentError as err:
                m = re.search(r"item (\d+)", str(err))
                line = f"line {int(m.group(1)) + 1}: " if m else ""
                raise CheckError(f"{indexed.data_file_path(sp)}: {line}{err}") from None
            sizes.setdefault(split, []).append((prefix + ".bin", len(tokens)))
            report.append(f"{prefix}: {len(tokens)} items, {int(spans.sizes.sum()) // 2} "
                          f"spans, ok")
    label_dir = os.path.join(folder, "label")
    for split, items in sizes.items():
        path = os.path.join(label_dir, split)
        if indexed.exists(path):
            items.append((path + ".bin", len(indexed.IndexedReader(path))))
        elif os.path.exists(path + ".label"):
            items.append((path + ".label", _count_text_lines(path + ".label")))
        for raw in sorted(glob.glob(os.path.join(folder, "raw", glob.escape(split) + ".*"))):
            if RAW_TEXT.search(raw):
                items.append((raw, _count_text_lines(raw)))
        _same_counts(items)
    rows = record["rows"]
    if kind != "qa":  # QA records count questions; their windows are the items
        for split, items in sizes.items():
            if split in rows and rows[split] != items[0][1]:
                raise CheckError(f"{items[0][0]}: {items[0][1]} items, but "
                                 f"{provenance.RECORD_NAME} records {rows[split]} rows for "
                                 f"{split}")
    missing = sorted(set(rows) - set(sizes))
    if missing:
        raise CheckError(f"{folder}: {provenance.RECORD_NAME} records the split "
                         f"{missing[0]!r}, but input0/ has no {missing[0]} files")
    if kind == "tags":
        from span_plugin.files.errors import BadInputError
        from span_plugin.preprocess.folders.conll import check_tagging_folder

        try:
            report += check_tagging_folder(folder)
        except BadInputError as err:
            raise CheckError(str(err)) from None
    elif kind == "qa":
        report += _check_qa(folder, sizes, rows)
    if os.path.isdir(os.path.join(folder, "phrase_label")):
        report += _check_phrases(folder, sizes)
    try:
        provenance.verify_folder(folder)
        report.extend(provenance.describe(record))
    except provenance.ProvenanceError as err:
        raise CheckError(str(err)) from None
    except (KeyError, TypeError) as err:
        raise CheckError(f"{os.path.join(folder, provenance.RECORD_NAME)}: an entry is "
                         f"missing or malformed ({err!r}); rebuild the folder with "
                         f"span-preprocess") from None
    return report


def _check_qa(folder, sizes, rows):
    """The QA files of every split (module docstring)."""
    report = []
    for split, items in sizes.items():
        windows = items[0][1]
        qa = os.path.join(folder, "qa", split)
        for part in ("window", "offsets", "answer"):
            _require(f"{qa}.{part}", f"the {part} file of {split}'s windows")
            n = len(indexed.IndexedReader(f"{qa}.{part}"))
            if n != windows:
                raise CheckError(f"{qa}.{part}.bin: {n} items but {items[0][0]} has "
                                 f"{windows} windows; line {min(n, windows) + 1} has no partner")
        raw = os.path.join(folder, "raw", f"{split}.jsonl")
        if not os.path.exists(raw):
            raise CheckError(f"{raw}: missing (the questions the windows point at)")
        questions = _count_text_lines(raw)
        if split in rows and rows[split] != questions:
            raise CheckError(f"{raw}: {questions} questions, but {provenance.RECORD_NAME} "
                             f"records {rows[split]}")
        window = _flat(f"{qa}.window").reshape(-1, 2)
        if windows and (window.shape[0] != windows or window[0, 0] != 0
                        or np.any(np.diff(window[:, 0]) > 1) or np.any(np.diff(window[:, 0]) < 0)
                        or window[-1, 0] != questions - 1):
            raise CheckError(f"{qa}.window.bin: the windows do not cover the {questions} "
                             f"questions of {raw} in order, one run of windows each")
        passage = _sizes(os.path.join(folder, "input1", split)) - 1
        if not np.array_equal(_sizes(f"{qa}.offsets"), 2 * passage):
            i = int(np.flatnonzero(_sizes(f"{qa}.offsets") != 2 * passage)[0])
            raise CheckError(f"{qa}.offsets.bin: line {i + 1}: not one (start, end) per "
                             f"passage token of the window")
        answer_sizes = _sizes(f"{qa}.answer")
        answers = _flat(f"{qa}.answer")
        owner = np.repeat(np.arange(windows), answer_sizes)
        bad = np.flatnonzero(~np.isin(answer_sizes, (0, 2)))
        if not bad.size and answers.size:
            start, end = answers[0::2], answers[1::2]
            limit = passage[owner[0::2]]
            bad = owner[0::2][(start < 0) | (end <= start) | (end > limit)]
        if bad.size:
            raise CheckError(f"{qa}.answer.bin: line {int(bad[0]) + 1}: not an empty item or "
                             f"one (start, end) inside the window's passage")
        report.append(f"{qa}: {windows} windows of {questions} questions, ok")
    return report


def _check_phrases(folder, sizes):
    """The phrase-pair files of a span-pair folder (module docstring)."""
    path = os.path.join(folder, "phrase_label", "labels.txt")
    if not os.path.exists(path):
        raise CheckError(f"{path}: missing (the declared phrase labels)")
    n_labels = sum(1 for line in read_file_lines(path) if line.strip())
    report = []
    for split, items in sizes.items():
        rows = items[0][1]
        labels = os.path.join(folder, "phrase_label", split)
        _require(labels, f"the phrase labels of {split}")
        per_row = _sizes(labels)
        ids = _flat(labels)
        if len(per_row) != rows:
            raise CheckError(f"{indexed.data_file_path(labels)}: {len(per_row)} items but "
                             f"{items[0][0]} has {rows}")
        if ids.size and (ids.min() < 0 or ids.max() >= n_labels):
            raise CheckError(f"{indexed.data_file_path(labels)}: label ids outside {path} "
                             f"({n_labels} labels)")
        for k in (0, 1):
            tokens = os.path.join(folder, f"input{k}", split)
            prefix = tokens + ".phrases.spans"
            _require(prefix, f"the phrases of input{k}")
            counts = _sizes(prefix) // 2
            if len(counts) != rows:
                raise CheckError(f"{indexed.data_file_path(prefix)}: {len(counts)} items but "
                                 f"{items[0][0]} has {rows}")
            bad = np.flatnonzero(counts != per_row)
            if bad.size:
                raise CheckError(f"{indexed.data_file_path(prefix)}: line {int(bad[0]) + 1}: "
                                 f"not one phrase per label of {indexed.data_file_path(labels)}")
            flat = _flat(prefix)
            if flat.size:
                owner = np.repeat(np.arange(rows), counts)
                length = _sizes(tokens)[owner] - 1
                start, end = flat[0::2], flat[1::2]
                out = np.flatnonzero((start < 0) | (end <= start) | (end > length))
                if out.size:
                    raise CheckError(f"{indexed.data_file_path(prefix)}: line "
                                     f"{int(owner[out[0]]) + 1}: a phrase outside its sentence")
        report.append(f"{labels}: {int(per_row.sum())} phrase pairs, ok")
    return report
