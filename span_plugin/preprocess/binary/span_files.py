"""The span-index files that sit beside fairseq-preprocess outputs (numpy only).

Layout (the data contract, see docs/DATA.md): for a token file set
``DATA/input0/train.{bin,idx}`` the spans live in ``DATA/input0/train.spans.{bin,idx}``,
a fairseq mmap indexed dataset of int32 (:mod:`span_plugin.preprocess.binary.indexed`). Item i
belongs to line i of that input and is the flat vector ``[s0, e0, s1, e1, ...]`` of
(start, end) offsets, end exclusive, that count the sentence's own tokens (before
``<s>``, separators and ``</s>`` are added). Spans are sorted and do not overlap; the
segmenters make them cover every token. :mod:`span_plugin.data.span_index` opens them as
fairseq datasets for training.
"""

import numpy as np

from span_plugin.preprocess.binary import indexed

SPAN_SUFFIX = ".spans"
SPAN_DTYPE = np.int32


class SpanAlignmentError(ValueError):
    """A span file that does not fit the token file it belongs to."""


def span_prefix(token_prefix: str) -> str:
    """``DATA/input0/train`` -> ``DATA/input0/train.spans``."""
    return token_prefix + SPAN_SUFFIX


def exists(prefix: str) -> bool:
    return indexed.exists(prefix)


class SpanIndexWriter:
    """Writes one span item per sentence, in order.

    Usage: ``with SpanIndexWriter(prefix) as w: w.add([(0, 2), (2, 3)])``.
    """

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._writer = indexed.IndexedWriter(prefix, SPAN_DTYPE)

    def add(self, spans):
        """spans: sequence of (start, end) pairs; may be empty (an empty line)."""
        self._writer.add(np.array([o for pair in spans for o in pair], dtype=SPAN_DTYPE))

    def merge(self, other_prefix: str):
        """Append a finished file set (a worker's shard), keeping its order."""
        self._writer.merge(other_prefix)

    def close(self):
        self._writer.finalize()

    def abort(self):
        """Discard everything written (no file appears under the final names)."""
        self._writer.abort()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            self.close()
        else:
            self.abort()


def require(prefix: str):
    """Raise FileNotFoundError, saying how to build it, when a span file set is missing."""
    if not exists(prefix):
        raise FileNotFoundError(
            f"span index {prefix}.{{bin,idx}} not found; build it with "
            f"`span-preprocess` (see docs/DATA.md)"
        )


def read_spans(prefix: str) -> indexed.IndexedReader:
    """Open a span file set; item i is a flat int32 array ``[2 * n_spans]``."""
    require(prefix)
    return indexed.IndexedReader(prefix)


def check_alignment(prefix: str, spans, sentence_lengths):
    """Check a span file set against the lengths of the sentences it indexes.

    spans: the file set as opened by :func:`read_spans` or
    :func:`span_plugin.data.span_index.load_spans` (``prefix`` names it in errors).
    sentence_lengths: int array ``[N]``, each sentence's own token count (for
    fairseq-preprocess outputs: ``tokens.sizes - 1``, the appended ``</s>`` removed).
    Raises SpanAlignmentError naming the file and the first bad item (0-based,
    which is also the 0-based line of the text the item came from).
    """
    sentence_lengths = np.asarray(sentence_lengths, dtype=np.int64)
    name = indexed.data_file_path(prefix)
    if len(spans) != len(sentence_lengths):
        raise SpanAlignmentError(
            f"{name}: {len(spans)} span items but the token file has "
            f"{len(sentence_lengths)} sentences; rebuild the spans with the text the "
            f"tokens came from"
        )
    sizes = np.asarray(spans.sizes, dtype=np.int64)
    odd = np.flatnonzero(sizes % 2)
    if odd.size:
        raise SpanAlignmentError(
            f"{name}: item {odd[0]} has {sizes[odd[0]]} values, expected (start, end) pairs"
        )
    flat = np.fromfile(name, dtype=SPAN_DTYPE)
    if flat.size != sizes.sum():
        raise SpanAlignmentError(
            f"{name}: holds {flat.size} values but its index lists {sizes.sum()}; "
            f"the file is truncated or corrupt"
        )
    if flat.size == 0:
        return
    starts, ends = flat[0::2].astype(np.int64), flat[1::2].astype(np.int64)
    owner = np.repeat(np.arange(len(sizes)), sizes // 2)
    limit = sentence_lengths[owner]
    # Sorted and non-overlapping: each start is at or past the previous end of the
    # same sentence.
    first_of_item = np.ones_like(owner, dtype=bool)
    first_of_item[1:] = owner[1:] != owner[:-1]
    prev_end = np.concatenate([[0], ends[:-1]])
    prev_end[first_of_item] = 0
    bad = (starts < prev_end) | (starts >= ends) | (ends > limit)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        i = int(owner[k])
        raise SpanAlignmentError(
            f"{name}: item {i} has span ({starts[k]}, {ends[k]}) but sentence {i} has "
            f"{limit[k]} tokens; spans must satisfy 0 <= start < end <= length, sorted "
            f"and not overlapping"
        )
