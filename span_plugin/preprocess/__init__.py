"""Span Fine-tuning preprocessing: n-gram dictionaries, segmentation, span encoders,
span-index binarization and GLUE preparation (docs/PREPROCESS.md).

Public API (names kept stable for the inference hub)::

    from span_plugin.preprocess import make_encoder, load_ngrams, default_ngrams_path
    enc = make_encoder(bpe="gpt2", encoder_json=".../encoder.json",
                       vocab_bpe=".../vocab.bpe", ngrams=None, segmentation="greedy")
    tokens, spans = enc.encode("New York is big.")   # ["3791", "1971", ...], [(0, 2), ...]
"""

from span_plugin.preprocess.segmentation.encoding import BPE_KINDS, EncoderSpec, SpanTokenizer, make_encoder
from span_plugin.preprocess.segmentation.ngrams import NgramDict, NgramFormatError, default_ngrams_path, load_ngrams
from span_plugin.preprocess.segmentation.segmentations import SEGMENTATIONS, Segmenter

__all__ = [
    "BPE_KINDS", "EncoderSpec", "SpanTokenizer", "make_encoder", "NgramDict", "NgramFormatError",
    "default_ngrams_path", "load_ngrams", "SEGMENTATIONS", "Segmenter",
]
