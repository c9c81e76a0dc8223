"""The tokenizer of a ``sentencepiece-line`` checkpoint (XLM-R, CamemBERT) as Hugging
Face's own ``XLMRobertaTokenizer`` / ``CamembertTokenizer`` folder files
(:func:`write_spm_tokenizer`): ``tokenizer.json``'s vocabulary written in the
checkpoint's dictionary order, so Hugging Face id == fairseq index, each piece with its
sentencepiece score. The row map and how the family is chosen: docs/EXPORT.md, section
"Module notes"."""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

from span_plugin.convert.encoder_map import FAIRSEQ_SYMBOLS
from span_plugin.convert.export_source import EncoderCheckpoint
from span_plugin.convert.hf_source import ConversionError
from span_plugin.convert.roberta import SPM_FILE
from span_plugin.tokenizers.sentencepiece import load_model

# model_type -> the transformers class prefix (XLMRobertaForMaskedLM, CamembertModel, ...)
FAMILIES = {"xlm-roberta": "XLMRoberta", "camembert": "Camembert"}
CAMEMBERT_OFFSET = 4  # CamemBERT's Hugging Face id of sentencepiece id s: s + 4
BOS, PAD, EOS, UNK, MASK = FAIRSEQ_SYMBOLS


# --------------------------------------------------------------------------------------
# The sentencepiece model's settings (protobuf wire format, read without protobuf)
# --------------------------------------------------------------------------------------

def _varint(data: bytes, i: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise ValueError("a number runs past the end")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not byte & 0x80:
            return value, i


def _fields(data: bytes) -> Dict[int, list]:
    """``{field number: [values]}`` of one protobuf message: ints for varints, bytes for
    length-delimited fields (fixed-width ones skipped)."""
    out, i = {}, 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
            if i > len(data):
                raise ValueError(f"field {number} runs past the end")
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
            continue
        else:
            raise ValueError(f"field {number}: unknown wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


@dataclass(frozen=True)
class SpmSettings:
    """What of a sentencepiece model decides whether Hugging Face's Unigram tokenizer
    (whitespace split, ``▁`` prefixed to every word) cuts text as it does."""

    charsmap: bytes          # NormalizerSpec.precompiled_charsmap (empty: identity)
    unigram: bool            # TrainerSpec.model_type == UNIGRAM
    dummy_prefix: bool       # NormalizerSpec.add_dummy_prefix
    squeeze_spaces: bool     # NormalizerSpec.remove_extra_whitespaces
    escape_spaces: bool      # NormalizerSpec.escape_whitespaces
    split_by_space: bool     # TrainerSpec.split_by_whitespace
    byte_fallback: bool      # TrainerSpec.byte_fallback
    user_defined: tuple      # pieces of type USER_DEFINED (sentencepiece never cuts them)


def spm_settings(path) -> SpmSettings:
    """Read ``path``'s trainer and normalizer settings (protobuf defaults where unset)."""
    try:
        model = _fields(Path(path).read_bytes())
        trainer = _fields((model.get(2) or [b""])[-1])
        normalizer = _fields((model.get(3) or [b""])[-1])
    except ValueError as err:
        raise ConversionError(f"{path}: not a sentencepiece model ({err})") from None

    def flag(fields, number, default):
        return bool(fields[number][-1]) if number in fields else default

    user_defined = []
    for entry in model.get(1, []):  # SentencePiece: piece (1), score (2), type (3)
        piece = _fields(entry)
        if (piece.get(3) or [1])[-1] == 4:
            user_defined.append((piece.get(1) or [b""])[-1].decode("utf-8", "replace"))

    return SpmSettings(
        charsmap=(normalizer.get(2) or [b""])[-1],
        unigram=(trainer.get(3) or [1])[-1] == 1,
        dummy_prefix=flag(normalizer, 3, True), squeeze_spaces=flag(normalizer, 4, True),
        escape_spaces=flag(normalizer, 5, True), split_by_space=flag(trainer, 22, True),
        byte_fallback=flag(trainer, 35, False), user_defined=tuple(user_defined))


def _check_settings(path, s: SpmSettings) -> None:
    why = [what for what, bad in (
        ("not a Unigram model", not s.unigram),
        ("add_dummy_prefix is off", not s.dummy_prefix),
        ("remove_extra_whitespaces is off", not s.squeeze_spaces),
        ("escape_whitespaces is off", not s.escape_spaces),
        ("trained with split_by_whitespace off", not s.split_by_space),
        ("byte_fallback is on", s.byte_fallback),
        (f"{len(s.user_defined)} user-defined pieces (first: {list(s.user_defined[:3])}), "
         f"which sentencepiece never cuts", s.user_defined)) if bad]
    if why:
        raise ConversionError(
            f"{path}: {'; '.join(why)}: Hugging Face's XLMRobertaTokenizer and "
            f"CamembertTokenizer cut text otherwise (a Unigram model over whitespace-split "
            f"words, each prefixed with ▁), so no exported tokenizer would give its ids")


# --------------------------------------------------------------------------------------
# The vocabulary in fairseq's order
# --------------------------------------------------------------------------------------


@dataclass
class SpmVocab:
    """``entries``: ``(token, score)`` per id, the checkpoint's dictionary order;
    ``family``: a key of :data:`FAMILIES`; ``bos``/``eos``: the rows the tokenizer opens
    and closes a sequence with; ``settings``: the model's."""

    entries: List[Tuple[str, float]]
    family: str
    bos: int
    eos: int
    settings: SpmSettings


def unused_name(symbol: str) -> str:
    """The token of a row the tokenizer never writes: a space inside, so that no word of
    the pre-tokenized text matches it."""
    return f"<unused {symbol}>"


def _source_family(ckpt: EncoderCheckpoint):
    """``(model_type, (bos, eos))`` of a span-convert checkpoint's source, or Nones."""
    record = ckpt.model_cfg.get("hf_conversion")
    if not isinstance(record, dict):
        return None, None
    family = (record.get("source_config") or {}).get("model_type")
    ends = record.get("hf_bos_eos")
    ok = isinstance(ends, (list, tuple)) and len(ends) == 2 and all(
        isinstance(i, int) and 0 <= i < len(ckpt.symbols) - 1 for i in ends)
    return (family if family in FAMILIES else None), (tuple(ends) if ok else None)


def spm_vocab(ckpt: EncoderCheckpoint) -> SpmVocab:
    """The checkpoint's dictionary as a Unigram vocabulary over its sentencepiece model;
    refused when a piece has no row."""
    path = ckpt.files["sentencepiece_model"]
    settings = spm_settings(path)
    _check_settings(path, settings)
    try:
        sp = load_model(str(path))
    except ValueError as err:
        raise ConversionError(str(err)) from None
    normal = {sp.id_to_piece(i): (i, sp.get_score(i)) for i in range(sp.get_piece_size())
              if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))}
    symbols = ckpt.symbols
    row = {s: i for i, s in enumerate(symbols)}
    missing = [p for p in normal if p not in row]
    if missing:
        raise ConversionError(
            f"{ckpt.path}: {len(missing)} pieces of {path} have no row in the dictionary "
            f"(first: {missing[:5]}); fairseq maps them to <unk>, which a Hugging Face "
            f"Unigram tokenizer cannot: export a model whose dict.txt holds every piece")
    family, ends = _source_family(ckpt)
    if ends and any(symbols[i] in normal for i in ends):
        ends = None  # a piece's row: the source's <s>/</s> ids are not rows of their own here
    if family is None:
        camembert = all(row[p] == i + CAMEMBERT_OFFSET for p, (i, _) in normal.items())
        family = "camembert" if camembert else "xlm-roberta"
    bos, eos = ends or (0, 2)
    entries = []
    for i, symbol in enumerate(symbols):
        if i == bos or i == eos:
            token, score = (BOS if i == bos else EOS), 0.0
        elif i in (1, 3, len(symbols) - 1):
            token, score = symbol, 0.0  # <pad> <unk> <mask>
        elif symbol in normal:
            token, score = symbol, normal[symbol][1]
        else:
            token, score = unused_name(symbol), 0.0
        entries.append((token, score))
    if [entries[i][0] for i in (1, 3)] != [PAD, UNK] or entries[-1][0] != MASK:
        raise ConversionError(f"{ckpt.path}: the dictionary does not hold {PAD} and {UNK} at "
                              f"rows 1 and 3 and {MASK} last, as fairseq's does")
    return SpmVocab(entries, family, bos, eos, settings)


