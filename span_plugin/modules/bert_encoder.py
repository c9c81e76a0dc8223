"""A BERT-family encoder in plain torch: what ``transformers``' ``BertModel``,
``RobertaModel`` and ``XLMRobertaModel`` compute in eval mode, for the configs that
``span-export hf`` writes (absolute positions, post-LN layers, an encoder only), read
from a Hugging Face ``config.json`` dict and its tensors by their Hugging Face names.
No import of ``transformers`` (it costs more to import than torch itself).

- embeddings: word + token type + absolute position, LayerNorm. BERT numbers positions
  0, 1, ...; RoBERTa and XLM-R from ``pad_token_id + 1`` over the non-pad tokens (pads
  get ``pad_token_id``), as the fairseq models they came from;
- each layer: self-attention (``scaled_dot_product_attention``, pad keys masked out),
  add & LayerNorm, feed-forward with the config's ``hidden_act``, add & LayerNorm;
- pooler (when its tensors are there): ``tanh(dense(x[:, 0]))``.

Two things are done for speed, neither changing a real token's result: query, key and
value are one ``[3D, D]`` projection (one matmul instead of three), and in a padded
batch the per-token products (projections, feed-forward, LayerNorms) run on the real
tokens only, packed; attention alone sees the ``[B, T]`` layout. The pads' features
are zero (transformers computes values there that no head reads). Under export, one
path for every batch (:attr:`BertEncoder.pack_when_exporting`; docs/EXPORT.md).
"""

import math
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from span_plugin.formats.model_folder import encoder_family


def _gelu_new(x):
    """Hugging Face's ``gelu_new`` (GPT-2's tanh approximation), its own formula."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


# config.json's hidden_act -> the function transformers' ACT2FN gives for it.
ACTIVATIONS = {"gelu": F.gelu, "gelu_new": _gelu_new,
               "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh"), "relu": F.relu}
# model_type -> whether positions start after the pad id and skip pads (RoBERTa's way).
FAMILIES = {"bert": False, "roberta": True, "xlm-roberta": True, "camembert": True}
DEFAULT_PAD = {"bert": 0, "roberta": 1, "xlm-roberta": 1, "camembert": 1}  # transformers' config defaults
# Buffers older transformers saved with the weights; it ignores them at load, as here.
BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
PREFIXES = ("bert.", "roberta.", "")  # where *ForMaskedLM / *Model folders keep the encoder


class EncoderConfigError(ValueError):
    """A config.json or tensor file this encoder cannot compute exactly."""


@dataclass(frozen=True)
class EncoderConfig:
    """The settings of config.json that the computation reads."""

    family: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    pad_token_id: int

    @classmethod
    def from_dict(cls, raw, where="config.json"):
        """The settings of a Hugging Face config dict; anything computed otherwise than
        here (another model type, relative positions, a decoder, an activation without
        a line here) is an :class:`EncoderConfigError` naming ``where``."""
        family = encoder_family(raw.get("model_type"))  # the plugin's type: its family
        if family not in FAMILIES:
            raise EncoderConfigError(f"{where}: model_type {family!r}; the torch encoder "
                                     f"computes {', '.join(FAMILIES)}")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise EncoderConfigError(f"{where}: position_embedding_type "
                                     f"{raw['position_embedding_type']!r}; the torch encoder "
                                     f"computes absolute positions only")
        if raw.get("is_decoder") or raw.get("add_cross_attention"):
            raise EncoderConfigError(f"{where}: a decoder (is_decoder/add_cross_attention); "
                                     f"the torch encoder is an encoder only")
        if raw.get("hidden_act") not in ACTIVATIONS:
            raise EncoderConfigError(f"{where}: hidden_act {raw.get('hidden_act')!r}; the "
                                     f"torch encoder computes {', '.join(ACTIVATIONS)}")
        try:
            return cls(family=family, hidden_act=raw["hidden_act"],
                       layer_norm_eps=float(raw.get("layer_norm_eps", 1e-12)),
                       type_vocab_size=int(raw.get("type_vocab_size", 2)),
                       pad_token_id=int(raw.get("pad_token_id", DEFAULT_PAD[family])),
                       **{k: int(raw[k]) for k in (
                           "vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size",
                           "max_position_embeddings")})
        except KeyError as missing:
            raise EncoderConfigError(f"{where}: no {missing.args[0]}") from None


class Embeddings(nn.Module):
    """``tokens [B, T]`` (+ ``token_types [B, T]``) -> ``[B, T, D]``."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.pad = cfg.pad_token_id
        self.offset_positions = FAMILIES[cfg.family]

    def positions(self, tokens):
        """LongTensor ``[B, T]`` (RoBERTa's) or ``[T]`` (BERT's)."""
        if not self.offset_positions:
            return torch.arange(tokens.size(1), device=tokens.device)
        real = tokens.ne(self.pad).int()
        return (torch.cumsum(real, dim=1).type_as(real) * real).long() + self.pad

    def forward(self, tokens, token_types=None):
        if token_types is None:  # every token type 0, as transformers' default
            types = self.token_type_embeddings.weight[0]
        else:
            types = self.token_type_embeddings(token_types)
        x = self.word_embeddings(tokens) + types
        x = x + self.position_embeddings(self.positions(tokens))
        return self.LayerNorm(x)


