"""Text file -> fairseq token binaries + parallel span index, in one multi-worker pass.

For ``binarize_file(text, "DATA/input0/train", spec, dict.txt)`` the outputs are

- ``DATA/input0/train.{bin,idx}``: the tokens, exactly as ``fairseq-preprocess
  --only-source --srcdict dict.txt`` writes the BPE text (same dtype, unknown symbols
  -> ``<unk>``, ``</s>`` appended), byte for byte, without fairseq
  (:mod:`span_plugin.preprocess.binary.vocab`, :mod:`span_plugin.preprocess.binary.indexed`);
- ``DATA/input0/train.spans.{bin,idx}``: the spans (:mod:`span_plugin.preprocess.binary.span_files`);
- optionally the BPE text (what ``multiprocessing_bpe_encoder.py`` would write).

One item per input line, in order, empty lines included (an empty line gives a token
item holding only ``</s>`` and an empty span item). Lines are read by
:mod:`span_plugin.formats.lines` (CRLF, BOM; invalid UTF-8 is a
:class:`~span_plugin.files.errors.BadInputError` naming the file and the 1-based line,
unless ``bad_utf8="replace"``).

Workers take byte ranges that start at line starts, write shard files, and the parent
appends the shards in file order, so the result does not depend on the worker count.
"""

import contextlib
import multiprocessing as mp
import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

from span_plugin.formats.lines import line_offsets, read_lines
from span_plugin.preprocess import progress
from span_plugin.preprocess.binary import indexed, span_files
from span_plugin.preprocess.binary.vocab import Vocab

PROGRESS_BYTES = 1 << 20  # files above this show a progress bar on a terminal
MIN_RANGE_BYTES = 1 << 18  # no worker process for less text than this


@dataclass
class BinarizeSummary:
    lines: int = 0
    tokens: int = 0  # without </s>
    spans: int = 0
    unknown: int = 0  # tokens mapped to <unk>
    empty: int = 0


_WORKER = {}


def _get_encoder(spec):
    key = repr(spec)
    if _WORKER.get("key") != key:
        _WORKER["key"], _WORKER["enc"] = key, spec.build()
    return _WORKER["enc"]


def _get_dict(path):
    if _WORKER.get("dict_path") != path:
        _WORKER["dict_path"], _WORKER["dict"] = path, Vocab.load(path)
    return _WORKER["dict"]


def _binarize_range(task):
    """Worker: one byte range -> token shard, span shard, optional BPE text shard."""
    path, start, end, out_prefix, spec, dict_path, with_spans, text_out, bad_utf8 = task
    enc = _get_encoder(spec)
    d = _get_dict(dict_path)
    index, unk, eos = d.indices, d.unk(), d.eos()
    dtype = indexed.token_dtype(len(d))
    s = BinarizeSummary()
    with contextlib.ExitStack() as stack:
        tok_writer = stack.enter_context(indexed.IndexedWriter(out_prefix, dtype))
        span_writer = stack.enter_context(span_files.SpanIndexWriter(
            span_files.span_prefix(out_prefix))) if with_spans else None
        text_f = stack.enter_context(open(text_out, "w", encoding="utf-8")) if text_out else None
        for line in read_lines(path, start, end, bad_utf8):
            tokens, spans = enc.encode(line)
            ids = [index.get(t, unk) for t in tokens]
            s.unknown += ids.count(unk)
            ids.append(eos)
            tok_writer.add(np.asarray(ids, dtype=dtype))  # ids < len(d): they fit dtype
            if span_writer is not None:
                span_writer.add(spans)
            if text_f is not None:
                text_f.write(" ".join(tokens) + "\n")
            s.lines += 1
            s.tokens += len(tokens)
            s.spans += len(spans)
            s.empty += not tokens
    return s


def binarize_file(input_path, output_prefix, spec, dict_path, workers=1, with_spans=True,
                  text_out=None, bad_utf8="error"):
    """Encode, segment and binarize one text file (see the module docstring).

    spec: an :class:`~span_plugin.preprocess.segmentation.encoding.EncoderSpec`.
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
        dtype = indexed.token_dtype(len(_get_dict(str(dict_path))))
        with indexed.IndexedWriter(output_prefix, dtype) as tok:
            for p in shard:
                tok.merge(p)
        if with_spans:
            with span_files.SpanIndexWriter(span_files.span_prefix(output_prefix)) as w:
                for p in shard:
                    w.merge(span_files.span_prefix(p))
        if text_out:
            with open(text_out, "wb") as out:
                for p in shard:
                    with open(f"{p}.txt", "rb") as f:
                        shutil.copyfileobj(f, out)
        return total
    finally:
        for p in shard:
            for q in (p, span_files.span_prefix(p)):
                for f in (indexed.data_file_path(q), indexed.index_file_path(q)):
                    if os.path.exists(f):
                        os.remove(f)
            if os.path.exists(f"{p}.txt"):
                os.remove(f"{p}.txt")


def binarize_whole(input_path, output_prefix, spec, dict_path, workers=1, text_out=None,
                   bad_utf8="error"):
    """``span-preprocess binarize``: :func:`binarize_file` plus ``dict.txt`` beside the
    output, all made in a temporary folder beside them and moved into place once every
    one exists, so that a failure (bad input, a killed run) leaves none of them, and
    never tokens without their spans. Returns the :class:`BinarizeSummary`."""
    output_prefix = os.path.abspath(str(output_prefix))
    out_dir, name = os.path.split(output_prefix)
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=out_dir)
    try:
        staged = os.path.join(tmp, name)
        summary = binarize_file(input_path, staged, spec, dict_path, workers=workers,
                                text_out=os.path.join(tmp, "bpe.txt") if text_out else None,
                                bad_utf8=bad_utf8)
        write_dict(dict_path, tmp)
        moves = [(os.path.join(tmp, "dict.txt"), os.path.join(out_dir, "dict.txt"))]
        for src, dst in ((staged, output_prefix),
                         (span_files.span_prefix(staged), span_files.span_prefix(output_prefix))):
            moves += [(indexed.data_file_path(src), indexed.data_file_path(dst)),
                      (indexed.index_file_path(src), indexed.index_file_path(dst))]
        for src, dst in moves:
            os.replace(src, dst)
        if text_out:
            shutil.move(os.path.join(tmp, "bpe.txt"), text_out)  # maybe another file system
        return summary
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_dict(dict_path, dest_dir):
    """Save ``dict.txt`` into ``dest_dir`` the way fairseq-preprocess does."""
    os.makedirs(dest_dir, exist_ok=True)
    Vocab.load(str(dict_path)).save(os.path.join(dest_dir, "dict.txt"))
