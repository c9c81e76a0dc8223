"""Hugging Face BERT-architecture checkpoint -> fairseq RoBERTa checkpoint
(:func:`convert_bert`, :func:`plan_bert_conversion`): the same network, so tensors are
renamed and reordered, the vocabulary permuted to fairseq's ``Dictionary`` order, and
BERT's segment-B embedding and pooler kept for ``roberta_span``. The tensor map and the
vocabulary order: docs/CONVERT.md, section "Module notes"."""

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import torch

from span_plugin.convert.encoder_map import (
    ENC,
    FAIRSEQ_SYMBOLS,
    LM,
    POSITION_OFFSET,
    fairseq_model_cfg,
    finish_state_dict,
    fresh_lm_head,
    map_layers,
)
from span_plugin.convert.fairseq_out import build_checkpoint, check_out_dir, write_model_folder
from span_plugin.convert.hf_source import (
    ConversionError,
    EncoderShape,
    EncoderWeights,
    open_encoder_weights,
    read_encoder_shape,
)
from span_plugin.tokenizers.wordpiece import BERT_MASK, BERT_SPECIALS, load_wordpiece

logger = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("bert",)
# BERT's parts the plugin's models hold at model level (span_plugin.models.bert_attach).
TOKEN_TYPES = "token_types.weight"
POOLER = "pooler.dense."
SEGMENTS = 2  # segments A and B of a pair
# The tables the conversion folds together, kept as they were beside model.pt.
EMBEDDINGS_FILE = "bert_embeddings.safetensors"
UNFOLDED = ("embeddings.position_embeddings.weight", "embeddings.token_type_embeddings.weight")

BertShape = EncoderShape
BertWeights = EncoderWeights


def read_bert_config(hf_dir) -> BertShape:
    """Read and validate ``hf_dir/config.json`` of a BERT-architecture model."""
    return read_encoder_shape(
        hf_dir, SUPPORTED_MODEL_TYPES,
        "span-convert bert converts BERT-architecture checkpoints (model_type 'bert': "
        "BERT, SpanBERT, MiniLM, ...)", family="BERT", default_eps=1e-12)


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
    if model.get("type") not in ("WordPiece", None):  # None: files older than the key
        raise ConversionError(
            f"{path}: a {model.get('type')} tokenizer, not a WordPiece one: it is not the "
            f"tokenizer of this BERT folder's {vocab_source}; remove it or give the folder's own")
    unknown = model.get("unk_token")
    if unknown is not None and unknown not in vocab:
        raise ConversionError(
            f"{path}: its unknown token {unknown!r} is not in {vocab_source}: a word it "
            f"cannot split would have no id")
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
# Mapping
# --------------------------------------------------------------------------------------


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
    return fresh_lm_head(h, v, dtype, seed)


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
    h, v, p = shape.embed_dim, shape.vocab_size, shape.max_positions
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
    sd.update(map_layers(weights, shape))

    head, lm_head_how = _lm_head(weights, shape, vocab, seed)
    for name, tensor in head.items():
        sd[LM + name] = tensor
    types, pooler, parts_dropped = _bert_parts(weights, shape, keep=not roberta_only)
    if types is not None:
        sd[TOKEN_TYPES] = types
    if pooler is not None:
        sd.update({POOLER + k: t for k, t in pooler.items()})
    sd = finish_state_dict(sd)  # lm_head.weight tied: one tensor, saved once

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
# Plan and write
# --------------------------------------------------------------------------------------


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
    # BERT's position and token-type tables as they were: folding type 0 into the
    # positions rounds, so span-export hf takes them back from here (EMBEDDINGS_FILE).
    embeddings: Dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def model_cfg(self) -> Dict:
        return fairseq_model_cfg(self.shape, self.record,
                                 token_types=TOKEN_TYPES in self.state_dict,
                                 pooler=POOLER + "weight" in self.state_dict)

    def checkpoint(self, out_dir) -> Dict:
        normalizer = json.loads(load_wordpiece(str(self.hf_dir)).to_str()).get("normalizer") or {}
        data_dir = Path(out_dir).resolve()
        # fairseq's own ``bert`` BPE over the folder's vocab.txt (it needs the
        # ``transformers`` package).
        bpe = {"_name": "bert", "bpe_cased": not normalizer.get("lowercase", True),
               "bpe_vocab_file": str(data_dir / "vocab.txt")}
        return build_checkpoint(self.state_dict, self.model_cfg, data_dir, bpe)


def plan_bert_conversion(hf_dir, seed: int = 0, roberta_only: bool = False) -> Conversion:
    """Read and validate everything; map the tensors. Nothing is written.
    ``roberta_only``: leave out the segment-B embedding and the pooler (a checkpoint
    for fairseq's own ``roberta``)."""
    hf_dir = Path(hf_dir)
    shape = read_bert_config(hf_dir)
    vocab_path = hf_dir / "vocab.txt"
    vocab = read_vocab(vocab_path)
    weights_path, weights = open_encoder_weights(hf_dir)
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
    sizes = (shape.max_positions, shape.type_vocab_size)
    embeddings = {name: weights.get(name, (rows, shape.embed_dim))
                  for name, rows in zip(UNFOLDED, sizes) if rows and weights.has(name)}
    record = {
        "source_dir": str(hf_dir.resolve()),
        "source_weights": weights_path.name,
        "source_config": shape.raw,
        "layernorm_eps": shape.layernorm_eps,
        "hidden_act": shape.raw.get("hidden_act", "gelu"),
        **record,
    }
    return Conversion(hf_dir, weights_path, shape, mapping, state_dict, record, embeddings)


def convert_bert(hf_dir, out_dir, overwrite: bool = False, seed: int = 0,
                 roberta_only: bool = False) -> Conversion:
    """Convert a Hugging Face BERT folder into ``out_dir``: ``model.pt`` (fairseq RoBERTa
    checkpoint, with BERT's segment-B embedding and pooler for the plugin's models
    unless ``roberta_only``), ``dict.txt``, and copies of the tokenizer files and
    ``hf_config.json``.

    Every check runs before anything is written; each file is written atomically, and
    ``model.pt`` last, so its presence means the folder is complete. ``seed`` seeds a
    fresh LM head (when the checkpoint has none)."""
    out_dir = check_out_dir(out_dir, overwrite)
    plan = plan_bert_conversion(hf_dir, seed=seed, roberta_only=roberta_only)
    copies = [(plan.hf_dir / src, dst) for src, dst in COPIED_FILES]
    from safetensors.torch import save

    unfolded = {EMBEDDINGS_FILE: save({k: t.contiguous() for k, t in plan.embeddings.items()})}
    write_model_folder(out_dir, plan.vocab.dict_tokens, copies, unfolded, plan.checkpoint)
    return plan
