"""Text file -> fairseq token binaries + parallel span index, in one multi-worker pass.

For ``binarize_file(text, "DATA/input0/train", spec, dict.txt)`` the outputs are

- ``DATA/input0/train.{bin,idx}``: the tokens, written with fairseq's own
  ``Dictionary`` and ``MMapIndexedDatasetBuilder`` exactly as ``fairseq-preprocess
  --only-source --srcdict dict.txt`` writes the BPE text (same dtype, unknown symbols
  -> ``<unk>``, ``</s>`` appended), byte for byte;
- ``DATA/input0/train.spans.{bin,idx}``: the spans (:mod:`span_plugin.data.span_index`);
- optionally the BPE text (what ``multiprocessing_bpe_encoder.py`` would write).

One item per input line, in order, empty lines included (an empty line gives a token
item holding only ``</s>`` and an empty span item). Lines are split on ``\\n`` only; a
``\\r`` before it is dropped (CRLF files), a UTF-8 BOM at the start of the file is
dropped. Invalid UTF-8 raises :class:`BadInputError` naming the file and the 1-based
line, unless ``bad_utf8="replace"`` (then U+FFFD stands for each bad byte sequence).

Workers take byte ranges that start at line starts, write shard files, and the parent
appends the shards in file order, so the result does not depend on the worker count.
"""

import contextlib
import multiprocessing as mp
import os
import shutil
from dataclasses import dataclass

import numpy as np
import torch
from fairseq.data import Dictionary, indexed_dataset

from span_plugin.data import span_index

from span_plugin.preprocess import progress

BOM = b"\xef\xbb\xbf"
PROGRESS_BYTES = 1 << 20  # files above this show a progress bar on a terminal
MIN_RANGE_BYTES = 1 << 18  # no worker process for less text than this


class BadInputError(ValueError):
    """Input that cannot be processed without losing alignment; names file and line."""


@dataclass
class BinarizeSummary:
    lines: int = 0
    tokens: int = 0  # without </s>
    spans: int = 0
    unknown: int = 0  # tokens mapped to <unk>
    empty: int = 0


def line_offsets(path, parts):
    """Up to ``parts`` byte ranges of ``path``, each starting at a line start."""
    size = os.path.getsize(path)
    bounds = [0]
    with open(path, "rb") as f:
        for k in range(1, parts):
            pos = size * k // parts
            if pos <= bounds[-1]:
                continue
            f.seek(pos - 1)
            f.readline()  # the line that holds byte pos-1 ends the previous range
            pos = f.tell()
            if bounds[-1] < pos < size:
                bounds.append(pos)
    bounds.append(size)
    return list(zip(bounds[:-1], bounds[1:]))


def read_lines(path, start, end, bad_utf8="error", first_line=None):
    """Decoded lines of bytes ``[start, end)`` of ``path`` (``\\r\\n`` and BOM handled).

    first_line: 1-based number of the range's first line, for error messages (None:
    counted on demand, only when an error is raised).
    """
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    if start == 0 and data.startswith(BOM):
        data = data[len(BOM):]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line starts no new line
    out = []
    for i, raw in enumerate(lines):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            if bad_utf8 == "replace":
                out.append(raw.decode("utf-8", errors="replace"))
                continue
            if first_line is None:
                first_line = count_lines(path, start) + 1
            raise BadInputError(
                f"{path}:{first_line + i}: invalid UTF-8 at byte {err.start} of the line "
                f"({err.reason}); fix the file or pass --bad-utf8 replace"
            ) from None
    return out


def count_lines(path, end=None):
    """Newlines in the first ``end`` bytes of ``path`` (all of it when None)."""
    n = 0
    with open(path, "rb") as f:
        left = end if end is not None else float("inf")
        while left > 0:
            block = f.read(int(min(left, 1 << 24)))
            if not block:
                break
            n += block.count(b"\n")
            left -= len(block)
    return n


def _token_dtype(dictionary):
    return indexed_dataset.best_fitting_int_dtype(len(dictionary))


_WORKER = {}


def _get_encoder(spec):
    key = repr(spec)
    if _WORKER.get("key") != key:
        _WORKER["key"], _WORKER["enc"] = key, spec.build()
    return _WORKER["enc"]


def _get_dict(path):
    if _WORKER.get("dict_path") != path:
        _WORKER["dict_path"], _WORKER["dict"] = path, Dictionary.load(path)
    return _WORKER["dict"]


