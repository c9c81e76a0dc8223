"""Reading a fairseq encoder checkpoint for export: the tensors, the sizes, the
dictionary and the tokenizer it was trained with.

A checkpoint is a ``span-convert`` folder (``model.pt`` beside ``dict.txt`` and the
tokenizer files), a span pre-training run's checkpoint, or any fairseq RoBERTa
``model.pt``. It is loaded only through the safe loader (:mod:`.safe_load`). The
dictionary is ``dict.txt`` beside the checkpoint, else in the task's data folder; the
tokenizer kind and files come from the data record the plugin's tasks store, else the
conversion record, else ``cfg.bpe``, each file looked for beside the checkpoint first
(a moved folder), then at the path recorded.
"""

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional

import torch

from span_plugin.convert.encoder_map import ENC, FAIRSEQ_SYMBOLS
from span_plugin.convert.hf_source import ConversionError
from span_plugin.convert.safe_load import check_structure, load_checkpoint
from span_plugin.preprocess.binary.vocab import Vocab
from span_plugin.tokenizers import file_options

# The plugin's data record in a checkpoint's task state (runtime/data_record.py, a layer
# above: the key is read here, not imported).
DATA_RECORD = "span_plugin_data_record"
# The span pre-training head: a training objective, not part of the encoder.
SBO_HEAD = "span_boundary"
# fairseq's cfg.bpe names -> the plugin's tokenizer kinds (fairseq's sentencepiece BPE
# encodes the whole line, as the plugin's sentencepiece-line kind does).
FAIRSEQ_BPE_KINDS = {"gpt2": "gpt2", "bert": "wordpiece", "sentencepiece": "sentencepiece-line",
                     "fastbpe": "fastbpe", "subword_nmt": "subword_nmt"}
# The files each exportable kind needs: record key -> (cfg.bpe key, file name beside it).
KIND_FILES = {
    "gpt2": {"encoder_json": ("gpt2_encoder_json", "encoder.json"),
             "vocab_bpe": ("gpt2_vocab_bpe", "vocab.bpe")},
    "wordpiece": {"wordpiece": ("bpe_vocab_file", "vocab.txt")},
    "sentencepiece-line": {"sentencepiece_model": ("sentencepiece_model",
                                                   "sentencepiece.bpe.model")},
}


@dataclass
class EncoderCheckpoint:
    """What an export reads from a fairseq encoder checkpoint. ``symbols``: the
    dictionary, fairseq id -> symbol (``<mask>`` last); ``files``: the tokenizer's files
    by record key."""

    path: Path
    tensors: Dict[str, torch.Tensor]
    model_cfg: Dict
    symbols: List[str]
    kind: str
    files: Dict[str, Path]

    @property
    def layers(self) -> int:
        return 1 + max(int(k[len(ENC + "layers."):].split(".")[0])
                       for k in self.tensors if k.startswith(ENC + "layers."))


def _plain(value) -> Dict:
    """A cfg section as a dict (``args`` of old checkpoints is a Namespace)."""
    if isinstance(value, argparse.Namespace):
        return vars(value)
    return dict(value) if isinstance(value, Mapping) else {}


def checkpoint_file(path) -> Path:
    """The checkpoint file ``path`` names: itself, or a folder's ``model.pt``."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.pt"
    if not path.is_file():
        raise ConversionError(f"{path}: no such checkpoint (expected a fairseq model.pt or a "
                              f"folder holding one)")
    return path


def fine_tuned_heads(tensors) -> List[str]:
    """The names of a checkpoint's task heads (``classification_heads.<name>.*``), the
    span pre-training objective's head left out: none for an encoder checkpoint."""
    return sorted({k.split(".")[1] for k in tensors if k.startswith("classification_heads.")}
                  - {SBO_HEAD})


def _refuse_fine_tuned(path: Path, tensors, cfg: Dict, heads_allowed: bool) -> None:
    heads = fine_tuned_heads(tensors)
    if heads and not heads_allowed:
        task = _plain(cfg.get("task")).get("_name") or _plain(cfg.get("args")).get("task")
        raise ConversionError(
            f"{path}: a fine-tuned model (task {task}, head {', '.join(heads)}); this reads "
            f"encoders only: export it with span-export hf (span_plugin.export.model_export)")
    if ENC + "embed_tokens.weight" not in tensors:
        raise ConversionError(f"{path}: no {ENC}embed_tokens.weight: not a fairseq RoBERTa "
                              f"encoder checkpoint")


def _data_record(state) -> Dict:
    return _plain(state.get("task_state")).get(DATA_RECORD) or {}


