"""Pure-torch span modules (no fairseq import: they are tested on their own).

- ``span_extractors``: THE registry of span representations (endpoint, max, mean,
  self-attentive, conv, width), one module per scheme, used by every head;
- ``span_encoder``: the paper's sentence span encoders, two levels of extractors;
- ``span_pooling`` / ``segment_pooling`` / ``segment_conv``: their vectorised kernels on
  arbitrary spans and on packed segments; ``span_layout``: spans on the token axis;
- ``tagging_heads``, ``span_pair_heads``, ``span_boundary``: the task heads' torch parts;
  ``span_decoding``, ``entities``: from span-labeling scores to entities.
"""

from span_plugin.modules.segment_conv import SegmentConv1d
from span_plugin.modules.segment_pooling import segment_attentive_pool, segment_max, segment_relu_max
from span_plugin.modules.span_boundary import SpanBoundaryHead, masked_runs
from span_plugin.modules.span_encoder import SPAN_ENCODERS, NoSegmentationCnnEncoder, SpanEncoder, build_span_encoder
from span_plugin.modules.span_extractors import SPAN_EXTRACTORS, SpanExtractor, build_span_extractor
from span_plugin.modules.span_layout import clip_spans, token_span_ids
from span_plugin.modules.span_pooling import span_attentive_pool, span_endpoints, span_max, span_mean

__all__ = [
    "SPAN_ENCODERS",
    "build_span_encoder",
    "SpanEncoder",
    "NoSegmentationCnnEncoder",
    "SPAN_EXTRACTORS",
    "SpanExtractor",
    "build_span_extractor",
    "clip_spans",
    "token_span_ids",
    "SegmentConv1d",
    "segment_max",
    "segment_relu_max",
    "segment_attentive_pool",
    "span_attentive_pool",
    "span_endpoints",
    "span_max",
    "span_mean",
    "SpanBoundaryHead",
    "masked_runs",
]