def write_spm_tokenizer(ckpt: EncoderCheckpoint, vocab: SpmVocab, out: Path,
                        max_length: int) -> None:
    """``tokenizer.json``, ``tokenizer_config.json`` (the family's class) and the
    sentencepiece model itself (``sentencepiece.bpe.model``, the class's vocab file)."""
    import transformers

    cls = getattr(transformers, FAMILIES[vocab.family] + "Tokenizer")
    options = {"additional_special_tokens": []} if vocab.family == "camembert" else {}
    tok = cls(vocab=list(vocab.entries), bos_token=BOS, eos_token=EOS, cls_token=BOS,
              sep_token=EOS, unk_token=UNK, pad_token=PAD, mask_token=MASK,
              _spm_precompiled_charsmap=vocab.settings.charsmap or None,
              model_max_length=max_length, **options)
    got = [tok.convert_tokens_to_ids(t) for t in (BOS, EOS, UNK, PAD, MASK)]
    want = [vocab.bos, vocab.eos, 3, 1, len(vocab.entries) - 1]
    if got != want or len(tok) != len(vocab.entries):
        raise ConversionError(f"{ckpt.path}: transformers' {cls.__name__} gives "
                              f"<s> </s> <unk> <pad> <mask> ids {got} and {len(tok)} ids, "
                              f"not {want} and {len(vocab.entries)}")
    tok.save_pretrained(str(out))
    shutil.copyfile(ckpt.files["sentencepiece_model"], out / SPM_FILE)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    for key in ("is_local", "local_files_only", "name_or_path"):  # this machine's, not the model's
        config.pop(key, None)
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                           encoding="utf-8")


def as_sentencepiece_family(plan, max_length: int):
    """A RoBERTa export plan (:class:`span_plugin.convert.hf_export.HfExport`) of a
    ``sentencepiece-line`` checkpoint made into its family's: config ``model_type``,
    ``architectures``, ``bos``/``eos`` ids, and the tokenizer writer. The tensors are
    RoBERTa's, under the same ``roberta.`` names in both families."""
    vocab = spm_vocab(plan.source)
    config = plan.config
    prefix = FAMILIES[vocab.family]
    config["architectures"] = [a.replace("Roberta", prefix, 1) if a.startswith("Roberta") else a
                               for a in config.get("architectures", [])]
    config.update(model_type=vocab.family, bos_token_id=vocab.bos, eos_token_id=vocab.eos)
    plan.write_tokenizer = lambda out: write_spm_tokenizer(plan.source, vocab, out, max_length)
    return plan
