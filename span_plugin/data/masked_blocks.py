"""fairseq datasets that mask token blocks with :class:`~.span_masking.SpanMasker`.

``SpanMaskedDataset`` wraps the blocks the task builds (``TokenBlockDataset`` with
``<s>`` prepended) and returns ``{"source", "target"}`` per block, drawn from
``numpy.random.default_rng((seed, epoch, index))``: the same block gets the same
masking in every worker and on every relaunch, and another one each epoch. It is
computed once per (epoch, index) and read by two ``FieldDataset`` views.

``LinePiecesDataset`` cuts the lines longer than a block into pieces that fit, before
``TokenBlockDataset`` packs whole lines (``--sample-break-mode complete``,
``complete_doc``, ``eos``): fairseq would make such a line one block longer than
``--tokens-per-sample``, which ``fairseq-train`` then leaves out of training without a
word (and refuses in validation). A piece is never a lone ``</s>``, which
``complete_doc`` would take for a document break.

``BlockSegmentsDataset`` gives the n-gram segments of each block (``--span-masking
ngram``): the span index of the text (``{split}.spans.{bin,idx}``, one item per line,
offsets in the line's own tokens) moved into block positions, cut at the block's edges.
"""

from functools import lru_cache

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, FairseqDataset


class LinePiecesDataset(FairseqDataset):
    """Lines cut to at most ``max_len`` tokens: item i is the LongTensor piece
    ``lines[line[i]][begin[i]:begin[i] + sizes[i]]``.

    A line of n > max_len tokens (its ``</s>`` included) becomes ceil(n / max_len)
    pieces in order, all of max_len tokens but the last; when the last would be the
    line's ``</s>`` alone, the one before it gives it a token. Other lines (and the
    one-token items of empty lines, the document breaks) stay whole. The pieces hold
    the tokens of the lines in the same order, so token offsets in the text are those of
    the lines.

    lines: the token dataset, one item per line. sizes: int ``[lines]``.
    """

    def __init__(self, lines, sizes, max_len):
        super().__init__()
        if max_len < 3:  # a piece that gives a token away keeps two
            raise ValueError(f"blocks of {max_len} tokens are too short to cut lines into: "
                             f"--tokens-per-sample must be at least 4 (<s> included)")
        sizes = np.asarray(sizes, dtype=np.int64)
        count = np.maximum(1, -(-sizes // max_len))  # pieces of each line
        self.line = np.repeat(np.arange(len(sizes)), count)  # [P]
        first = np.cumsum(count) - count  # index of each line's first piece
        part = np.arange(len(self.line)) - first[self.line]  # piece number in its line
        self.begin = part * max_len
        end = np.minimum(self.begin + max_len, sizes[self.line])
        # A last piece of one token (the </s>) takes a token from the piece before it.
        lone = np.flatnonzero((count > 1) & (sizes % max_len == 1))
        last = first[lone] + count[lone] - 1
        self.begin[last] -= 1
        end[last - 1] -= 1
        self.sizes = end - self.begin
        self.lines = lines

    def __len__(self):
        return len(self.line)

    def __getitem__(self, index):
        b = int(self.begin[index])
        return self.lines[int(self.line[index])][b:b + int(self.sizes[index])]

    def num_tokens(self, index):
        return int(self.sizes[index])

    def size(self, index):
        return int(self.sizes[index])


class BlockSegmentsDataset(FairseqDataset):
    """Segments of block i: int64 ``[n, 2]`` (start, end) in block positions.

    blocks: the ``TokenBlockDataset`` (its ``block_to_dataset_index`` and
    ``slice_indices`` say which items and tokens a block holds).
    spans: the span index dataset, one flat ``[2 n]`` item per line.
    line_sizes: ``[lines]`` tokens of each line as binarized (with its ``</s>``).
    shift: positions before the block's first token (1 for a prepended ``<s>``).
    item_lines: ``[items]`` the line of each item the blocks were cut from, when those
    are a :class:`LinePiecesDataset`'s pieces (their ``line``); default: the lines.
    """

    def __init__(self, blocks, spans, line_sizes, shift=1, item_lines=None):
        super().__init__()
        self.blocks = blocks
        self.spans = spans
        self.line_starts = np.concatenate(([0], np.cumsum(line_sizes, dtype=np.int64)))
        self.shift = shift
        self.item_lines = item_lines

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, index):
        first, _, last = (int(x) for x in self.blocks.block_to_dataset_index[index])
        if self.item_lines is not None:
            first, last = int(self.item_lines[first]), int(self.item_lines[last])
        lo, hi = (int(x) for x in self.blocks.slice_indices[index])
        parts = [np.asarray(self.spans[j], dtype=np.int64).reshape(-1, 2) + self.line_starts[j]
                 for j in range(first, last + 1)]
        segs = np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)
        segs = np.clip(segs, lo, hi)
        segs = segs[segs[:, 1] > segs[:, 0]]
        return segs - lo + self.shift


class SpanMaskedDataset(BaseWrapperDataset):
    """Masked blocks: item i is ``{"source": LongTensor [T], "target": LongTensor [T]}``.

    dataset: the blocks (LongTensor items, ``<s>`` first).
    masker: a :class:`~.span_masking.SpanMasker`.
    word_boundaries: ``tokens -> bool [T]`` word starts (geometric spans, whole words),
    segments: a :class:`BlockSegmentsDataset` (n-gram spans). The masker's scheme
    ``span`` takes exactly one of the two, ``whole-word`` word_boundaries, ``token``
    neither.
    """

    def __init__(self, dataset, masker, seed, word_boundaries=None, segments=None):
        super().__init__(dataset)
        given = (word_boundaries is not None, segments is not None)
        needs = {"span": ((True, False), (False, True)), "whole-word": ((True, False),),
                 "token": ((False, False),)}[masker.scheme]
        if given not in needs:
            raise ValueError(
                f"masking scheme {masker.scheme!r}: expected "
                + {"span": "word_boundaries (geometric spans) or segments (n-grams)",
                   "whole-word": "word_boundaries and no segments",
                   "token": "neither word_boundaries nor segments"}[masker.scheme])
        self.masker = masker
        self.seed = seed
        self.word_boundaries = word_boundaries
        self.segments = segments
        self.epoch = 0

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return True  # the masking changes with the epoch, the sizes do not

    def set_epoch(self, epoch, **unused):
        super().set_epoch(epoch)
        self.epoch = epoch

    def __getitem__(self, index):
        return self._masked(self.seed, self.epoch, index)

    @lru_cache(maxsize=16)
    def _masked(self, seed, epoch, index):
        tokens = self.dataset[index].numpy()
        rng = np.random.default_rng((seed, epoch, index))
        units = self.segments[index] if self.segments is not None else None
        word_start = self.word_boundaries(tokens) if self.word_boundaries is not None else None
        source, target, _ = self.masker(rng, tokens, word_start=word_start, units=units)
        return {"source": torch.from_numpy(source), "target": torch.from_numpy(target)}


class FieldDataset(BaseWrapperDataset):
    """One field of a dataset of dicts (sizes and the rest as the wrapped dataset)."""

    def __init__(self, dataset, key):
        super().__init__(dataset)
        self.key = key

    def __getitem__(self, index):
        return self.dataset[index][self.key]
