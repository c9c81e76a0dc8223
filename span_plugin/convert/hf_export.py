"""fairseq RoBERTa encoder checkpoint -> a standard Hugging Face model folder
(:func:`export_hf`), the inverse of :mod:`.roberta` and :mod:`.bert` by the same tables
(:mod:`.encoder_map`, :func:`.bert.vocab_mapping`): ``config.json``,
``model.safetensors`` (the encoder, and its masked-LM head when trained:
:func:`lm_head_trained`) and the tokenizer files ``AutoTokenizer`` reads. The tensor map
and the tokenizer kinds: docs/EXPORT.md, section "Module notes"."""

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from span_plugin.convert.bert import EMBEDDINGS_FILE, POOLER, TOKEN_TYPES, UNFOLDED, vocab_mapping
from span_plugin.convert.encoder_map import ENC, FAIRSEQ_PAD, LM, POSITION_OFFSET, hf_layers
from span_plugin.convert.export_source import SBO_HEAD, EncoderCheckpoint, read_encoder_checkpoint
from span_plugin.convert.hf_source import ACTIVATIONS, ConversionError
from span_plugin.convert.spm_export import as_sentencepiece_family
from span_plugin.files.exports import not_an_earlier_export
from span_plugin.files.atomic import staged_folder
from span_plugin.tokenizers.wordpiece import BERT_MASK, BERT_SPECIALS, load_wordpiece

SUPPORTED_KINDS = ("gpt2", "wordpiece", "sentencepiece-line")
WEIGHTS = "model.safetensors"
# fairseq activation -> Hugging Face's name of the same formula: hf_source's map
# inverted, the first Hugging Face name of each kept (gelu_accurate -> gelu_new).
HF_ACTIVATIONS = {fs: hf for hf, fs in reversed(ACTIVATIONS.items())}


@dataclass
class HfExport:
    """A planned export: Hugging Face tensors (prefixed names), ``config.json``'s dict,
    the writer of the tokenizer files, and what was left out."""

    source: EncoderCheckpoint
    tensors: Dict[str, torch.Tensor]
    config: Dict
    write_tokenizer: Callable[[Path], None] = field(repr=False)
    dropped: List[str]
    lm_head: Optional[str] = "kept: trained"  # what became of the masked-LM head


# --------------------------------------------------------------------------------------
# Shared by both families
# --------------------------------------------------------------------------------------


def lm_head_trained(t: Dict[str, torch.Tensor]) -> bool:
    """Whether the checkpoint's masked-LM head was ever trained: ``span-convert`` of a
    model without one initialises it (fairseq's init: every bias zero, LayerNorm 1/0), and
    a single update of a masked-LM loss moves those biases. An untrained head predicts
    nonsense tokens, so it is not exported."""
    parts = [LM + k for k in ("dense.bias", "layer_norm.bias", "bias")]
    if not all(k in t for k in parts + [LM + "layer_norm.weight"]):
        return False
    return not (all(bool((t[k] == 0).all()) for k in parts)
                and bool((t[LM + "layer_norm.weight"] == 1).all()))


def _config(ckpt: EncoderCheckpoint, family: str, positions: int, extra: Dict) -> Dict:
    cfg, t = ckpt.model_cfg, ckpt.tensors
    if cfg.get("encoder_normalize_before"):
        raise ConversionError(f"{ckpt.path}: a pre-LN encoder (encoder_normalize_before); "
                              f"Hugging Face's {family} is post-LN")
    act = cfg.get("activation_fn", "gelu")
    if act not in HF_ACTIVATIONS:
        raise ConversionError(f"{ckpt.path}: activation_fn {act!r} has no Hugging Face name "
                              f"(supported: {', '.join(HF_ACTIVATIONS)})")
    vocab, hidden = t[ENC + "embed_tokens.weight"].shape
    return {
        "architectures": [f"{family}ForMaskedLM"],
        "model_type": family.lower(),
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": ckpt.layers,
        "num_attention_heads": int(cfg.get("encoder_attention_heads")),
        "intermediate_size": t[ENC + "layers.0.fc1.weight"].shape[0],
        "hidden_act": HF_ACTIVATIONS[act],
        "max_position_embeddings": positions,
        "layer_norm_eps": float(cfg.get("layernorm_eps") or 1e-5),
        "hidden_dropout_prob": float(cfg.get("dropout", 0.1)),
        "attention_probs_dropout_prob": float(cfg.get("attention_dropout", 0.1)),
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
        "torch_dtype": str(t[ENC + "embed_tokens.weight"].dtype).replace("torch.", ""),
        **extra,
    }


