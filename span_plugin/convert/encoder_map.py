"""Mapping a Hugging Face BERT-architecture encoder's tensors onto fairseq's RoBERTa.

BERT, RoBERTa, XLM-R and CamemBERT share Hugging Face's encoder layer names, and all are
fairseq's ``roberta`` encoder (post-LN, learned positions, embedding LayerNorm,
unscaled embeddings): the layers map one to one, by name. The embeddings and heads
differ per family and are mapped by :mod:`.bert` and :mod:`.roberta`; this module holds
what they share: the layer map, a fresh LM head, the checkpoint's ``cfg.model``, and the
compaction of views before saving.
"""

from typing import Dict, Optional, Tuple

import torch

from span_plugin.convert.hf_source import EncoderShape, EncoderWeights

# fairseq Dictionary's specials at ids 0..3, then <mask> appended by the task at load.
FAIRSEQ_SYMBOLS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
FAIRSEQ_PAD = 1  # positions start at padding_idx + 1
POSITION_OFFSET = FAIRSEQ_PAD + 1

ENC = "encoder.sentence_encoder."
LM = "encoder.lm_head."
INIT_STD = 0.02  # fairseq's init_bert_params, used for a fresh LM head

# fairseq layer module -> Hugging Face layer module, for weight and bias alike.
_LAYER_MAP = (
    ("self_attn.q_proj", "attention.self.query", "hh"),
    ("self_attn.k_proj", "attention.self.key", "hh"),
    ("self_attn.v_proj", "attention.self.value", "hh"),
    ("self_attn.out_proj", "attention.output.dense", "hh"),
    ("self_attn_layer_norm", "attention.output.LayerNorm", "ln"),
    ("fc1", "intermediate.dense", "fh"),
    ("fc2", "output.dense", "hf"),
    ("final_layer_norm", "output.LayerNorm", "ln"),
)


def _shapes(kind, h, f):
    """(weight shape, bias shape) of a Linear (out x in) or LayerNorm."""
    return {
        "hh": ((h, h), (h,)),
        "fh": ((f, h), (f,)),
        "hf": ((h, f), (h,)),
        "ln": ((h,), (h,)),
    }[kind]


def map_layers(weights: EncoderWeights, shape: EncoderShape) -> Dict[str, torch.Tensor]:
    """fairseq's ``layers.N.*`` and ``layernorm_embedding`` tensors (views of the source):
    [H, H] attention projections, [F, H] fc1, [H, F] fc2, [H] biases and LayerNorms."""
    h, f = shape.embed_dim, shape.ffn_embed_dim
    sd = {
        ENC + "layernorm_embedding.weight": weights.get("embeddings.LayerNorm.weight", (h,)),
        ENC + "layernorm_embedding.bias": weights.get("embeddings.LayerNorm.bias", (h,)),
    }
    for n in range(shape.layers):
        for fs_name, hf_name, kind in _LAYER_MAP:
            w_shape, b_shape = _shapes(kind, h, f)
            src = f"encoder.layer.{n}.{hf_name}"
            sd[f"{ENC}layers.{n}.{fs_name}.weight"] = weights.get(src + ".weight", w_shape)
            sd[f"{ENC}layers.{n}.{fs_name}.bias"] = weights.get(src + ".bias", b_shape)
    return sd


def hf_layers(sd: Dict[str, torch.Tensor], layers: int) -> Dict[str, torch.Tensor]:
    """The inverse of :func:`map_layers`, by the same table: fairseq's ``layers.N.*`` and
    ``layernorm_embedding`` tensors under Hugging Face's names (no model prefix)."""
    out = {"embeddings.LayerNorm.weight": sd[ENC + "layernorm_embedding.weight"],
           "embeddings.LayerNorm.bias": sd[ENC + "layernorm_embedding.bias"]}
    for n in range(layers):
        for fs_name, hf_name, _ in _LAYER_MAP:
            for part in ("weight", "bias"):
                out[f"encoder.layer.{n}.{hf_name}.{part}"] = sd[f"{ENC}layers.{n}.{fs_name}.{part}"]
    return out


def fresh_lm_head(h: int, v: int, dtype, seed: int) -> Tuple[Dict[str, torch.Tensor], str]:
    """fairseq's initialisation of ``lm_head`` (without the tied weight), for checkpoints
    that have no masked-LM head: dense [H, H] normal, LayerNorm [H] 1/0, bias [V] zero."""
    gen = torch.Generator().manual_seed(seed)
    head = {
        "dense.weight": torch.empty(h, h).normal_(0.0, INIT_STD, generator=gen).to(dtype),
        "dense.bias": torch.zeros(h, dtype=dtype),
        "layer_norm.weight": torch.ones(h, dtype=dtype),
        "layer_norm.bias": torch.zeros(h, dtype=dtype),
        "bias": torch.zeros(v, dtype=dtype),
    }
    return head, f"fresh (dense normal std {INIT_STD}, seed {seed}; biases 0, LayerNorm 1/0)"


def _compact(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when it owns its storage; else a copy, since torch.save writes
    whole storages and a view would drag the rest of its storage along."""
    if t.is_contiguous() and t.storage_offset() == 0 and (
        t.untyped_storage().nbytes() == t.numel() * t.element_size()
    ):
        return t
    return t.contiguous().clone()


def finish_state_dict(sd: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Every tensor compacted for saving, and ``lm_head.weight`` tied to the token
    embedding (one tensor, saved once), as fairseq's RoBERTa ties them."""
    sd = {k: _compact(t) for k, t in sd.items()}
    sd[LM + "weight"] = sd[ENC + "embed_tokens.weight"]
    return sd


def fairseq_model_cfg(shape: EncoderShape, record: Optional[Dict] = None,
                      token_types: bool = False, pooler: bool = False, *,
                      max_positions: Optional[int] = None,
                      record_key: str = "bert_conversion") -> Dict:
    """``cfg.model`` with the checkpoint's sizes: fairseq's ``roberta`` architecture, or
    the plugin's ``roberta_span`` with ``bert_token_types`` / ``bert_pooler`` when the
    checkpoint holds BERT's segment-B embedding / pooler. The structural flags are
    written out (not left to defaults) because they are what makes RoBERTa compute
    BERT's function. ``max_positions``: fairseq's (default: the config's table rows,
    BERT's count; a RoBERTa table also holds the 2 rows below ``padding_idx + 1``)."""
    arch = "roberta_span" if token_types or pooler else "roberta"
    positions = shape.max_positions if max_positions is None else max_positions
    cfg = {
        "_name": arch,
        "arch": arch,
        "encoder_layers": shape.layers,
        "encoder_embed_dim": shape.embed_dim,
        "encoder_ffn_embed_dim": shape.ffn_embed_dim,
        "encoder_attention_heads": shape.attention_heads,
        "max_positions": positions,
        "max_source_positions": positions,
        "activation_fn": shape.activation_fn,
        "dropout": shape.dropout,
        "attention_dropout": shape.attention_dropout,
        "activation_dropout": 0.0,
        "pooler_activation_fn": "tanh",
        "encoder_normalize_before": False,  # post-LN, like BERT
        "layernorm_embedding": True,
        "no_scale_embedding": True,
        "encoder_learned_pos": True,
        "no_token_positional_embeddings": False,
        "untie_weights_roberta": False,
        "layernorm_eps": shape.layernorm_eps,
    }
    if arch != "roberta":
        cfg.update(bert_token_types=token_types, bert_pooler=pooler)
    if record is not None:
        cfg[record_key] = record
    return cfg
