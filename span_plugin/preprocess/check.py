"""Validate a binarized task folder: item counts agree, every span lies inside its
sentence, and every file is the one its data record lists (``span-preprocess check
DIR``, which also prints the record)."""

import glob
import os
import re

from span_plugin.preprocess import indexed, provenance, span_files


class CheckError(ValueError):
    """The first problem found; the message names the file and the 1-based line."""


def _splits(input_dir):
    out = []
    for idx in sorted(glob.glob(os.path.join(input_dir, "*.idx"))):
        name = os.path.basename(idx)[:-len(".idx")]
        if not name.endswith(span_files.SPAN_SUFFIX) and ".shard" not in name:
            out.append(name)
    return out


def _count_text_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def check_folder(folder):
    """Check ``folder`` (input*/, label/, raw/ as glue.prepare_task writes them).
    Returns a list of report lines; raises CheckError on the first problem."""
    inputs = sorted(d for d in glob.glob(os.path.join(folder, "input*")) if os.path.isdir(d))
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
        for path in (os.path.join(label_dir, split), ):
            if indexed.exists(path):
                items.append((path + ".bin", len(indexed.IndexedReader(path))))
            elif os.path.exists(path + ".label"):
                items.append((path + ".label", _count_text_lines(path + ".label")))
        for k in sorted(glob.glob(os.path.join(folder, "raw", f"{split}.input*"))):
            items.append((k, _count_text_lines(k)))
        counts = {n for _, n in items}
        if len(counts) > 1:
            first = items[0]
            bad = next(x for x in items if x[1] != first[1])
            raise CheckError(f"{bad[0]}: {bad[1]} items but {first[0]} has {first[1]}; "
                             f"line {min(bad[1], first[1]) + 1} has no partner")
    try:
        record = provenance.verify_folder(folder)
    except provenance.ProvenanceError as err:
        raise CheckError(str(err)) from None
    if record is None:
        report.append(f"{folder}: no {provenance.RECORD_NAME} (made before span_plugin 0.2 "
                      f"or by hand): it trains, with a warning, but inference cannot check "
                      f"how it was tokenized and segmented")
    else:
        report.extend(provenance.describe(record))
    return report