def _binarize_range(task):
    """Worker: one byte range -> token shard, span shard, optional BPE text shard."""
    path, start, end, out_prefix, spec, dict_path, with_spans, text_out, bad_utf8 = task
    enc = _get_encoder(spec)
    d = _get_dict(dict_path)
    index, unk, eos = d.indices, d.unk(), d.eos()
    tok_builder = indexed_dataset.MMapIndexedDatasetBuilder(
        indexed_dataset.data_file_path(out_prefix), dtype=_token_dtype(d))
    span_writer = span_index.SpanIndexWriter(span_index.span_prefix(out_prefix)) \
        if with_spans else None
    text_f = open(text_out, "w", encoding="utf-8") if text_out else None
    s = BinarizeSummary()
    for line in read_lines(path, start, end, bad_utf8):
        tokens, spans = enc.encode(line)
        ids = [index.get(t, unk) for t in tokens]
        s.unknown += ids.count(unk)
        ids.append(eos)
        tok_builder.add_item(torch.from_numpy(np.asarray(ids, dtype=np.int32)))
        if span_writer is not None:
            span_writer.add(spans)
        if text_f is not None:
            text_f.write(" ".join(tokens) + "\n")
        s.lines += 1
        s.tokens += len(tokens)
        s.spans += len(spans)
        s.empty += not tokens
    tok_builder.finalize(indexed_dataset.index_file_path(out_prefix))
    if span_writer is not None:
        span_writer.close()
    if text_f is not None:
        text_f.close()
    return s


def binarize_file(input_path, output_prefix, spec, dict_path, workers=1, with_spans=True,
                  text_out=None, bad_utf8="error"):
    """Encode, segment and binarize one text file (see the module docstring).

    spec: an :class:`~span_plugin.tokenizers.encoders.EncoderSpec`.
    Returns a :class:`BinarizeSummary`.
    """
    input_path, output_prefix = str(input_path), str(output_prefix)
    os.makedirs(os.path.dirname(os.path.abspath(output_prefix)), exist_ok=True)
    size = os.path.getsize(input_path)
    # A worker per MIN_RANGE_BYTES at most: small files are not worth a process pool.
    parts = max(1, min(workers, size // MIN_RANGE_BYTES))
    if progress.on_terminal() and size > PROGRESS_BYTES:
        parts *= 8  # finer ranges only so that the bar moves; the output is the same
    ranges = line_offsets(input_path, parts) if size else [(0, 0)]
    shard = [f"{output_prefix}.shard{k}" for k in range(len(ranges))]
    tasks = [(input_path, s, e, shard[k], spec, str(dict_path), with_spans,
              f"{shard[k]}.txt" if text_out else None, bad_utf8)
             for k, (s, e) in enumerate(ranges)]
    try:
        with progress.bar(size, os.path.basename(input_path)) as shown, contextlib.ExitStack() as stack:
            # The encoder and dictionary are built here once; forked workers share them.
            _get_encoder(spec)
            _get_dict(str(dict_path))
            if workers <= 1 or len(tasks) == 1:
                done = map(_binarize_range, tasks)
            else:
                pool = stack.enter_context(mp.get_context("fork").Pool(min(workers, len(tasks))))
                done = pool.imap(_binarize_range, tasks)
            results = []
            for t, r in zip(tasks, done):
                results.append(r)
                shown.update(t[2] - t[1])
        total = BinarizeSummary()
        for r in results:
            for k in total.__dict__:
                setattr(total, k, getattr(total, k) + getattr(r, k))
        d = _get_dict(str(dict_path))
        tok = indexed_dataset.MMapIndexedDatasetBuilder(
            indexed_dataset.data_file_path(output_prefix), dtype=_token_dtype(d))
        for p in shard:
            tok.merge_file_(p)
        tok.finalize(indexed_dataset.index_file_path(output_prefix))
        if with_spans:
            with span_index.SpanIndexWriter(span_index.span_prefix(output_prefix)) as w:
                for p in shard:
                    w.merge(span_index.span_prefix(p))
        if text_out:
            with open(text_out, "wb") as out:
                for p in shard:
                    with open(f"{p}.txt", "rb") as f:
                        shutil.copyfileobj(f, out)
        return total
    finally:
        for p in shard:
            for q in (p, span_index.span_prefix(p)):
                for f in (indexed_dataset.data_file_path(q), indexed_dataset.index_file_path(q)):
                    if os.path.exists(f):
                        os.remove(f)
            if os.path.exists(f"{p}.txt"):
                os.remove(f"{p}.txt")


def write_dict(dict_path, dest_dir):
    """Save ``dict.txt`` into ``dest_dir`` the way fairseq-preprocess does."""
    os.makedirs(dest_dir, exist_ok=True)
    Dictionary.load(str(dict_path)).save(os.path.join(dest_dir, "dict.txt"))
