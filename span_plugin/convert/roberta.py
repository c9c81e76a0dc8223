"""Hugging Face RoBERTa-family checkpoint (RoBERTa, XLM-R, CamemBERT) -> fairseq RoBERTa
(:func:`convert_roberta`, :func:`plan_roberta_conversion`): the ids are fairseq's
already, so the embedding, LM head and vocabulary pass through unpermuted and
``dict.txt`` is written so that index == Hugging Face id. The tensor map and the
``dict.txt`` of each tokenizer kind: docs/CONVERT.md, section "Module notes"."""

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import torch

from span_plugin.convert.encoder_map import (
    ENC,
    FAIRSEQ_PAD,
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

logger = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("roberta", "xlm-roberta", "camembert")
SPM_FILE = "sentencepiece.bpe.model"
# The tokenizer kind for a sentencepiece vocabulary: the whole line, as XLM-R / CamemBERT
# were trained (the "sentencepiece" kind encodes GPT-2 words one by one: other pieces).
SPM_KIND = "sentencepiece-line"
HEAD_SPECIALS = FAIRSEQ_SYMBOLS[:4]  # <s> <pad> </s> <unk>: fairseq ids 0-3
MASK = FAIRSEQ_SYMBOLS[4]
GPT2_HEADER = "#version: 0.2"
# Files copied from the source so that the output folder tokenizes on its own.
COPIED_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# Tokenizer files of either kind (and of a BERT folder): an overwritten folder keeps only
# those of this conversion, so that its tokenizer is found without doubt.
TOKENIZER_FILES = ("vocab.json", "merges.txt", "encoder.json", "vocab.bpe", SPM_FILE, "vocab.txt")


def read_roberta_config(hf_dir) -> EncoderShape:
    """Read and validate ``hf_dir/config.json`` of a RoBERTa-family model."""
    shape = read_encoder_shape(
        hf_dir, SUPPORTED_MODEL_TYPES,
        "span-convert roberta converts RobertaModel-family checkpoints (model_type "
        "'roberta', 'xlm-roberta', 'camembert': RoBERTa, XLM-R, CamemBERT, ...)",
        family="RoBERTa", default_eps=1e-5)
    path = Path(hf_dir) / "config.json"
    if shape.raw.get("pad_token_id", FAIRSEQ_PAD) != FAIRSEQ_PAD:
        raise ConversionError(
            f"{path}: pad_token_id {shape.raw['pad_token_id']!r}; fairseq's dictionary and "
            f"positions need padding id {FAIRSEQ_PAD} (as every fairseq-trained RoBERTa has)")
    if shape.max_positions <= POSITION_OFFSET:
        raise ConversionError(
            f"{path}: max_position_embeddings {shape.max_positions}; a RoBERTa table holds "
            f"{POSITION_OFFSET} rows below the first position, so it must exceed {POSITION_OFFSET}")
    return shape


# --------------------------------------------------------------------------------------
# Vocabulary: index == Hugging Face id
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RobertaVocab:
    """The converted vocabulary. ``kind``: the plugin's tokenizer kind (``gpt2`` or
    ``sentencepiece-line``); ``dict_tokens``: ``dict.txt``, fairseq ids 4 .. V-2;
    ``written``: files made for the output folder (name -> bytes); ``copied``: source
    files copied as they are (source path, name); ``placeholders``: ids kept under
    ``madeupwordNNNN``."""

    kind: str
    dict_tokens: Tuple[str, ...]
    written: Dict[str, bytes]
    copied: Tuple[Tuple[Path, str], ...]
    placeholders: int

    def bpe_cfg(self, data_dir: Path) -> Dict:
        """``cfg.bpe``: fairseq's own BPE over the output folder's files."""
        if self.kind == "gpt2":
            return {"_name": "gpt2", "gpt2_encoder_json": str(data_dir / "encoder.json"),
                    "gpt2_vocab_bpe": str(data_dir / "vocab.bpe")}
        # fairseq's own sentencepiece BPE encodes the whole line, as sentencepiece-line does.
        return {"_name": "sentencepiece", "sentencepiece_model": str(data_dir / SPM_FILE)}


def _load_json(path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ConversionError(f"{path}: not valid JSON ({err})") from err


def _check_mask(mask: int, v: int, source) -> None:
    if mask != v - 1:
        raise ConversionError(
            f"{source}: {MASK!r} has id {mask}; fairseq's tasks append it after dict.txt, "
            f"so it must be the last of the {v} embedding rows (id {v - 1})")


def _check_ends(table: Dict[str, int], v: int, source) -> None:
    """RoBERTa's specials at ids 0-3 and ``<mask>`` (when the table has it) at V-1."""
    for i, symbol in enumerate(HEAD_SPECIALS):
        if table.get(symbol) != i:
            raise ConversionError(
                f"{source}: {symbol!r} has id {table.get(symbol)!r}; fairseq's dictionary has "
                f"it at {i} (expected {' '.join(HEAD_SPECIALS)} at ids 0-3)")
    _check_mask(table.get(MASK, v - 1), v, source)


def _added_tokens(hf_dir) -> Dict[str, int]:
    """``tokenizer.json``'s added tokens (``<mask>`` lives there), or {}."""
    path = Path(hf_dir) / "tokenizer.json"
    if not path.is_file():
        return {}
    added = _load_json(path).get("added_tokens") or []
    return {t["content"]: t["id"] for t in added if isinstance(t, dict) and "content" in t}


def read_bpe_vocab(hf_dir, v: int) -> RobertaVocab:
    """Byte-level BPE from ``vocab.json`` + ``merges.txt`` (or ``tokenizer.json``'s BPE
    model): ``encoder.json`` is the vocabulary, ``vocab.bpe`` the merges with GPT-2's
    header, ``dict.txt`` the decimal ids 4 .. V-2."""
    hf_dir = Path(hf_dir)
    vocab_path, merges_path = hf_dir / "vocab.json", hf_dir / "merges.txt"
    if vocab_path.is_file() and merges_path.is_file():
        table, source = _load_json(vocab_path), vocab_path
        try:
            lines = merges_path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise ConversionError(f"{merges_path}: not UTF-8 ({err})") from err
        merges = [m for m in lines if m.strip() and not m.startswith("#version")]
    else:
        source = hf_dir / "tokenizer.json"
        model = _load_json(source).get("model") or {}
        table, merges = model.get("vocab"), model.get("merges") or []
        merges = [" ".join(m) if isinstance(m, list) else m for m in merges]
    if not isinstance(table, dict) or not all(
            isinstance(i, int) and 0 <= i < v for i in table.values()):
        raise ConversionError(
            f"{source}: expected a JSON object of BPE token -> id, every id below the {v} "
            f"embedding rows")
    _check_ends({**_added_tokens(hf_dir), **table}, v, source)
    merges_source = merges_path if source == vocab_path else source
    if not merges:  # the tokenizer would encode every word as single bytes
        raise ConversionError(f"{merges_source}: no merges; a byte-level BPE tokenizer has "
                              f"the merges its vocabulary was learned with")
    odd = next((m for m in merges if len(m.split(" ")) != 2), None)
    if odd is not None:
        raise ConversionError(f"{merges_source}: every merge must be two symbols split by one "
                              f"space, not {odd[:60]!r}")
    unknown = next((m for m in merges if m.replace(" ", "") not in table), None)
    if unknown is not None:
        raise ConversionError(
            f"{merges_source}: the merge {unknown!r} makes {unknown.replace(' ', '')!r}, which "
            f"{source.name} does not hold: the merges and the vocabulary are of two tokenizers")
    encoder = json.dumps(table, ensure_ascii=False).encode("utf-8")
    bpe = "\n".join([GPT2_HEADER, *merges, ""]).encode("utf-8")
    copied = tuple((hf_dir / n, n) for n in ("vocab.json", "merges.txt", *COPIED_FILES))
    return RobertaVocab("gpt2", tuple(str(i) for i in range(len(HEAD_SPECIALS), v - 1)),
                        {"encoder.json": encoder, "vocab.bpe": bpe}, copied, 0)


def _spm_hf_tokens(hf_dir, pieces: List[str], model_type: str) -> Tuple[List[str], object]:
    """Hugging Face's token of each id: ``tokenizer.json``'s vocabulary, or else the
    family's layout of the sentencepiece pieces (Hugging Face's own converters)."""
    path = Path(hf_dir) / "tokenizer.json"
    if path.is_file():
        vocab = (_load_json(path).get("model") or {}).get("vocab")
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...] in id order
            return [entry[0] for entry in vocab], path
        if isinstance(vocab, dict):
            tokens = [None] * (max(vocab.values(), default=-1) + 1)
            for token, i in vocab.items():
                tokens[i] = token
            return tokens, path
        raise ConversionError(f"{path}: no vocabulary in its model (expected model.vocab)")
    if model_type == "camembert":
        head = ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED"]
        return head + pieces[1:] + [MASK], f"{SPM_FILE} (CamemBERT's layout)"
    return list(HEAD_SPECIALS) + pieces[3:] + [MASK], f"{SPM_FILE} (XLM-R's layout)"


def read_spm_vocab(hf_dir, v: int, model_type: str) -> RobertaVocab:
    """sentencepiece: ``dict.txt`` holds the piece of each Hugging Face id 4 .. V-2; ids
    whose token the plugin's tokenizer never writes hold placeholders."""
    import sentencepiece as spm

    hf_dir = Path(hf_dir)
    spm_path = hf_dir / SPM_FILE
    try:
        sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    except (OSError, RuntimeError) as err:
        raise ConversionError(f"{spm_path}: not a readable sentencepiece model ({err})") from err
    n = sp.get_piece_size()
    pieces = [sp.id_to_piece(i) for i in range(n)]
    normal = {pieces[i] for i in range(n)
              if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))}
    tokens, source = _spm_hf_tokens(hf_dir, pieces, model_type)
    if len(tokens) > v:
        raise ConversionError(f"{source}: {len(tokens)} ids but the checkpoint has {v} "
                              f"embedding rows")
    table = {t: i for i, t in reversed(list(enumerate(tokens))) if t is not None}
    for i, symbol in ((1, "<pad>"), (3, "<unk>")):  # <s>/</s> may be CamemBERT's NOTUSED rows
        if len(tokens) <= i or tokens[i] != symbol:
            raise ConversionError(f"{source}: id {i} is {tokens[i] if len(tokens) > i else None!r}; "
                                  f"expected {symbol!r} (fairseq's id of it)")
    _check_mask({**_added_tokens(hf_dir), **table}.get(MASK, v - 1), v, source)
    dict_tokens, placeholders = [], 0
    for i in range(len(HEAD_SPECIALS), v - 1):
        token = tokens[i] if i < len(tokens) else None
        if token not in normal or token in FAIRSEQ_SYMBOLS or any(c.isspace() for c in token):
            token, placeholders = f"madeupword{i:04d}", placeholders + 1
        dict_tokens.append(token)
    missing = sorted(normal - set(dict_tokens))
    if missing:
        raise ConversionError(
            f"{source}: the pieces {missing[:5]} of {spm_path} have no Hugging Face id among "
            f"the embedding rows (the tokenizer files disagree)")
    copied = tuple((hf_dir / n, n) for n in (SPM_FILE, *COPIED_FILES))
    return RobertaVocab(SPM_KIND, tuple(dict_tokens), {}, copied, placeholders)