def _lm_head(t: Dict[str, torch.Tensor], names: Dict[str, str], rows=None) -> Dict:
    """The masked-LM head under Hugging Face's ``names`` (fairseq part -> name);
    ``rows``: the order of the bias (WordPiece's vocab.txt order)."""
    head = {hf: t[LM + fs] for fs, hf in names.items()}
    bias = names["bias"]
    if rows is not None:
        head[bias] = head[bias][rows]
    return head


def _dropped(t) -> List[str]:
    return sorted(k for k in t if k.startswith(f"classification_heads.{SBO_HEAD}."))


# --------------------------------------------------------------------------------------
# RoBERTa (GPT-2 BPE): ids as they are
# --------------------------------------------------------------------------------------


def _roberta(ckpt: EncoderCheckpoint) -> HfExport:
    t, p = ckpt.tensors, "roberta."
    hidden = t[ENC + "embed_tokens.weight"].shape[1]
    # A model fine-tuned with the plugin's BERT parts (--bert-token-types: segment rows
    # relative to type 0, row 0 zero; --bert-pooler) keeps them in RoBERTa's own places.
    types = t[TOKEN_TYPES] if TOKEN_TYPES in t else torch.zeros(
        1, hidden, dtype=t[ENC + "embed_tokens.weight"].dtype)
    tensors = {p + "embeddings.word_embeddings.weight": t[ENC + "embed_tokens.weight"],
               # Both tables start at padding_idx + 1 = 2; token type 0 is already in them.
               p + "embeddings.position_embeddings.weight": t[ENC + "embed_positions.weight"],
               p + "embeddings.token_type_embeddings.weight": types}
    tensors.update({p + k: v for k, v in hf_layers(t, ckpt.layers).items()})
    if POOLER + "weight" in t:
        tensors.update({f"{p}pooler.dense.{k}": t[POOLER + k] for k in ("weight", "bias")})
    tensors.update(_lm_head(t, {"dense.weight": "lm_head.dense.weight",
                                "dense.bias": "lm_head.dense.bias",
                                "layer_norm.weight": "lm_head.layer_norm.weight",
                                "layer_norm.bias": "lm_head.layer_norm.bias",
                                "bias": "lm_head.bias"}))
    positions = t[ENC + "embed_positions.weight"].shape[0]
    config = _config(ckpt, "Roberta", positions, {
        "type_vocab_size": types.shape[0], "pad_token_id": FAIRSEQ_PAD, "bos_token_id": 0,
        "eos_token_id": 2})
    plan = HfExport(ckpt, tensors, config, lambda out: _gpt2_tokenizer(ckpt, out), _dropped(t))
    if ckpt.kind == "sentencepiece-line":  # XLM-R, CamemBERT: RoBERTa's tensors
        return as_sentencepiece_family(plan, positions - POSITION_OFFSET)
    return plan


def _gpt2_tokenizer(ckpt: EncoderCheckpoint, out: Path) -> None:
    """vocab.json: each BPE token -> its fairseq index (dict.txt holds GPT-2's ids as
    numbers); a BPE token the dictionary lacks -> <unk>'s id, as fairseq maps it."""
    from transformers import RobertaTokenizerFast

    encoder = json.loads(ckpt.files["encoder_json"].read_text(encoding="utf-8"))
    by_gpt2_id = {str(i): token for token, i in encoder.items()}
    unk = ckpt.symbols.index("<unk>")
    vocab = {token: unk for token in encoder}
    vocab.update({by_gpt2_id.get(s, s): i for i, s in enumerate(ckpt.symbols)})
    merges = [tuple(m.split(" ")) for m in
              ckpt.files["vocab_bpe"].read_text(encoding="utf-8").splitlines()
              if m.strip() and not m.startswith("#version")]
    positions = ckpt.tensors[ENC + "embed_positions.weight"].shape[0] - POSITION_OFFSET
    RobertaTokenizerFast(vocab=vocab, merges=merges,
                         model_max_length=positions).save_pretrained(str(out))
    strip_like_the_hub(out)


