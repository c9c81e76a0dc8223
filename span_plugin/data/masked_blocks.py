"""fairseq datasets that mask token blocks with :class:`~.span_masking.SpanMasker`.

``SpanMaskedDataset`` wraps the blocks the task builds (``TokenBlockDataset`` with
``<s>`` prepended) and returns ``{"source", "target"}`` per block, drawn from
``numpy.random.default_rng((seed, epoch, index))``: the same block gets the same
masking in every worker and on every relaunch, and another one each epoch. It is
computed once per (epoch, index) and read by two ``FieldDataset`` views.

``BlockSegmentsDataset`` gives the n-gram segments of each block (``--span-masking
ngram``): the span index of the text (``{split}.spans.{bin,idx}``, one item per line,
offsets in the line's own tokens) moved into block positions, cut at the block's edges.
"""

from functools import lru_cache

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, FairseqDataset


class BlockSegmentsDataset(FairseqDataset):
    """Segments of block i: int64 ``[n, 2]`` (start, end) in block positions.

    blocks: the ``TokenBlockDataset`` (its ``block_to_dataset_index`` and
    ``slice_indices`` say which lines and tokens a block holds).
    spans: the span index dataset, one flat ``[2 n]`` item per line.
    line_sizes: ``[lines]`` tokens of each line as binarized (with its ``</s>``).
    shift: positions before the block's first token (1 for a prepended ``<s>``).
    """

    def __init__(self, blocks, spans, line_sizes, shift=1):
        super().__init__()
        self.blocks = blocks
        self.spans = spans
        self.line_starts = np.concatenate(([0], np.cumsum(line_sizes, dtype=np.int64)))
        self.shift = shift

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, index):
        first, _, last = (int(x) for x in self.blocks.block_to_dataset_index[index])
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
    word_boundaries: ``tokens -> bool [T]`` word starts (geometric spans), or
    segments: a :class:`BlockSegmentsDataset` (n-gram spans); exactly one of the two.
    """

    def __init__(self, dataset, masker, seed, word_boundaries=None, segments=None):
        super().__init__(dataset)
        if (word_boundaries is None) == (segments is None):
            raise ValueError("give word_boundaries (geometric spans) or segments (n-grams)")
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
        if self.segments is not None:
            source, target, _ = self.masker(rng, tokens, units=self.segments[index])
        else:
            source, target, _ = self.masker(rng, tokens, word_start=self.word_boundaries(tokens))
        return {"source": torch.from_numpy(source), "target": torch.from_numpy(target)}


class FieldDataset(BaseWrapperDataset):
    """One field of a dataset of dicts (sizes and the rest as the wrapped dataset)."""

    def __init__(self, dataset, key):
        super().__init__(dataset)
        self.key = key

    def __getitem__(self, index):
        return self.dataset[index][self.key]
