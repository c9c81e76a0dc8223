"""Span extractors: one small module per scheme behind one interface, in one registry
(:func:`build_span_extractor`): ``extractor(features [B, T, H], spans [B, K, 2]) ->
[B, K, output_dim]``, spans ``(start, end)`` end exclusive, an empty span a zero row.
Pooling extractors also pool a packed partition: ``pool_segments(values [B, N, H],
segment_ids [B, N], S) -> [B, S, H]``. The kinds and their parameters:
docs/SPAN_ENCODER.md, section "Module notes"."""

import torch
import torch.nn as nn

from span_plugin.modules.segment_conv import SegmentConv1d
from span_plugin.modules.segment_pooling import segment_attentive_pool, segment_max, segment_relu_max
from span_plugin.modules.span_pooling import (
    pool_span_members,
    span_attentive_pool,
    span_endpoints,
    span_mean,
)

def build_span_extractor(kind: str, dim: int, **options) -> nn.Module:
    """A span extractor by name (one of ``SPAN_EXTRACTORS``) for features of width
    ``dim``; ``options``: ``kernel_size`` (conv), ``max_width`` (width)."""
    if kind not in SPAN_EXTRACTORS:
        raise ValueError(f"unknown span extractor {kind!r}; choose one of {', '.join(SPAN_EXTRACTORS)}")
    return SPAN_EXTRACTORS[kind](dim, **options)


class SpanExtractor(nn.Module):
    """``forward(features [B, T, H], spans [B, K, 2]) -> [B, K, output_dim]``."""

    def __init__(self, output_dim: int):
        super().__init__()
        self.output_dim = output_dim


class SegmentPoolingExtractor(SpanExtractor):
    """An extractor defined by how it pools one segment (``pool_segments``); arbitrary
    spans are packed member by member and pooled the same way."""

    def pool_segments(self, values: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
        """``[B, N, H]``, ``[B, N]`` -> ``[B, num_segments, H]`` (zeros for an empty segment)."""
        raise NotImplementedError

    def forward(self, features: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        """``[B, T, H]``, ``[B, K, 2]`` -> ``[B, K, H]``."""
        return pool_span_members(features, spans, self.pool_segments)


class EndpointSpanExtractor(SpanExtractor):
    """``[x_start; x_end-1]``: two gathers."""

    def __init__(self, dim: int):
        super().__init__(2 * dim)

    def forward(self, features: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        """``[B, T, H]``, ``[B, K, 2]`` -> ``[B, K, 2 H]``."""
        return span_endpoints(features, spans).flatten(-2)


class MaxSpanExtractor(SegmentPoolingExtractor):
    """Elementwise max over the span's tokens (gradient to the arg-max)."""

    def __init__(self, dim: int):
        super().__init__(dim)

    def pool_segments(self, values, segment_ids, num_segments):
        return segment_max(values, segment_ids, num_segments)


class MeanSpanExtractor(SpanExtractor):
    """Mean of the span's tokens: one ``[B, K, T] x [B, T, H]`` product."""

    def __init__(self, dim: int):
        super().__init__(dim)

    def forward(self, features: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        """``[B, T, H]``, ``[B, K, 2]`` -> ``[B, K, H]``."""
        return span_mean(features, spans)


class SelfAttentiveSpanExtractor(SegmentPoolingExtractor):
    """Self-attentive pooling: logits ``score = Linear(H, 1)`` per token, softmax within
    the span (in float32 at least), weighted sum of the span's tokens. Arbitrary spans
    use one ``[B, K, T]`` weight matrix (T is short); partitions the packed scatter."""

    def __init__(self, dim: int):
        super().__init__(dim)
        self.score = nn.Linear(dim, 1)

    def pool_segments(self, values, segment_ids, num_segments):
        return segment_attentive_pool(values, self.score(values).squeeze(-1), segment_ids, num_segments)

    def forward(self, features: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        """``[B, T, H]``, ``[B, K, 2]`` -> ``[B, K, H]``."""
        return span_attentive_pool(features, self.score(features).squeeze(-1), spans)


class ConvSpanExtractor(SegmentPoolingExtractor):
    """Convolution (kernel k, H -> H, zero padding at the span's ends) within the span,
    ReLU, max over the span: the paper's CNN span encoder."""

    def __init__(self, dim: int, kernel_size: int = 3):
        super().__init__(dim)
        self.conv = SegmentConv1d(dim, kernel_size)

    def pool_segments(self, values, segment_ids, num_segments):
        return segment_relu_max(self.conv(values, segment_ids), segment_ids, num_segments)


class WidthSpanExtractor(nn.Embedding):
    """A learned embedding of the span's width ``end - start`` (in whatever unit the
    spans count: tokens, or words for word spans, so not clamped to T), widths past
    ``max_width`` sharing the last row; reads no features. The interface of
    :class:`SpanExtractor` on an ``nn.Embedding(max_width, H)`` (``weight``), so that
    initialisers of embeddings (fairseq's ``init_bert_params``) treat it as one."""

    def __init__(self, dim: int, max_width: int):
        super().__init__(max_width, dim)
        self.output_dim = dim

    def forward(self, features: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        """``features`` (unused), ``spans [..., 2]`` -> ``[..., H]`` in the dtype of the
        weight."""
        start, end = spans.long().unbind(-1)
        width = end - start
        rows = (width - 1).clamp(0, self.num_embeddings - 1)
        return super().forward(rows) * (width > 0).unsqueeze(-1).to(self.weight.dtype)


SPAN_EXTRACTORS = {
    "endpoint": EndpointSpanExtractor,
    "max": MaxSpanExtractor,
    "mean": MeanSpanExtractor,
    "self-attentive": SelfAttentiveSpanExtractor,
    "conv": ConvSpanExtractor,
    "width": WidthSpanExtractor,
}