class Packing(NamedTuple):
    """Where a padded ``[B, T]`` batch's real tokens are, for running the per-token
    products on them alone: ``rows`` (LongTensor ``[N]``, the flat position of each real
    token), ``slots`` (LongTensor ``[B * T]``, the packed row each position reads: its
    own for a real token, some real token's for a pad, whose query is dropped and whose
    key is masked out), ``mask`` (bool ``[B, 1, 1, T]``, True at real keys)."""

    rows: torch.Tensor
    slots: torch.Tensor
    mask: torch.Tensor

    @classmethod
    def of(cls, real):
        """The packing of ``real`` (bool ``[B, T]``, True at real tokens; one at least)."""
        flat = real.view(-1)
        slots = (flat.long().cumsum(0) - 1).clamp(min=0)
        return cls(flat.nonzero().squeeze(1), slots, real[:, None, None, :])


class EncoderLayer(nn.Module):
    """One post-LN layer on the batch's real tokens only: ``x [N, D]``, the real tokens
    of a ``[B, T]`` batch as ``packing`` (:class:`Packing`; None: every position, ``N ==
    B * T``) lays them out -> ``[N, D]``. Attention runs on the padded ``[B, T]`` layout,
    pad keys masked out; the per-token products skip the pads."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        dim, self.heads = cfg.hidden_size, cfg.num_attention_heads
        self.qkv = nn.Linear(dim, 3 * dim)  # query; key; value rows
        self.attention_out = nn.Linear(dim, dim)
        self.attention_norm = nn.LayerNorm(dim, eps=cfg.layer_norm_eps)
        self.intermediate = nn.Linear(dim, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, dim)
        self.output_norm = nn.LayerNorm(dim, eps=cfg.layer_norm_eps)
        self.act = ACTIVATIONS[cfg.hidden_act]

    def forward(self, x, shape, packing=None):
        (B, T), D = shape, x.size(-1)
        qkv = self.qkv(x)  # [N, 3D]
        mask = None
        if packing is not None:
            # a gather, not a scatter into zeros: what a pad holds is never read
            qkv, mask = qkv.index_select(0, packing.slots), packing.mask  # [B * T, 3D]
        q, k, v = qkv.view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, heads, T, D/heads]
        att = att.transpose(1, 2).reshape(B * T, D)
        if packing is not None:
            att = att.index_select(0, packing.rows)
        x = self.attention_norm(x + self.attention_out(att))
        return self.output_norm(x + self.output(self.act(self.intermediate(x))))


class BertEncoder(nn.Module):
    """``forward(tokens [B, T], token_types [B, T] or None)`` -> last-layer features
    ``[B, T, D]``, pads (``pad_token_id``) masked out of attention and left out of the
    per-token products: their features are zero (transformers computes values there
    that nothing should read); ``pool(features)`` -> ``[B, D]`` when built with a
    pooler."""

    def __init__(self, cfg: EncoderConfig, pooler: bool):
        super().__init__()
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size) if pooler else None
        # What a graph being exported computes, whatever its example batch holds: the
        # packed path (right for any batch), or False, the unpadded one (right for a
        # batch without pads only; span-export onnx runs it under a branch on that).
        self.pack_when_exporting = True

    def forward(self, tokens, token_types=None):
        B, T = tokens.shape
        real = tokens.ne(self.cfg.pad_token_id)
        x = self.embeddings(tokens, token_types).view(B * T, -1)
        if torch.compiler.is_exporting():
            pack = self.pack_when_exporting  # a graph cannot branch on the batch here
        else:
            pack = not bool(real.all())
        packing = None
        if pack:
            packing = Packing.of(real)
            x = x.index_select(0, packing.rows)
        for layer in self.layers:
            x = layer(x, (B, T), packing)
        if packing is not None:
            x = x.index_select(0, packing.slots) * real.view(B * T, 1)
        return x.view(B, T, -1)

    def pool(self, features):
        """BERT's pooled ``<s>``: ``features [B, T, D]`` -> ``[B, D]``."""
        if self.pooler is None:
            raise EncoderConfigError("this encoder was loaded without pooler tensors")
        return torch.tanh(self.pooler(features[:, 0]))


