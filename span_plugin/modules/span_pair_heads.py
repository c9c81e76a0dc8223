"""Heads of transfer fine-tuning with phrasal paraphrases (Arase and Tsujii), free of
fairseq.

- :class:`PhrasePairHead`: each phrase pair's source and target phrases are pooled from
  the token features with a span extractor (:mod:`span_extractors`: one call for both
  sides; spans may overlap and nest) and classified. Feature sets: ``max4`` = max-pool,
  ``[h_s; h_t; h_s * h_t; |h_s - h_t|]`` (2019); ``mean2`` = mean-pool, ``[h_s; h_t]``
  (2021).
- :class:`SentencePairHead`: the ``<s>`` feature -> dense -> tanh -> projection.

Phrase pairs arrive padded ``[B, K, 4]`` (source start, end, target start, end, positions
in the token axis) with a BoolTensor ``valid [B, K]``; only the valid pairs are packed
into ``[P, ...]`` and classified, with no loop over examples or pairs.
"""

import torch
import torch.nn as nn

from span_plugin.modules.span_extractors import build_span_extractor

# name -> (span extractor of each phrase, multiple of H in the pair vector)
PAIR_FEATURES = {"max4": ("max", 4), "mean2": ("mean", 2)}


def pair_features(features, phrases, valid, kind="max4"):
    """Pooled pair vectors of the valid phrase pairs.

    features: ``[B, T, H]``; phrases: LongTensor ``[B, K, 4]``; valid: BoolTensor
    ``[B, K]``. Returns ``[P, m H]`` (m = ``PAIR_FEATURES[kind][1]``), P = valid.sum(),
    in row-major (example, pair) order.
    """
    if kind not in PAIR_FEATURES:
        raise ValueError(f"unknown pair features {kind!r}; choose one of {', '.join(PAIR_FEATURES)}")
    num_pairs = phrases.size(1)
    # Sources and targets pooled in one call: [B, 2K, 2] spans.
    spans = torch.cat([phrases[..., 0:2], phrases[..., 2:4]], dim=1)
    pool = build_span_extractor(PAIR_FEATURES[kind][0], features.size(-1))  # no parameters
    pooled = pool(features, spans)  # [B, 2K, H]
    h_s, h_t = pooled[:, :num_pairs][valid], pooled[:, num_pairs:][valid]  # [P, H] each
    if kind == "mean2":
        return torch.cat([h_s, h_t], dim=-1)
    return torch.cat([h_s, h_t, h_s * h_t, (h_s - h_t).abs()], dim=-1)


class PhrasePairHead(nn.Module):
    """Phrasal paraphrase classifier: pair vector -> dropout -> dense -> tanh -> dropout
    -> projection.

    Args:
        input_dim: H, width of the token features.
        num_classes: C (3 in the 2019 design: paraphrase, random, in-paraphrase).
        features: ``max4`` or ``mean2`` (see the module docstring).
        inner_dim: width of the dense layer (default H).
    """

    def __init__(self, input_dim, num_classes, features="max4", inner_dim=None, dropout=0.1):
        super().__init__()
        if features not in PAIR_FEATURES:
            raise ValueError(f"unknown pair features {features!r}; choose one of "
                             f"{', '.join(PAIR_FEATURES)}")
        self.features = features
        inner_dim = inner_dim or input_dim
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(PAIR_FEATURES[features][1] * input_dim, inner_dim)
        self.out_proj = nn.Linear(inner_dim, num_classes)

    def forward(self, features, phrases, valid):
        """``[B, T, H]``, ``[B, K, 4]``, ``[B, K]`` -> logits ``[P, C]`` of the valid pairs."""
        x = pair_features(features, phrases, valid, self.features)
        x = torch.tanh(self.dense(self.dropout(x)))
        return self.out_proj(self.dropout(x))


class SentencePairHead(nn.Module):
    """Sentential paraphrase classifier on the ``<s>`` feature (RoBERTa's head)."""

    def __init__(self, input_dim, num_classes, inner_dim=None, dropout=0.1):
        super().__init__()
        inner_dim = inner_dim or input_dim
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(input_dim, inner_dim)
        self.out_proj = nn.Linear(inner_dim, num_classes)

    def forward(self, features):
        """``[B, T, H]`` -> logits ``[B, C]``."""
        x = torch.tanh(self.dense(self.dropout(features[:, 0])))
        return self.out_proj(self.dropout(x))


class SpanPairHeads(nn.Module):
    """Both heads under one name (a fairseq classification head slot); either may be
    None (its loss weight is 0).

    ``forward(features, phrases, valid)`` -> ``{"phrasal": [P, C_p] or None,
    "sentential": [B, C_s] or None}``.
    """

    def __init__(self, input_dim, phrase_classes, sentence_classes, features="max4",
                 dropout=0.1):
        super().__init__()
        self.phrasal = PhrasePairHead(input_dim, phrase_classes, features, dropout=dropout) \
            if phrase_classes else None
        self.sentential = SentencePairHead(input_dim, sentence_classes, dropout=dropout) \
            if sentence_classes else None

    def forward(self, features, phrases=None, valid=None, **unused):
        """valid: bool ``[B, P]``; default: the non-empty pairs (source start < end)."""
        out = {"phrasal": None, "sentential": None}
        if valid is None and phrases is not None:
            valid = phrases[..., 1] > phrases[..., 0]
        if self.phrasal is not None and phrases is not None:
            out["phrasal"] = self.phrasal(features, phrases, valid)
        if self.sentential is not None:
            out["sentential"] = self.sentential(features)
        return out
