"""Dataset wrappers that carry span offsets through the task's input layout.

The span files (``span_index.py``) count each sentence's own tokens. The model reads
one concatenated sequence, ``<s> A </s> </s> B </s>`` for a pair with
``--init-token 0 --separator-token 2`` (``<s> A </s>`` for a single sentence). These
wrappers move every span of A and B to its position in that sequence, apply the same
shortening the tokens get, apply the paper's limits r (spans per example) and l
(tokens per span), and pad the spans of a batch into one LongTensor.

Special tokens (``<s>``, ``</s>``, the separator) are never inside a span: the span
files do not count them and offsets are shifted around them.
"""

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, FairseqDataset, data_utils

from span_plugin.modules.span_layout import place_spans


class SizedDataset:
    """``sizes``, ``size(i)`` and ``num_tokens(i)`` (fairseq's batching) from the int array
    ``self._sizes`` a dataset sets once at init. Put it first among the bases."""

    @property
    def sizes(self):
        return self._sizes

    def size(self, index):
        return int(self._sizes[index])

    def num_tokens(self, index):
        return self.size(index)


class CropWindowDataset(SizedDataset, BaseWrapperDataset):
    """Shortens token sequences to ``max_len`` and tells which window it kept.

    mode "truncate": keep the first ``max_len`` tokens (as fairseq's TruncateDataset).
    mode "random_crop": keep a random window of ``max_len`` tokens, drawn from
    ``(seed, epoch, index)`` so it is the same for the tokens and their spans.

    ``window(index) -> (lo, hi)``: positions ``[lo, hi)`` of the unshortened item
    that appear, moved to ``[0, hi - lo)``.
    """

    def __init__(self, dataset, max_len, mode="truncate", seed=1):
        super().__init__(dataset)
        if mode not in ("truncate", "random_crop"):
            raise ValueError(f"unknown shorten mode {mode!r}")
        self.max_len = int(max_len)
        self.mode = mode
        # read once: a wrapped dataset may recompute its sizes on every access
        self._full_sizes = np.asarray(dataset.sizes)
        self._sizes = np.minimum(self._full_sizes, self.max_len)
        self.seed = seed
        self.epoch = 0

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return True  # only the crop changes, never the sizes

    def set_epoch(self, epoch, **unused):
        super().set_epoch(epoch)
        self.epoch = epoch

    def window(self, index):
        length = int(self._full_sizes[index])
        excess = length - self.max_len
        if excess <= 0:
            return 0, length
        if self.mode == "truncate":
            return 0, self.max_len
        with data_utils.numpy_seed(self.seed, self.epoch, index):
            lo = int(np.random.randint(0, excess + 1))
        return lo, lo + self.max_len

    def __getitem__(self, index):
        lo, hi = self.window(index)
        return self.dataset[index][lo:hi]


class SideDataset(FairseqDataset):
    """Items that ride along with an example's tokens (spans, phrase pairs): they add
    nothing to its size, so batching by tokens counts the tokens alone."""

    @property
    def sizes(self):
        return np.zeros(len(self), dtype=np.int64)

    def num_tokens(self, index):
        return 0

    def size(self, index):
        return 0

    @property
    def supports_prefetch(self):
        return False


class LayoutSpansDataset(SideDataset):
    """The spans of each example, in the model's input layout.

    span_datasets: one dataset per input; item i is the flat offset vector
        ``[s0, e0, s1, e1, ...]`` of line i, counting that sentence's own tokens.
    starts: one int array ``[N]`` per input
        (:func:`span_plugin.modules.span_layout.layout_starts`).
    crop: the :class:`CropWindowDataset` the tokens go through, or None.
    max_spans (r): keep the first r spans that survive shortening (None or 0: all).
    max_span_tokens (l): cut each span to its first l tokens (None or 0: no limit).
    Placed by :func:`~span_plugin.modules.span_layout.place_spans`.

    ``__getitem__(i)`` -> LongTensor ``[n_i, 2]`` of (start, end), end exclusive,
    positions in the (shortened) token sequence of example i. A span the shortening
    cuts through is clipped to the kept window; spans outside it are dropped, so
    ``n_i`` may be 0.
    ``collater(items)`` -> LongTensor ``[B, S, 2]``, ``S = max(1, max n_i)``,
    padded with (0, 0) rows (empty spans, which the span encoders ignore).
    """

    def __init__(self, span_datasets, starts, crop=None, max_spans=None, max_span_tokens=None):
        super().__init__()
        assert len(span_datasets) == len(starts)
        self.span_datasets = span_datasets
        self.starts = starts
        self.crop = crop
        self.max_spans = max_spans
        self.max_span_tokens = max_span_tokens

    def __len__(self):
        return len(self.starts[0])

    def __getitem__(self, index):
        parts = [torch.as_tensor(np.asarray(ds[index]), dtype=torch.long)
                 for ds in self.span_datasets]
        return place_spans(parts, [st[index] for st in self.starts],
                           None if self.crop is None else self.crop.window(index),
                           self.max_spans, self.max_span_tokens)

    def collater(self, samples):
        if len(samples) == 0:
            return {}
        width = max(1, max(s.size(0) for s in samples))
        out = torch.zeros(len(samples), width, 2, dtype=torch.long)
        for b, s in enumerate(samples):
            out[b, : s.size(0)] = s
        return out
