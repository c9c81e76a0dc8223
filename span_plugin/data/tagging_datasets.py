"""Dataset wrappers for word-level labels (tagging folders, ``span-preprocess conll``).

Each item of a tag file holds one tag id per word (ids index ``label/tags.txt``, IOB2).
"""

import torch
from fairseq.data import BaseWrapperDataset, data_utils

from span_plugin.formats import tags as T

IGNORE = -100  # padding of word targets: cross-entropy's ignore_index


class WordTagsDataset(BaseWrapperDataset):
    """Tag ids per word: item ``[W_i]`` (long), collated to ``[B, W]`` padded with
    ``IGNORE``."""

    def __getitem__(self, index):
        return self.dataset[index].long()

    def collater(self, samples):
        if not samples:
            return {}
        return data_utils.collate_tokens(samples, IGNORE)


class EntitySpansDataset(BaseWrapperDataset):
    """Gold entities of each item, from its IOB2 tag ids.

    Item: LongTensor ``[E_i, 3]`` of (first word, last word + 1, type), type 1-based
    in the order of :func:`span_plugin.formats.tags.types_of` (0 is "none"). Collated to
    ``[B, E, 3]``, padded with (0, 0, 0) rows (empty spans).
    """

    def __init__(self, dataset, tag_names):
        super().__init__(dataset)
        self.tag_names = list(tag_names)
        self.type_id = {t: i + 1 for i, t in enumerate(T.types_of(tag_names))}

    def __getitem__(self, index):
        tags = [self.tag_names[i] for i in self.dataset[index].tolist()]
        ents = [(s, e, self.type_id[k]) for s, e, k in T.entities(tags)]
        return torch.tensor(ents, dtype=torch.long).view(-1, 3)

    def collater(self, samples):
        if not samples:
            return {}
        width = max(1, max(s.size(0) for s in samples))
        out = torch.zeros(len(samples), width, 3, dtype=torch.long)
        for b, s in enumerate(samples):
            out[b, : s.size(0)] = s
        return out
