"""Sentence pairs with aligned phrase pairs (JSON Lines, read by
:mod:`span_plugin.formats.pairs`) -> a span-pair task folder: what ``span-preprocess
table`` writes plus each line's phrase-pair sources and targets as token spans and their
labels. :func:`check_built_from` refuses a folder built from other phrase pairs. The
input keys, the folder's files and the label rules: docs/SPAN_PAIRS.md, section
"Module notes"."""

import bisect
import os

import numpy as np

from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_file_lines
from span_plugin.formats.pairs import DEFAULT_PHRASE_LABELS, read_pair_rows
from span_plugin.formats.rows import SplitRows
from span_plugin.preprocess.binary import indexed, span_files
from span_plugin.preprocess.records import provenance
from span_plugin.preprocess.binary.binarize import _get_encoder
from span_plugin.preprocess.folders.folder import (folder_name, given_splits,
                                           restrict_to_train_labels, whole_folder,
                                           write_task_folder)

PHRASE_SUFFIX = ".phrases.spans"  # ends in .spans: `span-preprocess check` reads it as a span file, not tokens
PHRASE_LABEL_DIR = "phrase_label"
PHRASE_LABELS_FILE = "labels.txt"
LABEL_DTYPE = np.int32


def phrase_prefix(token_prefix):
    """``DATA/input0/train`` -> ``DATA/input0/train.phrases.spans``."""
    return token_prefix + PHRASE_SUFFIX


class _BadRange(Exception):
    pass


def range_to_tokens(offsets, starts, ends, text, lo, hi):
    """Character range ``[lo, hi)`` -> token range ``(first, last + 1)``.

    offsets: per-token content ranges; starts/ends: their starts and ends as lists
    (for bisect). Raises _BadRange saying what is wrong.
    """
    if not text:
        raise _BadRange("phrase on an empty sentence")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)):
        raise _BadRange(f"range {[lo, hi]} is not two integers")
    if lo >= hi:
        raise _BadRange(f"range {[lo, hi]} is empty")
    if lo < 0 or hi > len(text):
        raise _BadRange(f"range {[lo, hi]} is outside the sentence (length {len(text)})")
    first = bisect.bisect_left(ends, lo + 1)  # first token ending after lo
    last = bisect.bisect_right(starts, hi - 1) - 1  # last token starting before hi
    if first < len(offsets) and offsets[first][0] < lo < offsets[first][1]:
        raise _BadRange(f"range {[lo, hi]} starts inside token {first} (characters "
                        f"{list(offsets[first])}: {text[offsets[first][0]:offsets[first][1]]!r})")
    if last >= 0 and offsets[last][0] < hi < offsets[last][1]:
        raise _BadRange(f"range {[lo, hi]} ends inside token {last} (characters "
                        f"{list(offsets[last])}: {text[offsets[last][0]:offsets[last][1]]!r})")
    # Whitespace-only tokens (empty content) hold no phrase characters.
    while first <= last and offsets[first][0] == offsets[first][1]:
        first += 1
    if first > last:
        raise _BadRange(f"range {[lo, hi]} ({text[lo:hi]!r}) holds no token")
    return first, last + 1


# ----------------------------------------------------------------------------------
# Reading


def read_pairs(path, enc, text_columns=("sentence1", "sentence2"), label_column=None,
               phrases_key="phrases", phrase_labels=DEFAULT_PHRASE_LABELS,
               bad_utf8="error"):
    """Read one JSON Lines file (:func:`span_plugin.formats.pairs.read_pair_rows`) into
    :class:`SplitRows` with ``phrases[i]`` (list of ((s0, e0), (s1, e1), label id), token
    offsets) and ``token_counts[i]`` (the two sentences' token counts). Every bad row is
    an error ``FILE:LINE: why``; there is no skipping of bad rows."""
    out = SplitRows(inputs=[[], []], labels=[] if label_column is not None else None,
                    extra=("phrases", "token_counts"))
    out.phrases, out.token_counts = [], []
    rows = read_pair_rows(path, text_columns, label_column, phrases_key, phrase_labels,
                          bad_utf8)
    out.replacements = rows.replacements
    for row in rows:
        encoded = [enc.tokenizer.tokens_with_offsets(t) for t in row.texts]
        converted = []
        for j, (source, target, label) in enumerate(row.phrases):
            spans = []
            for side, (key, rng) in enumerate((("source", source), ("target", target))):
                _, offsets = encoded[side]
                try:
                    spans.append(range_to_tokens(
                        offsets, [o[0] for o in offsets], [o[1] for o in offsets],
                        row.texts[side], *rng))
                except _BadRange as bad:
                    raise BadInputError(f"{path}:{row.line}: phrase pair {j} {key} "
                                        f"({text_columns[side]!r}): {bad}") from None
            converted.append((spans[0], spans[1], label))
        for k, t in enumerate(row.texts):
            out.inputs[k].append(t)
        if row.label is not None:
            out.labels.append(row.label)
        out.phrases.append(converted)
        out.token_counts.append((len(encoded[0][0]), len(encoded[1][0])))
        out.lines.append(row.line)
        out.rows += 1
    return out