def read_roberta_vocab(hf_dir, shape: EncoderShape) -> RobertaVocab:
    """The folder's vocabulary: sentencepiece when it has ``sentencepiece.bpe.model``,
    else byte-level BPE."""
    hf_dir = Path(hf_dir)
    if (hf_dir / SPM_FILE).is_file():
        return read_spm_vocab(hf_dir, shape.vocab_size, shape.raw.get("model_type"))
    if (hf_dir / "vocab.json").is_file() and (hf_dir / "merges.txt").is_file():
        return read_bpe_vocab(hf_dir, shape.vocab_size)
    kind = _tokenizer_json_type(hf_dir / "tokenizer.json")
    if kind == "BPE":
        return read_bpe_vocab(hf_dir, shape.vocab_size)
    raise ConversionError(
        f"{hf_dir}: no vocabulary (expected {SPM_FILE}, or vocab.json and merges.txt, or a "
        f"byte-level BPE tokenizer.json" + (f"; its tokenizer.json is a {kind} tokenizer)"
                                            if kind else ")"))


def _tokenizer_json_type(path):
    """The model type a ``tokenizer.json`` declares (``BPE``, ``WordPiece``, ``Unigram``),
    or None when there is no such file."""
    if not path.is_file():
        return None
    raw = _load_json(path)
    model = raw.get("model") if isinstance(raw, dict) else None
    return str(model.get("type")) if isinstance(model, dict) else "model-less"


