"""Checkpoint conversion into fairseq's RoBERTa format (``span-convert``).

One concern a module: :mod:`.hf_source` reads a Hugging Face folder (config.json, the
weights through the safe loader or safetensors); :mod:`.encoder_map` maps the encoder
layers every BERT-architecture family shares; :mod:`.fairseq_out` writes the fairseq
model folder (model.pt, dict.txt, tokenizer files). A converter is one module over
them: :mod:`.bert` (BERT, SpanBERT, MiniLM, ...: WordPiece) and :mod:`.roberta`
(RoBERTa, XLM-R, CamemBERT: byte-level BPE or sentencepiece). :mod:`.flags` gives the
recipe flags of a checkpoint; :mod:`span_plugin.cli.convert` is the command line.
:mod:`.safe_load` is the one loader of torch files in the package, with the allow-list
of checkpoint types beside it, used by every checkpoint reader.
"""

from span_plugin.convert.bert import (  # noqa: F401
    BertShape,
    BertWeights,
    Conversion,
    VocabMapping,
    convert_bert,
    convert_state_dict,
    plan_bert_conversion,
    read_bert_config,
    read_vocab,
    vocab_mapping,
)
from span_plugin.convert.encoder_map import fairseq_model_cfg  # noqa: F401
from span_plugin.convert.flags import checkpoint_train_flags, train_flags  # noqa: F401
from span_plugin.convert.hf_source import ConversionError  # noqa: F401
from span_plugin.convert.roberta import convert_roberta, plan_roberta_conversion  # noqa: F401
