"""Hugging Face BERT-architecture checkpoint -> fairseq RoBERTa checkpoint.

BERT and fairseq's ``roberta`` encoder are the same network (post-LN, exact GELU,
unscaled embeddings, learned positions, embedding LayerNorm), so the conversion mostly
renames and reorders tensors:

=================================================  ==========================================
Hugging Face (``bert.`` prefix or none)            fairseq (``encoder.``)
=================================================  ==========================================
embeddings.word_embeddings                         sentence_encoder.embed_tokens (rows permuted)
embeddings.position_embeddings                     sentence_encoder.embed_positions (rows + 2,
  + token_type_embeddings[0]                         type 0 folded in; rows 0, 1 zero)
embeddings.LayerNorm                               sentence_encoder.layernorm_embedding
encoder.layer.N.attention.self.{query,key,value}   sentence_encoder.layers.N.self_attn.{q,k,v}_proj
encoder.layer.N.attention.output.dense             ....self_attn.out_proj
encoder.layer.N.attention.output.LayerNorm         ....self_attn_layer_norm
encoder.layer.N.intermediate.dense                 ....fc1
encoder.layer.N.output.dense                       ....fc2
encoder.layer.N.output.LayerNorm                   ....final_layer_norm
cls.predictions.transform.{dense,LayerNorm}        lm_head.{dense,layer_norm} (fresh if absent)
cls.predictions.bias                               lm_head.bias (permuted); lm_head.weight is
                                                     tied to embed_tokens
embeddings.token_type_embeddings[1]                token_types.weight[1] (model level; row 0
  - token_type_embeddings[0]                         is zero: type 0 is in the positions)
pooler.dense                                       pooler.dense (model level)
=================================================  ==========================================

The last two have no place in fairseq's RoBERTa encoder: the plugin's models hold them
(:mod:`span_plugin.models.bert_parts`), so a checkpoint that has them is written for
the ``roberta_span`` architecture with ``cfg.model.bert_token_types`` /
``bert_pooler`` set (``span-convert flags`` prints ``--bert-token-types
--bert-pooler``). Pairs are then encoded as BERT encodes them: the tokens after the
first ``</s>`` (BERT's ``B [SEP]``) get segment B. ``roberta_only=True`` (``span-convert
bert --roberta-only``) writes a checkpoint fairseq's own ``roberta`` loads instead, with
both dropped: every token is segment A, heads read the raw ``<s>`` feature.

What has no place in the plugin either is dropped and recorded in the checkpoint's
``cfg.model.bert_conversion``: the next-sentence classifier, token types past the
second. fairseq hard-codes LayerNorm eps = 1e-5; BERT's eps is kept as
``cfg.model.layernorm_eps`` for a model that can set it.

Vocabulary: fairseq's ``Dictionary`` puts ``<s> <pad> </s> <unk>`` at ids 0-3, then
``dict.txt`` in order, and the GLUE / masked-LM tasks append ``<mask>`` at load. BERT's
``[CLS] [PAD] [SEP] [UNK]`` take ids 0-3, ``[MASK]`` the last id, and every other
WordPiece keeps its vocab.txt order in between.

Layers: reading the source (config, vocabulary, lazily opened weights) -> mapping
tensors (views of the memory-mapped source; only the embedding, position table and LM
bias are new tensors) -> assembling the fairseq checkpoint -> writing atomically.
Everything is validated before the first byte is written.
"""

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from span_plugin.convert import safe_load
from span_plugin.convert.safe_load import CHECKPOINT_SAFE_GLOBALS, allow_checkpoint_types  # noqa: F401
from span_plugin.formats.files import atomic_copy, atomic_write
from span_plugin.tokenizers.wordpiece import BERT_MASK, BERT_SPECIALS, load_wordpiece

logger = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("bert",)
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Hugging Face activation -> fairseq activation of the same formula. gelu_new and
# gelu_pytorch_tanh are 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), which is
# fairseq's gelu_accurate (fairseq/modules/gelu.py); "gelu" is the exact erf GELU in both.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_accurate", "gelu_pytorch_tanh": "gelu_accurate"}

