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
from span_plugin.modules.span_layout import covered_run_ids, pack_covered_tokens, token_span_ids, valid_span_ids


def gather_tokens(features: torch.Tensor, flat_index: torch.Tensor) -> torch.Tensor:
    """``features [B, T, H]``, flat indices ``[N]`` into ``B * T`` -> ``[N, H]``.
    Indexes in place: fairseq's features are a transposed (non-contiguous) view,
    which a reshape would copy whole."""
    seq_len = features.size(1)
    example = torch.div(flat_index, seq_len, rounding_mode="floor")
    return features[example, flat_index - example * seq_len]


class SpanEncoder(nn.Module):
    """Two-level span encoder: ``within_span`` pools tokens into span vectors,
    ``across_spans`` pools each example's non-empty spans, in order, into ``[B, H]``.
    Both are pooling span extractors (``pool_segments``) and run on packed sequences
    (covered tokens, non-empty spans) with a segment id per position, so padding
    costs no compute."""

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
        batch, seq_len, dim = features.shape
        num_slots = spans.size(1)
        span_ids, num_spans = token_span_ids(spans, seq_len)
        # Token level: only the N covered tokens, packed into one sequence [1, N, H].
        token_index, packed_ids = pack_covered_tokens(span_ids, num_slots)
        packed = gather_tokens(features, token_index)
        span_vectors = self.within_span.pool_segments(packed.unsqueeze(0), packed_ids.unsqueeze(0), batch * num_slots)
        span_vectors = self.within_dropout(span_vectors)
        # Span level: span ids are compacted (empty rows dropped, order kept), so an
        # example's spans are its first num_spans slots; pack those, one segment
        # per example.
        span_index, example = pack_covered_tokens(valid_span_ids(num_spans, num_slots), 1)
        packed_spans = span_vectors.reshape(batch * num_slots, dim).index_select(0, span_index)
        sentence = self.across_spans.pool_segments(packed_spans.unsqueeze(0), example.unsqueeze(0), batch)
        return self.across_dropout(sentence.squeeze(0))


def _learned(level: nn.Module) -> bool:
    return any(True for _ in level.parameters())


class NoSegmentationCnnEncoder(nn.Module):
    """The paper's "CNN without segmentation" control: the two convolutions of
    cnn-cnn (same parameter count), both run over all covered tokens as one
    sequence, cut only at uncovered tokens (specials, padding), then a max over
    covered tokens. Spans only decide which tokens are covered. ``dropout`` follows
    each convolution, as each level of cnn-cnn."""

    def __init__(self, dim: int, kernel_size: int = 3, dropout: float = 0.0):
        super().__init__()
        self.first_conv = SegmentConv1d(dim, kernel_size)
        self.second_conv = SegmentConv1d(dim, kernel_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, features: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        """``features [B, T, H]``, ``spans [B, S, 2]`` -> ``[B, H]`` (zeros if nothing covered)."""
        batch, seq_len = features.shape[:2]
        span_ids, _ = token_span_ids(spans, seq_len)
        # Runs are numbered < T within an example; pack covered tokens as [1, N, H].
        token_index, packed_runs = pack_covered_tokens(covered_run_ids(span_ids), seq_len)
        packed = gather_tokens(features, token_index).unsqueeze(0)
        packed_runs = packed_runs.unsqueeze(0)
        hidden = self.dropout(torch.relu(self.first_conv(packed, packed_runs)))
        hidden = torch.relu(self.second_conv(hidden, packed_runs))
        example = torch.div(packed_runs, seq_len, rounding_mode="floor")
        return self.dropout(segment_max(hidden, example, batch).squeeze(0))


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