def hf_names(cfg: EncoderConfig, pooler: bool):
    """``{Hugging Face name (no prefix): (module name here, rows)}``: ``rows`` is the
    slice of the fused query/key/value parameter a tensor fills (None: all of it)."""
    names = {}
    for part in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        names[f"embeddings.{part}.weight"] = (f"embeddings.{part}.weight", None)
    D = cfg.hidden_size
    for i in range(cfg.num_hidden_layers):
        hf, me = f"encoder.layer.{i}.", f"layers.{i}."
        for k in ("weight", "bias"):
            for j, part in enumerate(("query", "key", "value")):
                names[f"{hf}attention.self.{part}.{k}"] = (f"{me}qkv.{k}", slice(j * D, (j + 1) * D))
            for theirs, mine in (("attention.output.dense", "attention_out"),
                                 ("attention.output.LayerNorm", "attention_norm"),
                                 ("intermediate.dense", "intermediate"),
                                 ("output.dense", "output"), ("output.LayerNorm", "output_norm")):
                names[f"{hf}{theirs}.{k}"] = (f"{me}{mine}.{k}", None)
    for k in ("weight", "bias"):
        names[f"embeddings.LayerNorm.{k}"] = (f"embeddings.LayerNorm.{k}", None)
        if pooler:
            names[f"pooler.dense.{k}"] = (f"pooler.{k}", None)
    return names


def encoder_prefix(keys, where):
    """The prefix of the encoder's tensors among ``keys`` (``bert.``, ``roberta.`` or
    none)."""
    for prefix in PREFIXES:
        if f"{prefix}embeddings.word_embeddings.weight" in keys:
            return prefix
    raise EncoderConfigError(f"{where}: no embeddings.word_embeddings.weight under "
                             f"{', '.join(repr(p) for p in PREFIXES)}: not a BERT-family encoder")


def load_bert_encoder(config, tensors, where="model.safetensors", needs_pooler=False):
    """The :class:`BertEncoder` (eval mode) of a config dict and ``tensors`` (``{Hugging
    Face name: tensor}``, e.g. a whole ``*ForMaskedLM`` file: the masked-LM head's and
    other non-encoder tensors outside the encoder's prefix are left alone), with the
    pooler when its tensors are there. Strict: an encoder tensor missing, of another
    shape, or unknown under the prefix is an :class:`EncoderConfigError` naming it and
    ``where``; so is a missing pooler when ``needs_pooler``."""
    cfg = EncoderConfig.from_dict(config)
    prefix = encoder_prefix(tensors, where)
    has_pooler = f"{prefix}pooler.dense.weight" in tensors
    if needs_pooler and not has_pooler:
        raise EncoderConfigError(f"{where}: no {prefix}pooler.dense.weight, and the head "
                                 f"reads the pooled <s>")
    model = BertEncoder(cfg, has_pooler)
    names = hf_names(cfg, has_pooler)
    own = {prefix + k for k in names}
    unknown = sorted(k for k in tensors if k.startswith(prefix) and k not in own
                     and k[len(prefix):] not in BUFFERS
                     and (prefix or not k.startswith(("cls.", "lm_head.", "span_heads."))))
    if unknown:
        raise EncoderConfigError(f"{where}: {unknown[0]} is not a tensor of the "
                                 f"{cfg.family} encoder its config.json describes")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for hf, (mine, rows) in names.items():
            if prefix + hf not in tensors:
                raise EncoderConfigError(f"{where}: no {prefix + hf} (the {cfg.family} "
                                         f"encoder of {cfg.num_hidden_layers} layers needs it)")
            target = params[mine] if rows is None else params[mine][rows]
            value = tensors[prefix + hf]
            if value.shape != target.shape:
                raise EncoderConfigError(f"{where}: {prefix + hf} has shape {tuple(value.shape)}, "
                                         f"expected {tuple(target.shape)} by config.json")
            target.copy_(value)
    return model.eval()