# ----------------------------------------------------------------------------------
# Writing


def write_phrase_files(out_dir, split, rows):
    """Phrase offsets of both inputs and their labels for one split."""
    for k in range(2):
        prefix = phrase_prefix(os.path.join(out_dir, f"input{k}", split))
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        with span_files.SpanIndexWriter(prefix) as w:
            for pairs in rows.phrases:
                w.add([p[k] for p in pairs])
    prefix = os.path.join(out_dir, PHRASE_LABEL_DIR, split)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    with indexed.IndexedWriter(prefix, LABEL_DTYPE) as w:
        for pairs in rows.phrases:
            w.add(np.array([p[2] for p in pairs], dtype=LABEL_DTYPE))


def read_phrase_labels(folder):
    path = os.path.join(folder, PHRASE_LABEL_DIR, PHRASE_LABELS_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: not a span-pair folder (build one with "
                                f"`span-preprocess pairs`, docs/SPAN_PAIRS.md)")
    return [line for line in read_file_lines(path) if line.strip()]


def prepare_pairs(out_dir, files, options, *, text_columns=("sentence1", "sentence2"),
                  label_column=None, phrases_key="phrases",
                  phrase_labels=DEFAULT_PHRASE_LABELS, positive=None):
    """Build a span-pair folder from ``files`` = {"train": path, "valid": path, ...}
    (JSON Lines) with ``options``
    (:class:`~span_plugin.preprocess.folders.options.FolderOptions`). Returns
    ``({split: rows}, {split: phrase pairs})``."""
    if not files:
        raise ValueError("give at least one of --train, --valid, --test")
    if len(set(phrase_labels)) != len(phrase_labels) or any(
            not lab or any(c.isspace() for c in lab) for lab in phrase_labels):
        raise ValueError(f"phrase labels {list(phrase_labels)}: expected distinct names "
                         f"without whitespace")
    enc = _get_encoder(options.spec)
    splits, n_pairs = [], {}
    for split, path in given_splits(files):
        # As span-preprocess table: the labels of a test file are never read.
        rows = read_pairs(path, enc, text_columns, None if split == "test" else label_column,
                          phrases_key, phrase_labels, options.bad_utf8)
        splits.append((split, str(path), rows))
    # Before the phrase files: a row left out leaves every file together.
    restrict_to_train_labels(splits, options.unknown_labels or "error")
    with whole_folder(out_dir) as tmp:  # whole or absent
        for split, _, rows in splits:
            write_phrase_files(tmp, split, rows)
            n_pairs[split] = sum(len(p) for p in rows.phrases)
        os.makedirs(os.path.join(tmp, PHRASE_LABEL_DIR), exist_ok=True)
        with open(os.path.join(tmp, PHRASE_LABEL_DIR, PHRASE_LABELS_FILE), "w",
                  encoding="utf-8", newline="\n") as f:
            f.write("".join(lab + "\n" for lab in phrase_labels))
        counts = write_task_folder(tmp, splits, options,
                                   task=options.name or folder_name(out_dir), positive=positive)
        # The tokens were binarized in a second pass: its counts must equal ours.
        for split, path, rows in splits:
            for k in range(2):
                toks = indexed.IndexedReader(os.path.join(tmp, f"input{k}", split))
                mine = np.asarray([c[k] for c in rows.token_counts]) + 1
                bad = np.flatnonzero(np.asarray(toks.sizes) != mine)
                if bad.size:
                    raise BadInputError(f"{path}:{rows.lines[bad[0]]}: input{k} binarized to "
                                        f"{toks.sizes[bad[0]] - 1} tokens, phrases counted "
                                        f"{mine[bad[0]] - 1}")
    return counts, n_pairs


# ----------------------------------------------------------------------------------
# Is an existing folder the one these files make?


def check_built_from(folder, files):
    """Refuse a folder that was not built from ``files`` = {split: path}: the sha256 its
    data record gives each split's source must be that file's. Raises
    :class:`~span_plugin.preprocess.records.provenance.ProvenanceError` naming the folder, the
    split, both files and both hashes (a folder made from other phrase pairs: another
    source, exclusion set, seed or aligner)."""
    record = provenance.read_record(folder)
    if record is None:
        raise provenance.ProvenanceError(
            f"{folder}: no {provenance.RECORD_NAME}, so nothing tells which phrase pairs "
            f"built it; remove the folder to rebuild it")
    sources = record.get("source") or {}
    for split, path in files.items():
        entry = sources.get(split)
        actual = provenance.sha256(path)
        if entry is None:
            raise provenance.ProvenanceError(
                f"{folder}: its record has no {split} split, but {path} was given for one; "
                f"remove the folder to rebuild it")
        if entry.get("sha256") != actual:
            raise provenance.ProvenanceError(
                f"{folder} was built from {entry.get('path')} (sha256 "
                f"{provenance.short(entry.get('sha256') or '')}) as its {split} split, not from "
                f"{path} (sha256 {provenance.short(actual)}): it holds other phrase pairs "
                f"(another source, exclusion set, seed or aligner). Remove it to rebuild it, "
                f"or give another folder")
    return record