def _bases(path: Path, state) -> List[Path]:
    """Where a relative path of the run's cfg may start: the folder fairseq-train ran
    in (the checkpoint's folder less a relative --save-dir), then the current one."""
    save_dir = _plain(_plain(state.get("cfg")).get("checkpoint")).get("save_dir") or ""
    folder, parts = path.resolve().parent, Path(save_dir).parts
    bases = [Path.cwd()]
    if save_dir and not Path(save_dir).is_absolute() and folder.parts[-len(parts):] == parts:
        bases.insert(0, folder.parents[len(parts) - 1])
    return bases


def _dictionary(path: Path, state, task_cfg: Dict, rows: int, data=None) -> List[str]:
    """dict.txt in the task folder given (``--data``), else beside the checkpoint, else in
    the data folder its record names (an absolute path) or in cfg.task.data (as
    fairseq-train was given it); a sentence or pair task's folder holds it in input0/."""
    candidates = [Path(data) / sub / "dict.txt" for sub in ("", "input0")] if data else []
    candidates += [path.parent / "dict.txt"]
    for recorded in (_data_record(state).get("data_dir"), str(task_cfg.get("data") or "")):
        if recorded:
            candidates += [base / recorded.split(":")[0] / sub / "dict.txt"
                           for base in _bases(path, state) for sub in ("", "input0")]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        hint = "" if data else "; give the task folder it was trained on with --data"
        raise ConversionError(f"{path}: no dictionary; expected dict.txt at "
                              f"{' or '.join(map(str, candidates))}{hint}")
    try:
        symbols = Vocab(found).symbols
    except ValueError as err:
        raise ConversionError(str(err)) from err
    mask = FAIRSEQ_SYMBOLS[4]
    if mask not in symbols:
        symbols = symbols + [mask]  # appended by the masked-LM and GLUE tasks at load
    if len(symbols) != rows:
        raise ConversionError(
            f"{found}: {len(symbols)} symbols with {mask} but {path} has {rows} embedding "
            f"rows ({ENC}embed_tokens.weight); the dictionary is not this model's")
    return symbols


def _kind_and_files(path: Path, state, cfg: Dict):
    """(kind, {record key: recorded path or None}) from the data record, the conversion
    record or cfg.bpe."""
    record = _data_record(state).get("encoder")
    if record:
        return record["bpe"], {k: (e or {}).get("path") for k, e in record["files"].items()}
    bpe = _plain(cfg.get("bpe"))
    conversion = _plain(cfg.get("model"))
    conversion = conversion.get("hf_conversion") or conversion.get("bert_conversion") or {}
    kind = conversion.get("tokenizer") or FAIRSEQ_BPE_KINDS.get(bpe.get("_name"))
    if kind is None and not bpe and not conversion:
        # fairseq RoBERTa without a record (roberta.base's own model.pt): GPT-2 BPE.
        kind = "gpt2"
    if kind is None:
        raise ConversionError(f"{path}: no tokenizer recorded (no data record, cfg.bpe "
                              f"{bpe.get('_name')!r}): cannot tell which tokenizer to export")
    keys = KIND_FILES.get(kind, {})
    return kind, {key: bpe.get(cfg_key) for key, (cfg_key, _) in keys.items()}


def _locate(path: Path, kind: str, recorded: Dict[str, Optional[str]],
            given: Dict[str, str]) -> Dict[str, Path]:
    """Each file as given (``--gpt2-encoder-json``, ...), else beside the checkpoint (by
    its usual name), else at its recorded path."""
    files = {}
    for key, (_, name) in KIND_FILES[kind].items():
        places = [Path(p) for p in (given.get(key), path.parent / name, recorded.get(key)) if p]
        places = [p / name if p.is_dir() else p for p in places]
        found = next((p for p in places if p.is_file()), None)
        if found is None:
            flag = file_options()[key].flags[0]
            raise ConversionError(
                f"{path}: the {kind} tokenizer's {name} is not at {' nor '.join(map(str, places))}; "
                f"give it with {flag} or put it beside the checkpoint")
        files[key] = found
    return files


