"""Phrase-pair files of a span-pair folder (``span-preprocess pairs``, docs/SPAN_PAIRS.md)
checked and carried into the model's input layout.

Files: ``input0/{split}.phrases.spans``, ``input1/{split}.phrases.spans`` (span-file format, item i =
the sources / targets of line i's phrase pairs, in that sentence's own tokens; spans may
overlap and nest) and ``phrase_label/{split}`` (item i = one label id per pair).
"""

import numpy as np
import torch
from fairseq.data import indexed_dataset

from span_plugin.data.span_datasets import SideDataset
from span_plugin.data.span_index import SPAN_DTYPE, SpanAlignmentError, load_spans
from span_plugin.modules.span_layout import place_phrase_pairs

IGNORE = -100  # padding of phrase targets: cross-entropy's ignore_index


def _flat(prefix, dtype):
    return np.fromfile(indexed_dataset.data_file_path(prefix), dtype=dtype).astype(np.int64)


def check_phrase_files(prefixes, label_prefix, lengths, num_labels):
    """Check the two phrase files and the label file of a split.

    prefixes: (input0, input1) phrase prefixes; lengths: (len0 [N], len1 [N]) each
    sentence's own token count; num_labels: the declared phrase labels.
    Returns ``(spans0, spans1, labels)`` datasets. Raises SpanAlignmentError naming the
    file and the first bad line (1-based).
    """
    spans = [load_spans(p) for p in prefixes]
    labels = indexed_dataset.MMapIndexedDataset(label_prefix)
    n = len(lengths[0])
    for name, ds in ((prefixes[0], spans[0]), (prefixes[1], spans[1]), (label_prefix, labels)):
        if len(ds) != n:
            raise SpanAlignmentError(f"{indexed_dataset.data_file_path(name)}: {len(ds)} items, "
                                     f"but the token files have {n} lines; rebuild the folder")
    pairs = np.asarray(labels.sizes, dtype=np.int64)
    for prefix, ds in zip(prefixes, spans):
        sizes = np.asarray(ds.sizes, dtype=np.int64)
        bad = np.flatnonzero(sizes != 2 * pairs)
        if bad.size:
            raise SpanAlignmentError(
                f"{indexed_dataset.data_file_path(prefix)}: line {bad[0] + 1} has "
                f"{sizes[bad[0]] // 2} phrases but {pairs[bad[0]]} phrase labels; rebuild the folder")
    owner = np.repeat(np.arange(n), pairs)
    for prefix, length in zip(prefixes, lengths):
        flat = _flat(prefix, SPAN_DTYPE)
        start, end = flat[0::2], flat[1::2]
        bad = np.flatnonzero((start < 0) | (start >= end) | (end > np.asarray(length)[owner]))
        if bad.size:
            k = int(bad[0])
            raise SpanAlignmentError(
                f"{indexed_dataset.data_file_path(prefix)}: line {owner[k] + 1} has phrase "
                f"({start[k]}, {end[k]}) but its sentence has {length[owner[k]]} tokens; "
                f"expected 0 <= start < end <= length")
    flat = _flat(label_prefix, np.int32)  # the dtype span-preprocess pairs writes
    bad = np.flatnonzero((flat < 0) | (flat >= num_labels))
    if bad.size:
        raise SpanAlignmentError(
            f"{indexed_dataset.data_file_path(label_prefix)}: line {owner[bad[0]] + 1} has "
            f"phrase label id {flat[bad[0]]}, expected 0..{num_labels - 1}")
    return spans[0], spans[1], labels


def count_cut_pairs(prefix1, spans1, starts1, max_len):
    """How many phrase pairs the truncation to ``max_len`` tokens cuts. Only targets
    (input1, after input0) can be cut: a pair is kept when its target ends inside."""
    ends = _flat(prefix1, SPAN_DTYPE)[1::2]
    owner = np.repeat(np.arange(len(spans1)), np.asarray(spans1.sizes, dtype=np.int64) // 2)
    return int((ends + np.asarray(starts1)[owner] > max_len).sum())


class PhrasePairsDataset(SideDataset):
    """The phrase pairs of each example in the model's input layout.

    ``__getitem__(i)`` -> LongTensor ``[P_i, 5]``: source start, end, target start, end
    (positions in ``src_tokens``) and the label id; pairs whose target the truncation to
    ``max_len`` cuts are dropped (counted by the task when loading).
    ``part="phrases"`` collates ``[B, K, 4]`` padded with zero rows (empty spans);
    ``part="target"`` collates the label ids ``[B, K]`` padded with -100.
    """

    def __init__(self, spans0, spans1, labels, starts0, starts1, max_len=None, part="phrases"):
        super().__init__()
        self.spans0, self.spans1, self.labels = spans0, spans1, labels
        self.starts0, self.starts1 = starts0, starts1
        self.max_len = max_len
        self.part = part

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        s, t, y = (torch.as_tensor(np.asarray(ds[index]), dtype=torch.long)
                   for ds in (self.spans0, self.spans1, self.labels))
        return place_phrase_pairs(s, t, y, self.starts0[index], self.starts1[index], self.max_len)

    def collater(self, samples):
        if not samples:
            return {}
        width = max(1, max(s.size(0) for s in samples))
        if self.part == "phrases":
            out = torch.zeros(len(samples), width, 4, dtype=torch.long)
            for b, s in enumerate(samples):
                out[b, : s.size(0)] = s[:, :4]
        else:
            out = torch.full((len(samples), width), IGNORE, dtype=torch.long)
            for b, s in enumerate(samples):
                out[b, : s.size(0)] = s[:, 4]
        return out
