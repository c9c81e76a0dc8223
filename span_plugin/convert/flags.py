"""Recipe flags of a fairseq RoBERTa-family checkpoint: the ``fairseq-train`` model
flags (``span-convert flags``: sizes, and BERT's segment B and pooler when the checkpoint
holds them) and the ``fairseq-hydra-train`` overrides that start a ``recipes/hydra``
GLUE config from a converted model (``span-convert hydra-overrides``). Tensors are
memory-mapped, not read."""

import logging
from pathlib import Path
from typing import List, Mapping

from span_plugin.convert.hf_source import ConversionError
from span_plugin.convert.safe_load import load_checkpoint

logger = logging.getLogger(__name__)

TRAIN_FLAGS = (
    ("--encoder-layers", "encoder_layers"),
    ("--encoder-embed-dim", "encoder_embed_dim"),
    ("--encoder-ffn-embed-dim", "encoder_ffn_embed_dim"),
    ("--encoder-attention-heads", "encoder_attention_heads"),
    ("--max-positions", "max_positions"),
)
# cfg.model switches of the plugin's models a converted BERT sets (span_plugin.models.bert_attach)
BERT_PART_FLAGS = (("--bert-token-types", "bert_token_types"), ("--bert-pooler", "bert_pooler"))


def train_flags(model_cfg) -> List[str]:
    """fairseq-train arguments that build a ``roberta``-family model of these sizes.

    ``model_cfg`` is a checkpoint's ``cfg["model"]`` (dict, DictConfig or Namespace).
    ``--activation-fn`` is added only when it is not RoBERTa's default (gelu);
    ``--bert-token-types`` / ``--bert-pooler`` when the checkpoint holds BERT's
    segment-B embedding / pooler (the plugin's models take them, fairseq's own roberta
    does not)."""
    def get(key):
        value = model_cfg.get(key) if isinstance(model_cfg, Mapping) else getattr(
            model_cfg, key, None)
        return value

    flags = []
    for flag, key in TRAIN_FLAGS:
        value = get(key)
        if value is None:
            raise ConversionError(f"checkpoint cfg.model has no {key}")
        flags += [flag, str(value)]
    act = get("activation_fn")
    if act not in (None, "gelu"):
        flags += ["--activation-fn", str(act)]
    flags += [flag for flag, key in BERT_PART_FLAGS if get(key)]
    record = get("bert_conversion")
    if record is not None and "token_types" not in record:
        logger.warning("this BERT was converted before span-convert kept its segment-B "
                       "embedding and pooler: pairs run as segment A throughout and the "
                       "heads read the raw <s>; re-convert it with span-convert bert for "
                       "BERT's own pair encoding")
    return flags


def checkpoint_train_flags(path) -> List[str]:
    """:func:`train_flags` of a checkpoint file (or of ``model.pt`` in a folder). Tensors
    are memory-mapped, not read."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.pt"
    if not path.is_file():
        raise ConversionError(f"{path}: no such checkpoint")
    state = load_checkpoint(path, mmap=True)  # allow-listed types only
    if state.get("cfg") is not None:
        return train_flags(state["cfg"]["model"])
    if state.get("args") is not None:  # fairseq checkpoints from before hydra
        return train_flags(state["args"])
    raise ConversionError(f"{path}: neither cfg nor args in the checkpoint")


def hydra_overrides(model_dir) -> List[str]:
    """fairseq-hydra-train overrides that turn a ``recipes/hydra`` GLUE config (span
    head, RoBERTa layout) into the run ``MODEL_DIR=model_dir recipes/glue/TASK.sh``
    makes: the converted weights, their sizes, BERT's one-separator pair layout (a
    ``span-convert roberta`` folder, which holds GPT-2 BPE files or a sentencepiece
    model, keeps the configs' RoBERTa layout). The data folder (``task.data``) must be
    one built with that model's tokenizer."""
    model = Path(model_dir).resolve() / "model.pt"
    roberta_layout = any((model.parent / name).is_file()
                         for name in ("encoder.json", "sentencepiece.bpe.model"))
    flags = checkpoint_train_flags(model)
    switches = [f for f, _ in BERT_PART_FLAGS if f in flags]
    flags = [f for f in flags if f not in switches]
    sizes = [f"++model.{flag[2:].replace('-', '_')}={value}"
             for flag, value in zip(flags[::2], flags[1::2])]
    sizes += [f"++model.{flag[2:].replace('-', '_')}=true" for flag in switches]
    layout = [] if roberta_layout else ["task.separator_token=null"]
    return [f"checkpoint.restore_file={model}", "model._name=roberta_span", *layout, *sizes]