# --------------------------------------------------------------------------------------
# Mapping
# --------------------------------------------------------------------------------------


def _lm_head(weights: EncoderWeights, shape: EncoderShape, seed: int):
    """fairseq lm_head tensors (without the tied weight): RobertaForMaskedLM's
    ``lm_head`` when the checkpoint has one, else fairseq's initialisation.
    Returns ({name: tensor}, how); ``bias`` is [V], the others [H, H] and [H]."""
    h, v = shape.embed_dim, shape.vocab_size
    if not any(k.startswith("lm_head.") for k in weights.tensors):
        dtype = weights.get("embeddings.word_embeddings.weight", (v, h)).dtype
        return fresh_lm_head(h, v, dtype, seed)
    bias_key = "lm_head.bias" if weights.has("lm_head.bias", False) else "lm_head.decoder.bias"
    head = {name: weights.get(f"lm_head.{name}", size, False) for name, size in (
        ("dense.weight", (h, h)), ("dense.bias", (h,)),
        ("layer_norm.weight", (h,)), ("layer_norm.bias", (h,)))}
    head["bias"] = weights.get(bias_key, (v,), False)
    # The decoder is tied to the word embeddings (fairseq ties them too) and its bias is
    # a second name of lm_head.bias: both are accounted for, not dropped.
    for alias in ("lm_head.decoder.bias", "lm_head.decoder.weight"):
        if alias in weights.tensors:
            weights.used.add(alias)
    return head, "converted"