# What Python's str.strip() removes: the hub strips each text so before its GPT-2 BPE
# (fairseq's multiprocessing_bpe_encoder.py does too). Unicode's White_Space, which
# tokenizers' own Strip uses, lacks U+001C..U+001F.
PY_WHITESPACE = "\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def strip_like_the_hub(out: Path) -> None:
    """Make ``AutoTokenizer`` of a GPT-2 folder strip the text as the hub does: a
    normalizer in tokenizer.json that removes leading and trailing white space (Python's
    ``str.strip`` set; offsets still index the text given), and ``tokenizer_class``
    ``PreTrainedTokenizerFast``, which runs tokenizer.json as written (transformers 5's
    ``RobertaTokenizer`` rebuilds the pipeline from the vocabulary and drops it). Without
    it a leading space became ``Ġ`` on the first word and a trailing one a token of its
    own, where the hub's ids have neither."""
    path = out / "tokenizer.json"
    layout = json.loads(path.read_text(encoding="utf-8"))
    cls = f"[{PY_WHITESPACE}]+"
    strip = {"type": "Replace", "pattern": {"Regex": f"\\A{cls}|{cls}\\z"}, "content": ""}
    if layout.get("normalizer"):
        strip = {"type": "Sequence", "normalizers": [strip, layout["normalizer"]]}
    layout["normalizer"] = strip
    path.write_text(json.dumps(layout, ensure_ascii=False), encoding="utf-8")
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                           encoding="utf-8")


# --------------------------------------------------------------------------------------
# BERT (WordPiece): rows back in vocab.txt order
# --------------------------------------------------------------------------------------


def _wordpiece_vocab(ckpt: EncoderCheckpoint):
    """(library tokenizer, its tokens in id order, the fairseq <-> BERT id mapping)."""
    path = ckpt.files["wordpiece"]
    try:
        library = load_wordpiece(str(path))
    except ValueError as err:
        raise ConversionError(str(err)) from err
    table = library.get_vocab(with_added_tokens=True)
    tokens = [None] * len(table)
    for token, i in table.items():
        tokens[i] = token
    mapping = vocab_mapping(tokens, path)
    if list(mapping.dict_tokens) != ckpt.symbols[4:-1]:
        raise ConversionError(
            f"{path}: the dictionary beside {ckpt.path} is not this WordPiece vocabulary in "
            f"span-convert's order (BERT's specials at 0-3, [MASK] last, the rest as in "
            f"{path.name}): its ids would mean other tokens")
    return library, tokens, mapping


def _unfolded(ckpt: EncoderCheckpoint):
    """BERT's position [P, H] and token-type [T, H] tables. span-convert folded type 0
    into the positions (which rounds) and kept the tables as they were beside model.pt:
    those are taken back while the checkpoint still holds exactly their fold (not
    trained since). Else type 0 stays in the positions and its row is zero. Without
    the plugin's segment-B row (``--roberta-only``), segment B is segment A, as in fairseq."""
    t = ckpt.tensors
    table = t[ENC + "embed_positions.weight"]
    segment_b = t[TOKEN_TYPES][1] if TOKEN_TYPES in t else None
    kept = ckpt.path.parent / EMBEDDINGS_FILE
    if kept.is_file():
        from safetensors.torch import load_file

        saved = load_file(str(kept))
        positions, types = (saved.get(name) for name in UNFOLDED)
        if positions is not None and types is not None and table.shape[0] == (
                positions.shape[0] + POSITION_OFFSET):
            folded = torch.zeros_like(table)
            folded[POSITION_OFFSET:] = positions
            folded[POSITION_OFFSET:] += types[0]
            same_b = segment_b is None or (types.shape[0] > 1 and torch.equal(
                types[1] - types[0], segment_b))
            if torch.equal(folded, table) and same_b:
                types = types.clone()
                if segment_b is None:
                    types[1:] = types[0]
                return positions, types
    types = torch.zeros(2, table.shape[1], dtype=table.dtype)
    if segment_b is not None:
        types[1] = segment_b
    return table[POSITION_OFFSET:], types


