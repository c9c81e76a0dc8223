"""The two parts of a BERT checkpoint that fairseq's RoBERTa encoder has no place for.

- :class:`SegmentEmbedding`: BERT adds a token-type embedding to every input token,
  type 0 for ``[CLS] A [SEP]`` and type 1 for ``B [SEP]``. A converted checkpoint folds
  type 0 into the position table (added to every token, like a position), so only the
  difference of the other types to type 0 remains: row 0 is zero and stays zero, row 1
  is ``type_1 - type_0``.
- :class:`Pooler`: dense + tanh over the ``[CLS]`` (``<s>``) feature, pretrained with
  BERT's next-sentence objective; BERT's classifier and the paper's span head read its
  output, not the raw ``<s>`` feature.

Which positions are segment B (:func:`segment_ids`): those after the first separator
(``</s>``, BERT's ``[SEP]``). In BERT's layout ``<s> A </s> B </s>`` that is exactly
BERT's type 1 (``B`` and the last ``</s>``); in RoBERTa's ``<s> A </s> </s> B </s>``
the second ``</s>`` opens segment B; a single sentence is segment A throughout. What
follows the sequence (right padding) is masked out of attention and never read.
"""

import torch
import torch.nn as nn


def segment_ids(tokens: torch.Tensor, separator: int) -> torch.Tensor:
    """``tokens`` LongTensor ``[B, T]`` -> LongTensor ``[B, T]``: 1 at the positions after
    the first ``separator`` of their row, 0 up to and including it."""
    is_sep = tokens.eq(separator)
    before = torch.cumsum(is_sep, dim=1, dtype=torch.long) - is_sep.long()  # separators strictly before
    return before.clamp(max=1)


class SegmentEmbedding(nn.Embedding):
    """Token-type embeddings relative to type 0 (``[num_types, H]``, ``weight``): row 0
    is fixed at zero (it is the padding row, so it gets no gradient), row t is added to
    the tokens of type t. Starts at zero: as if every token were type 0."""

    def __init__(self, dim: int, num_types: int = 2):
        super().__init__(num_types, dim, padding_idx=0)
        with torch.no_grad():
            self.weight.zero_()

    def forward(self, tokens: torch.Tensor, separator: int) -> torch.Tensor:
        """``tokens [B, T]`` -> ``[B, T, H]`` (dtype of the weight): each position's
        segment row (see :func:`segment_ids`)."""
        return super().forward(segment_ids(tokens, separator))


class Pooler(nn.Module):
    """BERT's pooler: ``tanh(dense(x))`` on the first token's feature (``dense``:
    Linear(H, H))."""

    def __init__(self, dim: int):
        super().__init__()
        self.dense = nn.Linear(dim, dim)

    def forward(self, first: torch.Tensor) -> torch.Tensor:
        """``first [B, H]`` (the ``<s>`` features) -> ``[B, H]``."""
        return torch.tanh(self.dense(first))