def _untied_decoder(weights: EncoderWeights, word: torch.Tensor) -> bool:
    """True when the checkpoint's LM decoder matrix differs from its word embeddings."""
    decoder = weights.tensors.get("lm_head.decoder.weight")
    if decoder is None:
        return False
    return decoder.shape != word.shape or not torch.equal(decoder, word)


def _drop_reason(key: str) -> str:
    if ".pooler." in key or key.startswith("pooler."):
        return ("pooler: fairseq's roberta has no place for it (the RoBERTa family is "
                "pre-trained without one); its classification heads start a dense layer "
                "of their own")
    if key.endswith("position_ids") or key.endswith("token_type_ids"):
        return "buffer, not a weight"
    return "no counterpart in fairseq RoBERTa"


def convert_state_dict(weights: EncoderWeights, shape: EncoderShape,
                       seed: int = 0) -> Tuple[Dict[str, torch.Tensor], Dict]:
    """Map RoBERTa-family tensors onto fairseq RoBERTa's state dict, ids unchanged.

    Returns (state_dict, record). Tensors are views of the source, except the position
    table [P, H] (type 0 folded in) and a fresh LM head."""
    h, v, p = shape.embed_dim, shape.vocab_size, shape.max_positions
    word = weights.get("embeddings.word_embeddings.weight", (v, h))
    sd: Dict[str, torch.Tensor] = {ENC + "version": torch.tensor([3.0]),
                                   ENC + "embed_tokens.weight": word}
    # Hugging Face numbers positions from pad_token_id + 1, as fairseq does: same rows.
    # Type 0 is added to every token, so it folds into every position a token can take.
    table = weights.get("embeddings.position_embeddings.weight", (p, h)).clone()
    dropped = []
    if shape.type_vocab_size > 0:
        types = weights.get("embeddings.token_type_embeddings.weight", (shape.type_vocab_size, h))
        table[POSITION_OFFSET:] += types[0]
        if shape.type_vocab_size > 1:
            dropped.append({
                "tensor": f"{weights.prefix}embeddings.token_type_embeddings.weight[1:]",
                "reason": "token types >= 1: fairseq's roberta has no segment embeddings "
                          "(the family is pre-trained with type 0 only)"})
    sd[ENC + "embed_positions.weight"] = table
    sd.update(map_layers(weights, shape))
    head, lm_head_how = _lm_head(weights, shape, seed)
    sd.update({LM + name: tensor for name, tensor in head.items()})
    sd = finish_state_dict(sd)

    dropped = [{"tensor": k, "reason": _drop_reason(k)} for k in weights.unused()] + dropped
    if lm_head_how == "converted" and _untied_decoder(weights, word):
        logger.warning("%s: the LM decoder is not tied to the word embeddings; fairseq ties "
                       "them, so the converted LM head uses the word embeddings", weights.source)
        dropped.append({"tensor": "lm_head.decoder.weight",
                        "reason": "LM decoder not tied to the word embeddings; fairseq's "
                                  "lm_head.weight is the (tied) token embedding"})
    record = {
        "key_prefix": weights.prefix,
        "vocab_size": v,
        "positions": f"fairseq row i = Hugging Face row i (both from padding_idx + 1 = "
                     f"{POSITION_OFFSET}); token type 0 "
                     f"{'folded in' if shape.type_vocab_size > 0 else 'absent'}",
        "lm_head": lm_head_how,
        "dtype": str(word.dtype).replace("torch.", ""),
        "dropped": dropped,
    }
    return sd, record