def read_encoder_checkpoint(path, supported, given=None, heads_allowed=False,
                            data=None) -> EncoderCheckpoint:
    """Load and check an encoder checkpoint for export; ``supported``: the tokenizer
    kinds the export has a counterpart for (another kind is refused naming them);
    ``given``: tokenizer files by field (``encoder_json``, ``vocab_bpe``, ``wordpiece``);
    ``heads_allowed``: a fine-tuned checkpoint is read (its encoder), not refused;
    ``data``: the task folder given, where dict.txt is looked for first."""
    path = checkpoint_file(path)
    state = load_checkpoint(path, mmap=True)
    check_structure(path, state)
    cfg = _plain(state.get("cfg")) or {"model": _plain(state.get("args")),
                                       "task": _plain(state.get("args"))}
    tensors = state["model"]
    _refuse_fine_tuned(path, tensors, cfg, heads_allowed)
    kind, recorded = _kind_and_files(path, state, cfg)
    if kind not in supported:
        raise ConversionError(
            f"{path}: its tokenizer kind {kind!r} has no Hugging Face counterpart that gives "
            f"the same ids; supported: {', '.join(supported)}")
    rows = tensors[ENC + "embed_tokens.weight"].shape[0]
    symbols = _dictionary(path, state, _plain(cfg.get("task")), rows, data)
    return EncoderCheckpoint(path, dict(tensors), _plain(cfg.get("model")), symbols, kind,
                             _locate(path, kind, recorded, given or {}))


def _paths(*values) -> List[str]:
    """The non-empty strings among ``values`` (a record's paths; anything else left out)."""
    return [v for v in values if isinstance(v, str) and v]


def recorded_inputs(checkpoint) -> Dict[str, List[str]]:
    """What a checkpoint's records name as the inputs it was made from, and that an
    export reads: ``{description: [paths]}`` for :func:`span_plugin.files.outputs.writing`,
    so that no output replaces them:

    - the files beside it that an export reads (``dict.txt``, the tokenizer files, BERT's
      embedding tables);
    - the data folder (the data record's ``data_dir``; ``cfg.task.data`` where the export
      looks for it, relative ones included);
    - the tokenizer files and dictionary (the data record's, else ``cfg.bpe``'s);
    - the n-gram dictionary (the packaged one when the record says so) and the chunker's
      NLTK folder and files;
    - the source tables the data folder was built from.

    Best-effort: a checkpoint that cannot be read names none (the export itself then
    says why it cannot be read)."""
    try:
        path = checkpoint_file(checkpoint)
        state = load_checkpoint(path, mmap=True)
    except Exception:  # noqa: BLE001 - the export reports it, in one line
        return {}
    cfg = _plain(state.get("cfg")) or {"task": _plain(state.get("args")),
                                       "bpe": _plain(state.get("args"))}
    record = _data_record(state)
    record = record if isinstance(record, Mapping) else {}
    encoder = _plain(record.get("encoder"))
    inputs = {"the files beside CHECKPOINT": [
        str(path.parent / name) for name in ("dict.txt", "encoder.json", "vocab.bpe", "vocab.txt",
                                             "sentencepiece.bpe.model",
                                             "bert_embeddings.safetensors")]}
    data = _paths(record.get("data_dir"))
    for given in _paths(_plain(cfg.get("task")).get("data")):
        for part in given.split(":"):
            # where the export looks for it; only those there (no other is read)
            data += [str(base / part) for base in _bases(path, state)
                     if part and (base / part).is_dir()]
    inputs["CHECKPOINT's recorded data folder"] = data
    files = [_plain(e).get("path") for e in _plain(encoder.get("files")).values()]
    files += [_plain(encoder.get("srcdict")).get("path")]
    bpe = _plain(cfg.get("bpe"))
    files += [bpe.get(cfg_key) for keys in KIND_FILES.values() for cfg_key, _ in keys.values()]
    inputs["CHECKPOINT's recorded tokenizer file"] = _paths(*files)
    ngrams = _plain(encoder.get("ngrams"))
    found = _paths(ngrams.get("path"))
    if ngrams.get("packaged") and isinstance(ngrams.get("words"), str):
        from span_plugin.preprocess.segmentation.ngrams import default_ngrams_path

        try:
            found.append(str(default_ngrams_path(ngrams["words"])))
        except (ValueError, KeyError, OSError):
            pass
    inputs["CHECKPOINT's recorded n-gram dictionary"] = found
    chunker = _plain(encoder.get("chunker"))
    parts = [_plain(chunker.get("tagger")).get(k) for k in _plain(chunker.get("tagger"))]
    parts += [chunker.get("train"), chunker.get("test")]
    inputs["CHECKPOINT's recorded chunker files"] = _paths(
        chunker.get("nltk_data"), *(_plain(p).get("path") for p in parts))
    inputs["CHECKPOINT's recorded source"] = _paths(
        *(_plain(e).get("path") for e in _plain(record.get("source")).values()))
    return {k: v for k, v in inputs.items() if v}