def _bert(ckpt: EncoderCheckpoint) -> HfExport:
    t, p = ckpt.tensors, "bert."
    library, tokens, mapping = _wordpiece_vocab(ckpt)
    rows = mapping.bert_to_fairseq  # BERT id -> fairseq row
    word = t[ENC + "embed_tokens.weight"]
    positions, types = _unfolded(ckpt)
    tensors = {p + "embeddings.word_embeddings.weight": word[rows],
               p + "embeddings.position_embeddings.weight": positions,
               p + "embeddings.token_type_embeddings.weight": types}
    tensors.update({p + k: v for k, v in hf_layers(t, ckpt.layers).items()})
    if POOLER + "weight" in t:
        tensors.update({f"{p}pooler.dense.{k}": t[POOLER + k] for k in ("weight", "bias")})
    tensors.update(_lm_head(t, {"dense.weight": "cls.predictions.transform.dense.weight",
                                "dense.bias": "cls.predictions.transform.dense.bias",
                                "layer_norm.weight": "cls.predictions.transform.LayerNorm.weight",
                                "layer_norm.bias": "cls.predictions.transform.LayerNorm.bias",
                                "bias": "cls.predictions.bias"}, rows))
    pad = next(bert for bert, fs in BERT_SPECIALS if fs == "<pad>")
    config = _config(ckpt, "Bert", positions.shape[0], {
        "type_vocab_size": types.shape[0], "pad_token_id": tokens.index(pad)})
    return HfExport(ckpt, tensors, config,
                    lambda out: _bert_tokenizer(library, out, positions.shape[0]),
                    _dropped(t))


def _bert_tokenizer(library, out: Path, max_length: int) -> None:
    """The library tokenizer itself (normalizer and all) as tokenizer.json, and the
    config AutoTokenizer reads."""
    from transformers import BertTokenizerFast

    normalizer = json.loads(library.to_str()).get("normalizer") or {}
    tok = BertTokenizerFast(tokenizer_object=library,
                            do_lower_case=bool(normalizer.get("lowercase", True)),
                            unk_token=BERT_SPECIALS[3][0], pad_token=BERT_SPECIALS[1][0],
                            cls_token=BERT_SPECIALS[0][0], sep_token=BERT_SPECIALS[2][0],
                            mask_token=BERT_MASK, model_max_length=max_length)
    tok.save_pretrained(str(out))


# --------------------------------------------------------------------------------------
# Plan and write
# --------------------------------------------------------------------------------------


def plan_hf_export(checkpoint, files=None, heads_allowed=False, data=None) -> HfExport:
    """Read and check everything; map the tensors. Nothing is written. ``files``: the
    tokenizer's files by field, for a checkpoint whose own are elsewhere;
    ``heads_allowed``: plan the encoder of a fine-tuned checkpoint (its heads are the
    caller's: :mod:`span_plugin.export.model_export`); ``data``: the task folder it
    was trained on (``--data``), where its dictionary is looked for first."""
    ckpt = read_encoder_checkpoint(checkpoint, SUPPORTED_KINDS, files, heads_allowed, data)
    plan = (_bert if ckpt.kind == "wordpiece" else _roberta)(ckpt)
    if heads_allowed:
        without_lm_head(plan, "left out: a fine-tuned model's, not trained with its encoder")
    elif not lm_head_trained(ckpt.tensors):
        without_lm_head(plan, "left out: initialised by span-convert, never trained")
    return plan


# Hugging Face's masked-LM head tensors: RoBERTa's and XLM-R's, BERT's.
LM_HEAD_PREFIXES = ("lm_head.", "cls.")


def without_lm_head(plan: HfExport, why: str) -> None:
    """Leave the masked-LM head out of ``plan``: one ``span-convert`` initialised and
    nothing trained, or a fine-tuned model's (fine-tuning does not train it, so it no
    longer matches the encoder). ``architectures`` then names the encoder class
    (``RobertaModel``), not ``*ForMaskedLM``, and ``why`` goes to ``span_export.lm_head``."""
    removed = sorted(k for k in plan.tensors if k.startswith(LM_HEAD_PREFIXES))
    for key in removed:
        del plan.tensors[key]
    plan.config["architectures"] = [a.replace("ForMaskedLM", "Model")
                                    for a in plan.config["architectures"]]
    plan.lm_head = why if removed else None


