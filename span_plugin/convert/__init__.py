"""Checkpoint conversion into fairseq's RoBERTa format (``span-convert``).

:mod:`.bert` converts Hugging Face BERT-architecture checkpoints (BERT, SpanBERT,
MiniLM, ...); :mod:`.flags` gives the recipe flags of a checkpoint;
:mod:`span_plugin.cli.convert` is the command line. :mod:`.safe_load` is the one loader
of torch files in the package (allow-listed types only), used by every checkpoint reader.
"""

from span_plugin.convert.bert import (  # noqa: F401
    BertShape,
    BertWeights,
    Conversion,
    ConversionError,
    VocabMapping,
    convert_bert,
    convert_state_dict,
    fairseq_model_cfg,
    plan_bert_conversion,
    read_bert_config,
    read_vocab,
    vocab_mapping,
)
from span_plugin.convert.flags import checkpoint_train_flags, train_flags  # noqa: F401
