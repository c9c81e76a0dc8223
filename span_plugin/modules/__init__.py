"""Pure-torch span encoders (no fairseq import: they are tested on their own)."""

from span_plugin.modules.segment_conv import SegmentConv1d
from span_plugin.modules.segment_pooling import segment_attentive_pool, segment_max
from span_plugin.modules.span_encoder import (
    SPAN_ENCODERS,
    AttentivePooler,
    ConvMaxPooler,
    MaxPooler,
    NoSegmentationCnnEncoder,
    SpanEncoder,
    build_span_encoder,
)
from span_plugin.modules.span_layout import clip_spans, token_span_ids
from span_plugin.modules.span_pooling import (
    SPAN_POOLERS,
    build_span_pooler,
    span_attentive_pool,
    span_endpoints,
    span_max,
    span_mean,
)

__all__ = [
    "SPAN_ENCODERS",
    "build_span_encoder",
    "clip_spans",
    "token_span_ids",
    "SpanEncoder",
    "NoSegmentationCnnEncoder",
    "ConvMaxPooler",
    "MaxPooler",
    "AttentivePooler",
    "SegmentConv1d",
    "segment_max",
    "segment_attentive_pool",
    "SPAN_POOLERS",
    "build_span_pooler",
    "span_attentive_pool",
    "span_endpoints",
    "span_max",
    "span_mean",
]

from span_plugin.modules.span_boundary import SpanBoundaryHead, masked_runs  # noqa: E402

__all__ += ["SpanBoundaryHead", "masked_runs"]