# BERT special token -> fairseq symbol, in fairseq id order 0..3 (Dictionary's defaults).
FAIRSEQ_SYMBOLS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
FAIRSEQ_PAD = 1  # positions start at padding_idx + 1
POSITION_OFFSET = FAIRSEQ_PAD + 1

ENC = "encoder.sentence_encoder."
LM = "encoder.lm_head."
# BERT's parts the plugin's models hold at model level (span_plugin.models.bert_parts).
TOKEN_TYPES = "token_types.weight"
POOLER = "pooler.dense."
SEGMENTS = 2  # segments A and B of a pair
INIT_STD = 0.02  # fairseq's init_bert_params, used for a fresh LM head


class ConversionError(ValueError):
    """Bad input: names the file and what was expected."""


# --------------------------------------------------------------------------------------
# Source: config
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BertShape:
    """What the conversion needs from config.json, with fairseq's names."""

    layers: int
    embed_dim: int
    ffn_embed_dim: int
    attention_heads: int
    vocab_size: int
    max_positions: int
    type_vocab_size: int
    layernorm_eps: float
    activation_fn: str  # fairseq name
    dropout: float
    attention_dropout: float
    raw: Dict = field(repr=False, compare=False, default_factory=dict)


def read_bert_config(hf_dir) -> BertShape:
    """Read and validate ``hf_dir/config.json`` of a BERT-architecture model."""
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise ConversionError(f"{hf_dir}: no such folder (expected a Hugging Face model folder)")
    path = hf_dir / "config.json"
    if not path.is_file():
        raise ConversionError(f"{path}: missing (a Hugging Face model folder has config.json)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ConversionError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(raw, dict):
        raise ConversionError(f"{path}: expected a JSON object")

    model_type = raw.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConversionError(
            f"{path}: model_type {model_type!r} is not supported; span-convert bert converts "
            f"BERT-architecture checkpoints (model_type 'bert': BERT, SpanBERT, MiniLM, ...)"
        )
    position_type = raw.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ConversionError(
            f"{path}: position_embedding_type {position_type!r} is not supported; fairseq's "
            f"RoBERTa has learned absolute positions only (expected 'absolute')"
        )
    act = raw.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise ConversionError(
            f"{path}: hidden_act {act!r} is not supported (expected one of "
            f"{', '.join(sorted(ACTIVATIONS))})"
        )
    if raw.get("is_decoder") or raw.get("add_cross_attention"):
        raise ConversionError(
            f"{path}: is_decoder/add_cross_attention is set; only encoder-only BERT converts"
        )

    def need(key):
        if not isinstance(raw.get(key), int) or isinstance(raw.get(key), bool) or raw[key] <= 0:
            raise ConversionError(f"{path}: {key} must be a positive integer, got {raw.get(key)!r}")
        return raw[key]

    shape = BertShape(
        layers=need("num_hidden_layers"),
        embed_dim=need("hidden_size"),
        ffn_embed_dim=need("intermediate_size"),
        attention_heads=need("num_attention_heads"),
        vocab_size=need("vocab_size"),
        max_positions=need("max_position_embeddings"),
        type_vocab_size=int(raw.get("type_vocab_size", 2)),
        layernorm_eps=float(raw.get("layer_norm_eps", 1e-12)),
        activation_fn=ACTIVATIONS[act],
        dropout=float(raw.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(raw.get("attention_probs_dropout_prob", 0.1)),
        raw=raw,
    )
    if shape.embed_dim % shape.attention_heads:
        raise ConversionError(
            f"{path}: hidden_size {shape.embed_dim} is not a multiple of "
            f"num_attention_heads {shape.attention_heads}"
        )
    return shape


# --------------------------------------------------------------------------------------
# Source: vocabulary
# --------------------------------------------------------------------------------------


def read_vocab(path) -> List[str]:
    """The tokens of a WordPiece ``vocab.txt``, one a line, as Hugging Face reads them
    (text mode, so ``\\r\\n`` counts as a line end; only the line end is stripped)."""
    path = Path(path)
    if not path.is_file():
        raise ConversionError(f"{path}: missing (a BERT model folder has vocab.txt)")
    try:
        with open(path, encoding="utf-8") as f:
            return [line[:-1] if line.endswith("\n") else line for line in f]
    except UnicodeDecodeError as err:
        raise ConversionError(f"{path}: not UTF-8 ({err})") from err


@dataclass(frozen=True)
class VocabMapping:
    """BERT ids <-> fairseq ids.

    ``order``: LongTensor [V], the BERT id of each fairseq id (so fairseq's embedding is
    ``bert_embedding[order]``). ``dict_tokens``: the ``dict.txt`` entries, fairseq ids
    4 .. V-2 in order.
    """

    order: torch.Tensor
    dict_tokens: Tuple[str, ...]

    @property
    def bert_to_fairseq(self) -> torch.Tensor:
        """LongTensor [V]: the fairseq id of each BERT id (the inverse permutation)."""
        inverse = torch.empty_like(self.order)
        inverse[self.order] = torch.arange(len(self.order))
        return inverse


def vocab_mapping(vocab: Sequence[str], source="vocab.txt") -> VocabMapping:
    """Check a BERT vocabulary against fairseq's dictionary format and build the
    permutation. ``source`` names the file in error messages."""
    seen: Dict[str, int] = {}
    for line, token in enumerate(vocab, 1):
        if token in seen:
            raise ConversionError(
                f"{source}: token {token!r} appears twice (lines {seen[token]} and {line})"
            )
        seen[token] = line
        if not token or any(ch.isspace() for ch in token):
            raise ConversionError(
                f"{source}, line {line}: token {token!r} is empty or holds whitespace, which "
                f"fairseq's dict.txt ('token count' lines) cannot hold"
            )
        if token in FAIRSEQ_SYMBOLS:
            raise ConversionError(
                f"{source}, line {line}: token {token!r} is one of fairseq's own symbols "
                f"({' '.join(FAIRSEQ_SYMBOLS)}), which the BERT specials are mapped onto"
            )
    wanted = [bert for bert, _ in BERT_SPECIALS] + [BERT_MASK]
    missing = [tok for tok in wanted if tok not in seen]
    if missing:
        raise ConversionError(
            f"{source}: no {', '.join(missing)} token; a BERT vocabulary needs all of "
            f"{', '.join(wanted)}"
        )
    specials = {seen[tok] - 1 for tok in wanted}
    head = [seen[bert] - 1 for bert, _ in BERT_SPECIALS]
    middle = [i for i in range(len(vocab)) if i not in specials]
    order = torch.tensor(head + middle + [seen[BERT_MASK] - 1], dtype=torch.long)
    return VocabMapping(order=order, dict_tokens=tuple(vocab[i] for i in middle))


def check_tokenizer_json(path, vocab: Sequence[str], vocab_source="vocab.txt") -> None:
    """Refuse a ``tokenizer.json`` whose WordPiece vocabulary differs from vocab.txt: the
    output folder ships both, and ids from one must mean the same in the other."""
    try:
        model = json.loads(Path(path).read_text(encoding="utf-8")).get("model") or {}
    except (ValueError, UnicodeDecodeError, AttributeError) as err:
        raise ConversionError(f"{path}: not a valid tokenizer.json ({err})") from err
    table = model.get("vocab")
    if not isinstance(table, dict):
        return  # not a table we can compare (nothing to contradict vocab.txt)
    if table != {token: i for i, token in enumerate(vocab)}:
        differ = next((t for i, t in enumerate(vocab) if table.get(t) != i), None)
        detail = (f"e.g. {differ!r} is id {vocab.index(differ)} in {vocab_source} but "
                  f"{table.get(differ)} in tokenizer.json" if differ is not None
                  else f"{len(table)} vs {len(vocab)} entries")
        raise ConversionError(
            f"{path}: its vocabulary differs from {vocab_source} ({detail})"
        )


# --------------------------------------------------------------------------------------
# Source: weights, opened lazily
# --------------------------------------------------------------------------------------


def find_weights(hf_dir) -> Path:
    """``model.safetensors`` or else ``pytorch_model.bin`` of ``hf_dir``."""
    hf_dir = Path(hf_dir)
    for name in WEIGHT_FILES:
        if (hf_dir / name).is_file():
            return hf_dir / name
    sharded = sorted(p.name for p in hf_dir.glob("*.index.json"))
    if sharded:
        raise ConversionError(
            f"{hf_dir}: sharded checkpoints ({', '.join(sharded)}) are not supported; "
            f"expected a single {' or '.join(WEIGHT_FILES)}"
        )
    raise ConversionError(f"{hf_dir}: no weights (expected {' or '.join(WEIGHT_FILES)})")


def open_tensors(path) -> Mapping[str, torch.Tensor]:
    """Name -> tensor of a weights file, without reading the tensors' data: safetensors
    hands out views of its memory map; ``.bin`` files are loaded with ``mmap=True``."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            return _SafetensorsMap(safe_open(str(path), framework="pt"))
        except SafetensorError as err:
            raise ConversionError(f"{path}: not a readable safetensors file ({err})") from err
    state = load_torch_file(path)
    if not isinstance(state, Mapping) or not all(
        isinstance(v, torch.Tensor) for v in state.values()
    ):
        raise ConversionError(f"{path}: expected a state dict (tensor name -> tensor)")
    return state


def load_torch_file(path):
    """A torch weights file, its tensors memory-mapped: the safe loader of
    :mod:`span_plugin.convert.safe_load` (allow-listed types only; a file that is not a
    torch file, is damaged or holds anything else raises its
    :class:`~span_plugin.convert.safe_load.CheckpointFileError`)."""
    return safe_load.load_torch_file(path, mmap=True)


class _SafetensorsMap(Mapping):
    """Read-only mapping over an open safetensors file; a lookup is a view of its mmap."""

    def __init__(self, handle):
        self._handle = handle  # keeps the memory map open
        self._keys = list(handle.keys())

    def __getitem__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        return self._handle.get_tensor(key)

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)

    def __contains__(self, key):
        return key in self._keys


class BertWeights:
    """Lookup of a checkpoint's tensors by BERT name, whatever the key prefix
    (``BertModel``: none; ``BertFor*``: ``bert.``), accepting the old LayerNorm names
    ``gamma``/``beta``, checking shapes, and remembering what was used."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], source):
        self.tensors = tensors
        self.source = Path(source)
        self.used: set = set()
        self.prefix = self._find_prefix()

    def _find_prefix(self):
        anchor = "embeddings.word_embeddings.weight"
        prefixes = sorted(k[: -len(anchor)] for k in self.tensors if k.endswith(anchor))
        if not prefixes:
            raise ConversionError(
                f"{self.source}: missing tensor {anchor!r} (looked for it under any prefix, "
                f"e.g. 'bert.'); is this a BERT checkpoint?"
            )
        if len(prefixes) > 1:
            raise ConversionError(
                f"{self.source}: several BERT encoders (key prefixes {prefixes}); expected one"
            )
        return prefixes[0]

    def _resolve(self, key):
        """The stored key for ``key``, trying the gamma/beta spelling of LayerNorms."""
        if key in self.tensors:
            return key
        old = {".LayerNorm.weight": ".LayerNorm.gamma", ".LayerNorm.bias": ".LayerNorm.beta"}
        for new_suffix, old_suffix in old.items():
            if key.endswith(new_suffix) and key[: -len(new_suffix)] + old_suffix in self.tensors:
                return key[: -len(new_suffix)] + old_suffix
        return None

    def has(self, key, encoder=True) -> bool:
        return self._resolve(self.prefix + key if encoder else key) is not None

    def get(self, key, shape, encoder=True) -> torch.Tensor:
        """The tensor ``[prefix]key``, checked against the shape config.json implies.
        ``encoder=False`` for heads, which sit outside the prefix (``cls.``)."""
        full = self.prefix + key if encoder else key
        stored = self._resolve(full)
        if stored is None:
            raise ConversionError(
                f"{self.source}: missing tensor {full!r} (expected shape {tuple(shape)})"
            )
        tensor = self.tensors[stored]
        if tuple(tensor.shape) != tuple(shape):
            raise ConversionError(
                f"{self.source}: tensor {stored!r} has shape {tuple(tensor.shape)}; "
                f"config.json implies {tuple(shape)}"
            )
        self.used.add(stored)
        return tensor

    def unused(self) -> List[str]:
        return sorted(k for k in self.tensors if k not in self.used)


# --------------------------------------------------------------------------------------
# Mapping
# --------------------------------------------------------------------------------------

# fairseq layer module -> BERT layer module, for weight and bias alike.
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


def _compact(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when it owns its storage; else a copy, since torch.save writes
    whole storages and a view would drag the rest of its storage along."""
    if t.is_contiguous() and t.storage_offset() == 0 and (
        t.untyped_storage().nbytes() == t.numel() * t.element_size()
    ):
        return t
    return t.contiguous().clone()


def _lm_head(weights: BertWeights, shape: BertShape, vocab: VocabMapping, seed: int):
    """fairseq lm_head tensors (without the tied weight): BERT's MLM head when the
    checkpoint has one, else fairseq's initialisation.

    Returns ({name: tensor}, how: "converted" or "fresh (...)"). ``bias`` is [V] in
    fairseq id order; the others are [H, H] and [H]."""
    h, v = shape.embed_dim, shape.vocab_size
    if any(k.startswith("cls.predictions.") for k in weights.tensors):
        bias_key = "cls.predictions.bias"
        if not weights.has(bias_key, encoder=False):
            bias_key = "cls.predictions.decoder.bias"
        head = {
            "dense.weight": weights.get("cls.predictions.transform.dense.weight", (h, h), False),
            "dense.bias": weights.get("cls.predictions.transform.dense.bias", (h,), False),
            "layer_norm.weight": weights.get(
                "cls.predictions.transform.LayerNorm.weight", (h,), False),
            "layer_norm.bias": weights.get(
                "cls.predictions.transform.LayerNorm.bias", (h,), False),
            "bias": weights.get(bias_key, (v,), False)[vocab.order],
        }
        # HF ties the decoder to the word embeddings (fairseq does too) and keeps a second
        # name for the bias: both are accounted for, not dropped.
        for alias in ("cls.predictions.decoder.bias", "cls.predictions.decoder.weight"):
            if alias in weights.tensors:
                weights.used.add(alias)
        return head, "converted"

    dtype = weights.get("embeddings.word_embeddings.weight", (v, h)).dtype
    gen = torch.Generator().manual_seed(seed)
    head = {
        "dense.weight": torch.empty(h, h).normal_(0.0, INIT_STD, generator=gen).to(dtype),
        "dense.bias": torch.zeros(h, dtype=dtype),
        "layer_norm.weight": torch.ones(h, dtype=dtype),
        "layer_norm.bias": torch.zeros(h, dtype=dtype),
        "bias": torch.zeros(v, dtype=dtype),
    }
    return head, f"fresh (dense normal std {INIT_STD}, seed {seed}; biases 0, LayerNorm 1/0)"


def _untied_decoder(weights: BertWeights, word: torch.Tensor) -> bool:
    """True when the checkpoint's MLM decoder matrix differs from its word embeddings
    (fairseq ties them, so such a decoder cannot be kept)."""
    decoder = weights.tensors.get("cls.predictions.decoder.weight")
    if decoder is None or decoder.shape != word.shape:
        return decoder is not None
    if decoder.untyped_storage().data_ptr() == word.untyped_storage().data_ptr():
        return False
    return not torch.equal(decoder, word)


def _bert_parts(weights: BertWeights, shape: BertShape, keep: bool):
    """The segment-B difference ``[2, H]`` (row 0 zero) and the pooler of the checkpoint,
    each None when it has none or ``keep`` is False; and the drop records of what is
    left out."""
    h, dropped = shape.embed_dim, []
    types = pooler = None
    if shape.type_vocab_size > 1:
        table = weights.get("embeddings.token_type_embeddings.weight", (shape.type_vocab_size, h))
        if keep:
            types = torch.cat([torch.zeros_like(table[:1]), table[1:SEGMENTS] - table[:1]])
        first_dropped = SEGMENTS if keep else 1
        if shape.type_vocab_size > first_dropped:
            dropped.append({
                "tensor": f"{weights.prefix}embeddings.token_type_embeddings.weight"
                          f"[{first_dropped}:]",
                "reason": ("token types >= 2: a pair has two segments" if keep else
                           "segment B (token type 1): fairseq's roberta has no segment "
                           "embeddings (--roberta-only); pairs are encoded as segment A "
                           "throughout"),
            })
    if keep and weights.has("pooler.dense.weight"):  # else unused: _drop_reason records it
        pooler = {"weight": weights.get("pooler.dense.weight", (h, h)),
                  "bias": weights.get("pooler.dense.bias", (h,))}
    return types, pooler, dropped


def convert_state_dict(
    weights: BertWeights, shape: BertShape, vocab: VocabMapping, seed: int = 0,
    roberta_only: bool = False,
) -> Tuple[Dict[str, torch.Tensor], Dict]:
    """Map BERT tensors onto fairseq RoBERTa's state dict, plus BERT's segment-B
    embedding and pooler for the plugin's models (neither with ``roberta_only``).

    Returns (state_dict, record). Tensors are views of the source where the layout is
    the same; new tensors are made only for the permuted embedding [V, H], the position
    table [P + 2, H], the segment difference [2, H] and the LM-head bias [V]. ``record``
    says what was converted, folded, made fresh and dropped.
    """
    h, f, v, p = shape.embed_dim, shape.ffn_embed_dim, shape.vocab_size, shape.max_positions
    word = weights.get("embeddings.word_embeddings.weight", (v, h))
    sd: Dict[str, torch.Tensor] = {ENC + "version": torch.tensor([3.0])}
    embed_tokens = word[vocab.order]
    sd[ENC + "embed_tokens.weight"] = embed_tokens

    # fairseq position i (from padding_idx + 1 = 2) is BERT position i - 2; type 0 is
    # added to every BERT token, so it folds into every position row.
    positions = weights.get("embeddings.position_embeddings.weight", (p, h))
    table = torch.zeros(p + POSITION_OFFSET, h, dtype=positions.dtype)
    table[POSITION_OFFSET:] = positions
    folded = shape.type_vocab_size > 0
    if folded:
        types = weights.get("embeddings.token_type_embeddings.weight", (shape.type_vocab_size, h))
        table[POSITION_OFFSET:] += types[0]
    sd[ENC + "embed_positions.weight"] = table
    sd[ENC + "layernorm_embedding.weight"] = weights.get("embeddings.LayerNorm.weight", (h,))
    sd[ENC + "layernorm_embedding.bias"] = weights.get("embeddings.LayerNorm.bias", (h,))

    for n in range(shape.layers):
        for fs_name, bert_name, kind in _LAYER_MAP:
            w_shape, b_shape = _shapes(kind, h, f)
            src = f"encoder.layer.{n}.{bert_name}"
            sd[f"{ENC}layers.{n}.{fs_name}.weight"] = weights.get(src + ".weight", w_shape)
            sd[f"{ENC}layers.{n}.{fs_name}.bias"] = weights.get(src + ".bias", b_shape)

    head, lm_head_how = _lm_head(weights, shape, vocab, seed)
    for name, tensor in head.items():
        sd[LM + name] = tensor
    types, pooler, parts_dropped = _bert_parts(weights, shape, keep=not roberta_only)
    if types is not None:
        sd[TOKEN_TYPES] = types
    if pooler is not None:
        sd.update({POOLER + k: t for k, t in pooler.items()})
    sd = {k: _compact(t) for k, t in sd.items()}
    sd[LM + "weight"] = sd[ENC + "embed_tokens.weight"]  # tied: one tensor, saved once

    dropped = [{"tensor": k, "reason": _drop_reason(k)} for k in weights.unused()]
    dropped += parts_dropped
    if lm_head_how == "converted" and _untied_decoder(weights, word):
        logger.warning("%s: the MLM decoder is not tied to the word embeddings; fairseq "
                       "ties them, so the converted LM head uses the word embeddings",
                       weights.source)
        dropped.append({"tensor": "cls.predictions.decoder.weight",
                        "reason": "MLM decoder not tied to the word embeddings; fairseq's "
                                  "lm_head.weight is the (tied) token embedding"})
    record = {
        "key_prefix": weights.prefix,
        "vocab_size": v,
        "specials": {bert: fs for bert, fs in BERT_SPECIALS} | {BERT_MASK: "<mask>"},
        "positions": f"fairseq row i = BERT position i - {POSITION_OFFSET}; rows 0-1 unused "
                     f"(zero); token type 0 {'folded in' if folded else 'absent'}",
        "token_types": (f"{TOKEN_TYPES}: row 1 = BERT's type 1 - type 0, row 0 zero; "
                        f"segment B = the tokens after the first </s>"
                        if types is not None else "none kept"),
        "pooler": f"{POOLER}{{weight,bias}}" if pooler is not None else "none kept",
        "lm_head": lm_head_how,
        "dtype": str(word.dtype).replace("torch.", ""),
        "dropped": dropped,
    }
    return sd, record


def _drop_reason(key: str) -> str:
    if ".pooler." in key or key.startswith("pooler."):
        return ("pooler: fairseq's roberta has no place for it (--roberta-only); its "
                "classification heads start a dense layer of their own")
    if key.startswith("cls.seq_relationship."):
        return ("next-sentence-prediction classifier: no task reads it (the pooler under "
                "it is kept)")
    if key.endswith("position_ids") or key.endswith("token_type_ids"):
        return "buffer, not a weight"
    return "no counterpart in fairseq RoBERTa or the plugin's models"


# --------------------------------------------------------------------------------------
# fairseq checkpoint
# --------------------------------------------------------------------------------------


def fairseq_model_cfg(shape: BertShape, record: Optional[Dict] = None,
                      token_types: bool = False, pooler: bool = False) -> Dict:
    """``cfg.model`` with the checkpoint's sizes: fairseq's ``roberta`` architecture, or
    the plugin's ``roberta_span`` with ``bert_token_types`` / ``bert_pooler`` when the
    checkpoint holds BERT's segment-B embedding / pooler. The structural flags are
    written out (not left to defaults) because they are what makes RoBERTa compute
    BERT's function."""
    arch = "roberta_span" if token_types or pooler else "roberta"
    cfg = {
        "_name": arch,
        "arch": arch,
        "encoder_layers": shape.layers,
        "encoder_embed_dim": shape.embed_dim,
        "encoder_ffn_embed_dim": shape.ffn_embed_dim,
        "encoder_attention_heads": shape.attention_heads,
        "max_positions": shape.max_positions,
        "max_source_positions": shape.max_positions,
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
        cfg["bert_conversion"] = record
    return cfg


def build_checkpoint(state_dict: Dict[str, torch.Tensor], model_cfg: Dict, data_dir,
                     cased: bool = False) -> Dict:
    """A fairseq checkpoint dict of plain containers and tensors only (it loads with
    ``torch.load(weights_only=True)``).

    ``bpe`` names fairseq's own ``bert`` BPE over the folder's vocab.txt, so fairseq's
    ``RobertaModel.from_pretrained(folder, "model.pt", folder)`` encodes text too (it
    needs the ``transformers`` package; pass ``bpe_vocab_file=`` after moving the folder).

    ``optimizer_history`` holds one empty entry rather than none: fairseq's
    ``_upgrade_state_dict`` indexes ``optimizer_history[-1]``. With
    ``last_optimizer_state`` None, no optimizer state is ever restored from it.
    """
    return {
        "cfg": {
            "_name": None,
            "model": model_cfg,
            # What load_model_ensemble_and_task needs to build the model: the dictionary
            # folder (override with arg_overrides={"data": ...} after moving the folder).
            "task": {
                "_name": "masked_lm",
                "data": str(data_dir),
                "tokens_per_sample": model_cfg["max_positions"],
            },
            "criterion": {"_name": "masked_lm"},
            "bpe": {"_name": "bert", "bpe_cased": bool(cased),
                    "bpe_vocab_file": str(Path(data_dir) / "vocab.txt")},
        },
        "model": state_dict,
        "optimizer_history": [{
            "criterion_name": "MaskedLmLoss",
            "optimizer_name": "none",
            "lr_scheduler_state": {"best": None},
            "num_updates": 0,
        }],
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}},
        "last_optimizer_state": None,
    }


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


def write_dict_txt(tokens: Sequence[str], path) -> None:
    """fairseq ``dict.txt`` (``token count`` lines); counts are all 1, order is kept."""
    atomic_write(path, lambda f: f.write("".join(f"{t} 1\n" for t in tokens).encode("utf-8")))


# Files copied from the source so that the output folder tokenizes on its own.
COPIED_FILES = (
    ("vocab.txt", "vocab.txt"),
    ("tokenizer.json", "tokenizer.json"),
    ("tokenizer_config.json", "tokenizer_config.json"),
    ("special_tokens_map.json", "special_tokens_map.json"),
    ("config.json", "hf_config.json"),
)


@dataclass
class Conversion:
    """A validated conversion, ready to write. Built by :func:`plan_bert_conversion`."""

    hf_dir: Path
    weights_path: Path
    shape: BertShape
    vocab: VocabMapping
    state_dict: Dict[str, torch.Tensor]
    record: Dict

    @property
    def model_cfg(self) -> Dict:
        return fairseq_model_cfg(self.shape, self.record,
                                 token_types=TOKEN_TYPES in self.state_dict,
                                 pooler=POOLER + "weight" in self.state_dict)

    def checkpoint(self, out_dir) -> Dict:
        normalizer = json.loads(load_wordpiece(str(self.hf_dir)).to_str()).get("normalizer") or {}
        return build_checkpoint(
            self.state_dict, self.model_cfg, Path(out_dir).resolve(),
            cased=not normalizer.get("lowercase", True))


def plan_bert_conversion(hf_dir, seed: int = 0, roberta_only: bool = False) -> Conversion:
    """Read and validate everything; map the tensors. Nothing is written.
    ``roberta_only``: leave out the segment-B embedding and the pooler (a checkpoint
    for fairseq's own ``roberta``)."""
    hf_dir = Path(hf_dir)
    shape = read_bert_config(hf_dir)
    vocab_path = hf_dir / "vocab.txt"
    vocab = read_vocab(vocab_path)
    weights_path = find_weights(hf_dir)
    weights = BertWeights(open_tensors(weights_path), weights_path)
    rows = weights.tensors[weights.prefix + "embeddings.word_embeddings.weight"].shape[0]
    if len(vocab) != rows:
        raise ConversionError(
            f"{vocab_path} has {len(vocab)} tokens but {weights_path} has {rows} word "
            f"embedding rows ({weights.prefix}embeddings.word_embeddings.weight); they must match"
        )
    mapping = vocab_mapping(vocab, vocab_path)
    if (hf_dir / "tokenizer.json").is_file():
        check_tokenizer_json(hf_dir / "tokenizer.json", vocab, vocab_path)
    state_dict, record = convert_state_dict(weights, shape, mapping, seed, roberta_only)
    record = {
        "source_dir": str(hf_dir.resolve()),
        "source_weights": weights_path.name,
        "source_config": shape.raw,
        "layernorm_eps": shape.layernorm_eps,
        "hidden_act": shape.raw.get("hidden_act", "gelu"),
        **record,
    }
    return Conversion(hf_dir, weights_path, shape, mapping, state_dict, record)


def convert_bert(hf_dir, out_dir, overwrite: bool = False, seed: int = 0,
                 roberta_only: bool = False) -> Conversion:
    """Convert a Hugging Face BERT folder into ``out_dir``: ``model.pt`` (fairseq RoBERTa
    checkpoint, with BERT's segment-B embedding and pooler for the plugin's models
    unless ``roberta_only``), ``dict.txt``, and copies of the tokenizer files and
    ``hf_config.json``.

    Every check runs before anything is written; each file is written atomically, and
    ``model.pt`` last, so its presence means the folder is complete. ``seed`` seeds a
    fresh LM head (when the checkpoint has none)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConversionError(f"{out_dir}: exists and is not a folder")
    if (out_dir / "model.pt").exists() and not overwrite:
        raise ConversionError(f"{out_dir / 'model.pt'}: exists (pass overwrite / --force)")
    plan = plan_bert_conversion(hf_dir, seed=seed, roberta_only=roberta_only)

    out_dir.mkdir(parents=True, exist_ok=True)
    write_dict_txt(plan.vocab.dict_tokens, out_dir / "dict.txt")
    for src, dst in COPIED_FILES:
        if (plan.hf_dir / src).is_file():
            atomic_copy(plan.hf_dir / src, out_dir / dst)
        elif (out_dir / dst).exists():  # left by an earlier conversion (overwrite)
            (out_dir / dst).unlink()
    atomic_write(out_dir / "model.pt", lambda f: torch.save(plan.checkpoint(out_dir), f))
    logger.info("wrote %s", out_dir / "model.pt")
    return plan
