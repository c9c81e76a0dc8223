"""Span encoders: token features + spans -> one sentence vector per example.

Every encoder maps ``features [B, T, H]`` and ``spans [B, S, 2]`` (see
``span_layout``) to ``[B, H]``, in two steps: pool the tokens of each span into a
span vector (``within_span``), then pool the span vectors into the sentence vector
(``across_spans``); both levels are pooling span extractors (:mod:`span_extractors`).
Tokens covered by no span never enter; an example with no non-empty span gets a zero
vector. See docs/SPAN_ENCODER.md.

Dropout (``dropout``, the span head's ``--span-dropout``) follows the paper's code: on
the output of each learned level (conv, self-attentive: the span vectors, then the
sentence vector); a parameter-free max passes its pooling on without it.
"""

import torch
import torch.nn as nn

from span_plugin.modules.segment_conv import SegmentConv1d
from span_plugin.modules.segment_pooling import segment_max
from span_plugin.modules.span_extractors import SegmentPoolingExtractor, build_span_extractor
from span_plugin.modules.span_layout import NO_SEGMENT, covered_run_ids, token_span_ids, valid_span_ids


class SpanEncoder(nn.Module):
    """Two-level span encoder: ``within_span`` pools tokens into span vectors,
    ``across_spans`` pools each example's non-empty spans, in order, into ``[B, H]``.
    Both are pooling span extractors (``pool_segments``) run on the batch as it is
    (``[B, T, H]``, then ``[B, S, H]``) with a segment id per position and masks for
    positions in no segment: every shape is known from the input's, so nothing waits
    for the device (no ``nonzero``) and a compiled graph is reused for equal shapes."""

    def __init__(self, within_span: SegmentPoolingExtractor, across_spans: SegmentPoolingExtractor,
                 dropout: float = 0.0):
        super().__init__()
        self.within_span = within_span
        self.across_spans = across_spans
        self.within_dropout = nn.Dropout(dropout if _learned(within_span) else 0.0)
        self.across_dropout = nn.Dropout(dropout if _learned(across_spans) else 0.0)

    def forward(self, features: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        """
        Args:
            features: ``[B, T, H]`` token features (any float dtype).
            spans: LongTensor ``[B, S, 2]``, (start, end) into the T axis.

        Returns:
            ``[B, H]``, dtype of ``features``; zeros for an example with no span.
        """
        num_slots = spans.size(1)
        span_ids, num_spans = token_span_ids(spans, features.size(1))  # [B, T], [B]
        span_vectors = self.within_span.pool_segments(features, span_ids, num_slots)  # [B, S, H]
        span_vectors = self.within_dropout(span_vectors)
        # Span ids are compacted (empty rows dropped, order kept): an example's spans
        # are its first num_spans slots, one segment per example.
        sentence = self.across_spans.pool_segments(span_vectors, valid_span_ids(num_spans, num_slots), 1)
        return self.across_dropout(sentence.squeeze(1))


def _learned(level: nn.Module) -> bool:
    return any(True for _ in level.parameters())


class NoSegmentationCnnEncoder(nn.Module):
    """The paper's "CNN without segmentation" control: the two convolutions of
    cnn-cnn (same parameter count), both run over each example's covered tokens,
    cut only at uncovered tokens (specials, padding), then a max over covered
    tokens. Spans only decide which tokens are covered. ``dropout`` follows
    each convolution, as each level of cnn-cnn."""

    def __init__(self, dim: int, kernel_size: int = 3, dropout: float = 0.0):
        super().__init__()
        self.first_conv = SegmentConv1d(dim, kernel_size)
        self.second_conv = SegmentConv1d(dim, kernel_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, features: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        """``features [B, T, H]``, ``spans [B, S, 2]`` -> ``[B, H]`` (zeros if nothing covered)."""
        span_ids, _ = token_span_ids(spans, features.size(1))
        runs = covered_run_ids(span_ids)  # [B, T]
        hidden = self.dropout(torch.relu(self.first_conv(features, runs)))
        hidden = torch.relu(self.second_conv(hidden, runs))
        covered = torch.where(runs >= 0, 0, NO_SEGMENT)  # one segment per example
        return self.dropout(segment_max(hidden, covered, 1).squeeze(1))


# name -> span extractor kinds (within a span, across the spans); "cnn" is the control
TWO_LEVEL_ENCODERS = {
    "cnn-cnn": ("conv", "conv"),
    "cnn-max": ("conv", "max"),
    "attn-max": ("self-attentive", "max"),
    "attn-attn": ("self-attentive", "self-attentive"),
}
SPAN_ENCODERS = (*TWO_LEVEL_ENCODERS, "cnn")


def build_span_encoder(kind: str, dim: int, kernel_size: int = 3, dropout: float = 0.0) -> nn.Module:
    """Build a span encoder by name (one of ``SPAN_ENCODERS``); ``kernel_size`` is
    used by the CNN kinds and must be odd; ``dropout`` after each learned level (see
    above). ``cnn-cnn`` is the paper's model (6 H^2 + 2 H parameters for k = 3)."""
    if kind == "cnn":
        return NoSegmentationCnnEncoder(dim, kernel_size, dropout)
    if kind in TWO_LEVEL_ENCODERS:
        within, across = (build_span_extractor(k, dim, **({"kernel_size": kernel_size} if k == "conv" else {}))
                          for k in TWO_LEVEL_ENCODERS[kind])
        return SpanEncoder(within, across, dropout)
    raise ValueError(f"unknown span encoder {kind!r}; choose one of {', '.join(SPAN_ENCODERS)}")