def check_export_dir(out_dir, force: bool, kind: str = "hf") -> Path:
    """``out_dir``: refused when it is a file, or a folder with files unless ``force``;
    with ``force`` too, unless it is an earlier ``span-export kind`` folder and nothing
    else (:func:`span_plugin.files.exports.not_an_earlier_export`): ``--force``
    replaces what an export wrote, never a folder of the user's. Links are followed: the
    folder checked is the one written."""
    out_dir = Path(out_dir)
    real = Path(os.path.realpath(out_dir))
    if real.exists() and not real.is_dir():
        raise ConversionError(f"{out_dir}: exists and is not a folder; give another --out")
    if real.is_dir() and any(real.iterdir()):
        if not force:
            raise ConversionError(f"{out_dir}: not empty; pass --force to replace an earlier "
                                  f"span-export {kind} there whole, or give another --out")
        why = not_an_earlier_export(real, kind)
        if why:
            raise ConversionError(
                f"--out {out_dir}: {why}; --force replaces only an earlier span-export "
                f"{kind} folder, nothing of yours: remove it yourself or give another --out")
    return out_dir


def save_weights(tensors: Dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' ``save_file``, its failure to write (a full disk: a
    ``SafetensorError`` holding "os error 28") raised as the OSError it is, naming no
    file: the folder being written names it (:func:`span_plugin.files.atomic.staged_folder`)."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file(tensors, str(path), metadata={"format": "pt"})
    except SafetensorError as err:
        found = re.search(r"os error (\d+)|code: (\d+)", str(err))
        if found:
            code = int(found.group(1) or found.group(2))
            raise OSError(code, os.strerror(code)) from None
        raise ConversionError(f"{path.name}: safetensors could not write it ({err})") from None


def check_finite_tensors(tensors: Dict[str, torch.Tensor], source) -> None:
    """Refuse, naming it, a tensor holding NaN or an infinity: a checkpoint of a run
    that diverged exports weights that predict nothing (every probability NaN)."""
    for name, value in tensors.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = ~torch.isfinite(value)
            kinds = [k for k, test in (("NaN", torch.isnan), ("inf", torch.isinf))
                     if bool(test(value).any())]
            raise ConversionError(f"{source}: tensor {name} holds {' and '.join(kinds)} "
                                  f"({int(bad.sum())} of {value.numel()} values): the "
                                  f"checkpoint's weights are not finite numbers (a diverged "
                                  f"run?); nothing is exported")


def write_hf_folder(plan: HfExport, out_dir, finish: Optional[Callable[[Path], None]] = None
                    ) -> None:
    """Write the folder into a sibling ``OUT.partial-PID`` and rename it into place
    (an existing folder is replaced whole): ``out_dir`` is the old folder or the new
    one, never part of either. ``finish(folder)`` adds the caller's files last (a
    fine-tuned model's); the partial folders of killed exports are removed first."""
    check_finite_tensors(plan.tensors, plan.source.path)
    with staged_folder(out_dir) as tmp:
        # Own storage per tensor: safetensors refuses shared or strided ones.
        save_weights({k: v.contiguous().clone() for k, v in plan.tensors.items()},
                     tmp / WEIGHTS)
        (tmp / "config.json").write_text(json.dumps(plan.config, indent=2) + "\n",
                                         encoding="utf-8")
        plan.write_tokenizer(tmp)
        if finish is not None:
            finish(tmp)


def export_hf(checkpoint, out_dir, force: bool = False, files=None) -> HfExport:
    """Export the encoder ``checkpoint`` (a fairseq model.pt or a folder holding one) to
    ``out_dir`` as a Hugging Face folder. Every check runs before anything is written."""
    out_dir = check_export_dir(out_dir, force)
    plan = plan_hf_export(checkpoint, files)
    plan.config["span_export"] = {"source": str(plan.source.path.resolve()),
                                  "tokenizer": plan.source.kind, "dropped": plan.dropped,
                                  "lm_head": plan.lm_head}
    write_hf_folder(plan, out_dir)
    return plan
