"""What ``span-export --force`` may replace: an earlier export of the same kind, and
nothing else.

``--force`` replaces ``--out`` whole. It is meant for the folder an earlier export
wrote; any other folder (the user's notes, a data folder, a run's ``checkpoints/``, a
tokenizer's files) would be lost with it. A folder is an earlier export when it holds
the record its kind writes and nothing that kind does not write:

- ``hf``: ``config.json``, a JSON object with the ``span_export`` key both kinds of
  ``span-export hf`` write. A fine-tuned model's folder lists every file in
  ``files.json`` (docs/EXPORT.md, format 1): it may hold those and ``files.json``; an
  encoder's folder (no ``files.json``): the weights, ``config.json``, ``README.md`` and
  the tokenizer files ``transformers`` saves (:data:`HF_ENCODER_FILES`);
- ``onnx``: ``onnx.json``, a JSON object with ``format`` and ``head_kind``, beside
  ``model.onnx`` (and ``model.onnx.data``, its weights past protobuf's 2 GB).

:func:`not_an_earlier_export` says what makes a folder not one, in words for the
message; the inputs of the command (the checkpoint, its data folder, ...) are refused
before, by :func:`span_plugin.files.outputs.writing`.
"""

import json
import os

MANIFEST = "files.json"  # span_plugin.formats.model_folder.MANIFEST
HF_RECORD, HF_KEY = "config.json", "span_export"
ONNX_RECORD, ONNX_KEYS = "onnx.json", ("format", "head_kind")
HF_ENCODER_FILES = frozenset({
    "config.json", "model.safetensors", "README.md", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "vocab.json", "merges.txt", "vocab.txt", "added_tokens.json",
    "sentencepiece.bpe.model"})
ONNX_FILES = frozenset({"model.onnx", "model.onnx.data", ONNX_RECORD})
RECORDS = {"hf": HF_RECORD, "onnx": ONNX_RECORD}
MAX_RECORD_BYTES = 64 << 20  # a files.json of a large folder; a config of many settings
MAX_ENTRIES = 10_000  # an export holds tens of files (a chunker's NLTK folder: hundreds)


def _json_object(path):
    """The JSON object in the regular file ``path``, or None (missing, a link, too large,
    not JSON, not an object)."""
    try:
        if os.path.islink(path) or not os.path.isfile(path) or \
                os.path.getsize(path) > MAX_RECORD_BYTES:
            return None
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _entries(folder):
    """Every path under ``folder``, relative with ``/``, folders with a trailing ``/``
    (links not followed); at most :data:`MAX_ENTRIES` (then None)."""
    out, stack = [], [""]
    while stack:
        rel = stack.pop()
        try:
            entries = sorted(os.scandir(os.path.join(folder, rel)), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            name = f"{rel}{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                out.append(name + "/")
                stack.append(name + "/")
            else:
                out.append(name)
            if len(out) > MAX_ENTRIES:
                return None
    return out


def _written(folder, kind):
    """``(what is missing for the folder to be an earlier export of ``kind``, or None;
    the names such an export writes there)``."""
    if kind == "onnx":
        record = _json_object(os.path.join(folder, ONNX_RECORD))
        if not record or not all(k in record for k in ONNX_KEYS):
            return "an onnx.json of one", ONNX_FILES
        return None, ONNX_FILES
    record = _json_object(os.path.join(folder, HF_RECORD))
    if not record or not isinstance(record.get(HF_KEY), dict):
        return "a config.json with span-export's record (its span_export key)", HF_ENCODER_FILES
    if not os.path.lexists(os.path.join(folder, MANIFEST)):
        return None, HF_ENCODER_FILES
    manifest = _json_object(os.path.join(folder, MANIFEST))
    listed = manifest.get("files") if manifest else None
    if not isinstance(listed, dict):
        return "a files.json that lists its files", frozenset()
    names = {MANIFEST}
    for name in listed:
        parts = str(name).split("/")
        names.update("/".join(parts[:k]) + "/" for k in range(1, len(parts)))
        names.add(str(name))
    return None, frozenset(names)


def not_an_earlier_export(folder, kind):
    """None when the folder ``folder`` is an earlier ``span-export kind`` (its record,
    nothing else); else why not, as a phrase (``it is not an earlier span-export onnx
    folder: it has no onnx.json of one (it holds notes.txt)``, ``it holds notes.txt,
    which span-export hf does not write``)."""
    entries = _entries(folder)
    if entries is None:
        return f"it holds more than {MAX_ENTRIES} files and folders, which no export writes"
    missing, written = _written(folder, kind)
    if missing:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        return (f"it is not an earlier span-export {kind} folder: it has no {missing} (it "
                f"holds {shown})")
    foreign = [e for e in entries if e not in written]
    if foreign:
        return (f"it holds {foreign[0]}{' and more' if len(foreign) > 1 else ''}, which "
                f"span-export {kind} does not write")
    return None
