"""Extractive QA batches (:class:`QAWindowsDataset`): one item is one question with all its
windows, so a batch holds every window of its questions. N windows of B questions,
T the longest: ``net_input.src_tokens [N, T]``, ``net_input.passage [N, 2]``,
``net_input.spans [N, S, 2]``, ``target [N, 2]``, ``qa.question [N]``, ``qa.offsets
[N, T, 2]``. Every field: docs/QA.md, section "Module notes"."""

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils

from span_plugin.data.span_datasets import SizedDataset


@dataclass(frozen=True)
class QABatching:
    """How :class:`QAWindowsDataset` orders and pads its questions: ``pad``, the padding
    id; ``shuffle_seed``: None keeps the file order, else questions are shuffled per
    (seed, epoch); T is rounded up to a multiple of ``length_multiple``
    (``--length-multiple``)."""

    pad: int
    shuffle_seed: Optional[int] = None
    length_multiple: int = 1


class QAWindowsDataset(SizedDataset, FairseqDataset):
    """Questions of a split with their windows.

    layout: the windows' :class:`~span_plugin.data.layout.Layout` (input0 = question,
        input1 = passage; not shortened: preprocessing sized the windows).
    window_question: int array ``[W]``, the question of each window (non-decreasing).
    offsets: dataset, item w = flat ``[2 P_w]`` character offsets of window w's passage.
    answers: dataset, item w = ``[2]`` gold (start, end) in the passage or ``[0]``.
    records: the split's questions (``QAExample`` of ``raw/{split}.jsonl``).
    batching: :class:`QABatching` (padding id, shuffling, length multiple).
    spans: None, or the windows' n-gram spans in the layout (``layout.spans(...)``, item
        w = ``[n_w, 2]``), batched as ``net_input.spans``.
    """

    def __init__(self, layout, window_question, offsets, answers, records, batching,
                 spans=None):
        super().__init__()
        self.length_multiple = batching.length_multiple
        self.spans = spans
        self.tokens = layout.tokens
        self.passage_starts = np.asarray(layout.starts[1], dtype=np.int64)
        self.offsets = offsets
        self.answers = answers
        self.records = records
        self.pad = batching.pad
        self.shuffle_seed = batching.shuffle_seed
        self.epoch = 1
        window_question = np.asarray(window_question, dtype=np.int64)
        counts = np.bincount(window_question, minlength=len(records))
        if len(counts) != len(records) or (counts == 0).any() or (
                np.diff(window_question) < 0).any():
            raise ValueError(f"windows point at questions outside the {len(records)} records "
                             f"or out of order; rebuild the folder")
        self.first_window = np.concatenate([[0], np.cumsum(counts)])
        sizes = np.asarray(self.tokens.sizes, dtype=np.int64)
        # size = the widest window (what --max-positions is checked against);
        # num_tokens = the question's share of a padded batch.
        self._sizes = np.maximum.reduceat(sizes, self.first_window[:-1])
        self._padded = self._sizes * counts

    def __len__(self):
        return len(self.records)

    def num_tokens(self, index):  # sizes and size: SizedDataset's (the widest window)
        return int(self._padded[index])

    def num_tokens_vec(self, indices):
        return self._padded[indices]

    def windows(self, index):
        return range(self.first_window[index], self.first_window[index + 1])

    def __getitem__(self, index):
        out = []
        for w in self.windows(index):
            tokens = self.tokens[w]
            p0 = int(self.passage_starts[w])
            offsets = torch.as_tensor(np.asarray(self.offsets[w]), dtype=torch.long).view(-1, 2)
            answer = torch.as_tensor(np.asarray(self.answers[w]), dtype=torch.long)
            out.append({"tokens": tokens, "passage": (p0, p0 + len(offsets)),
                        "offsets": offsets, "answer": answer,
                        "spans": None if self.spans is None else self.spans[w]})
        return {"id": index, "windows": out, "record": self.records[index]}

    def collater(self, samples):
        if not samples:
            return {}
        windows = [w for s in samples for w in s["windows"]]
        question = [k for k, s in enumerate(samples) for _ in s["windows"]]
        tokens = data_utils.collate_tokens([w["tokens"] for w in windows], self.pad,
                                           pad_to_multiple=self.length_multiple)
        n, t = tokens.shape
        passage = torch.tensor([w["passage"] for w in windows], dtype=torch.long)
        offsets = torch.full((n, t, 2), -1, dtype=torch.long)
        target = torch.zeros(n, 2, dtype=torch.long)
        for i, w in enumerate(windows):
            p0, p1 = w["passage"]
            offsets[i, p0:p1] = w["offsets"]
            if w["answer"].numel():
                s, e = w["answer"].tolist()
                target[i] = torch.tensor([p0 + s, p0 + e - 1])
        net_input = {"src_tokens": tokens,
                     "src_lengths": torch.tensor([len(w["tokens"]) for w in windows]),
                     "passage": passage}
        if self.spans is not None:
            net_input["spans"] = self.spans.collater([w["spans"] for w in windows])
        return {
            "id": torch.tensor([s["id"] for s in samples], dtype=torch.long),
            "nsentences": len(samples),
            "ntokens": sum(len(w["tokens"]) for w in windows),
            "net_input": net_input,
            "target": target,
            "qa": {"question": torch.tensor(question, dtype=torch.long), "offsets": offsets,
                   "records": [s["record"] for s in samples]},
        }

    @property
    def supports_prefetch(self):
        return False

    def set_epoch(self, epoch):
        self.epoch = epoch

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return self.shuffle_seed is None

    def ordered_indices(self):
        if self.shuffle_seed is None:
            return np.arange(len(self))
        with data_utils.numpy_seed(self.shuffle_seed, self.epoch):
            return np.random.permutation(len(self))
