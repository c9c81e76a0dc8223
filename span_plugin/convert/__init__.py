"""Checkpoint conversion into fairseq's RoBERTa format (``span-convert``).

:mod:`.bert` converts Hugging Face BERT-architecture checkpoints (BERT, SpanBERT,
MiniLM, ...); :mod:`.cli` is the command line.
"""

from span_plugin.convert.bert import (  # noqa: F401
    BertShape,
    BertWeights,
    Conversion,
    ConversionError,
    VocabMapping,
    checkpoint_train_flags,
    convert_bert,
    convert_state_dict,
    fairseq_model_cfg,
    plan_bert_conversion,
    read_bert_config,
    read_vocab,
    train_flags,
    vocab_mapping,
)