# --------------------------------------------------------------------------------------
# Plan and write
# --------------------------------------------------------------------------------------


@dataclass
class RobertaConversion:
    """A validated conversion, ready to write. Built by :func:`plan_roberta_conversion`."""

    hf_dir: Path
    weights_path: Path
    shape: EncoderShape
    vocab: RobertaVocab
    state_dict: Dict[str, torch.Tensor]
    record: Dict

    @property
    def model_cfg(self) -> Dict:
        return fairseq_model_cfg(self.shape, self.record, record_key="hf_conversion",
                                 max_positions=self.shape.max_positions - POSITION_OFFSET)

    def checkpoint(self, out_dir) -> Dict:
        data_dir = Path(out_dir).resolve()
        return build_checkpoint(self.state_dict, self.model_cfg, data_dir,
                                self.vocab.bpe_cfg(data_dir))


def plan_roberta_conversion(hf_dir, seed: int = 0) -> RobertaConversion:
    """Read and validate everything; map the tensors. Nothing is written."""
    hf_dir = Path(hf_dir)
    shape = read_roberta_config(hf_dir)
    vocab = read_roberta_vocab(hf_dir, shape)
    weights_path, weights = open_encoder_weights(hf_dir, "RoBERTa", "roberta.")
    state_dict, record = convert_state_dict(weights, shape, seed)
    raw = shape.raw
    record = {
        "source_dir": str(hf_dir.resolve()),
        "source_weights": weights_path.name,
        "source_config": raw,
        "layernorm_eps": shape.layernorm_eps,
        "hidden_act": raw.get("hidden_act", "gelu"),
        "tokenizer": vocab.kind,
        "ids": "fairseq index == Hugging Face id",
        "placeholders": vocab.placeholders,
        # CamemBERT's Hugging Face tokenizer starts with its <s> piece (id 5); fairseq's
        # layout uses <s> = 0, as fairseq's own CamemBERT was trained.
        "hf_bos_eos": [raw.get("bos_token_id", 0), raw.get("eos_token_id", 2)],
        **record,
    }
    return RobertaConversion(hf_dir, weights_path, shape, vocab, state_dict, record)


def convert_roberta(hf_dir, out_dir, overwrite: bool = False, seed: int = 0) -> RobertaConversion:
    """Convert a Hugging Face RoBERTa-family folder into ``out_dir``: ``model.pt``
    (fairseq's ``roberta``), ``dict.txt`` (index == Hugging Face id), the tokenizer the
    plugin reads (``encoder.json`` + ``vocab.bpe``, or ``sentencepiece.bpe.model``),
    copies of the Hugging Face tokenizer files and ``hf_config.json``. ``seed`` seeds a
    fresh LM head (when the checkpoint has none)."""
    out_dir = check_out_dir(out_dir, overwrite)
    plan = plan_roberta_conversion(hf_dir, seed=seed)
    copies = [*plan.vocab.copied, (plan.hf_dir / "config.json", "hf_config.json")]
    mine = {name for _, name in copies} | set(plan.vocab.written)
    copies += [(None, name) for name in TOKENIZER_FILES if name not in mine]
    write_model_folder(out_dir, plan.vocab.dict_tokens, copies, plan.vocab.written,
                       plan.checkpoint)
    return plan
