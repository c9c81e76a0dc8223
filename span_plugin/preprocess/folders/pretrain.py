"""A pre-training folder (task ``spanbert_masked_lm``, :func:`prepare_pretrain`): one text
file's tokens and n-gram spans, optionally a validation text's, with ``dict.txt`` and the
data record, built whole or not at all; one folder per text file is a shard of a corpus.
The folder's files, ``.gz`` input and ``keep=True``: docs/PRETRAIN.md, section
"Module notes"."""

import gzip
import os
import shutil

from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import regular_file
from span_plugin.preprocess.binary.binarize import binarize_file, write_dict
from span_plugin.preprocess.file_records import file_entry, short
from span_plugin.preprocess.folders.folder import whole_folder
from span_plugin.preprocess.records import provenance

TASK = "pretrain"


def _plain_text(path, tmp_dir, name):
    """``path``, or for a ``.gz`` file its decompressed copy in ``tmp_dir``."""
    if not str(path).endswith(".gz"):
        return str(path)
    out = os.path.join(tmp_dir, name)
    try:
        with gzip.open(path, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
    except (OSError, EOFError) as err:
        raise BadInputError(f"{path}: not a readable gzip file ({err})") from None
    return out


def _differences(a, b, key=""):
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _differences(a.get(k), b.get(k), f"{key}.{k}" if key else k)
        return out
    return [] if a == b else [(key, a, b)]


def _shown(value):
    if isinstance(value, str) and len(value) == 64:
        return f"sha256 {short(value)}"
    return repr(value)


def kept(out_dir, sources, spec, dict_path):
    """True when ``out_dir`` holds a finished folder made from ``sources`` ({split:
    path}) with these encoder settings; False when there is none; raises
    :class:`BadInputError` naming the first difference when it was made otherwise."""
    record = provenance.read_record(out_dir) if os.path.isdir(out_dir) else None
    if record is None:
        return False
    want = {"task": TASK,
            "source": provenance.comparable({s: file_entry(p) for s, p in sources.items()}),
            "encoder": provenance.comparable(provenance.encoder_record(spec, dict_path))}
    have = {"task": record.get("task"), "source": provenance.comparable(record.get("source")),
            "encoder": provenance.comparable(record.get("encoder"))}
    diff = _differences(have, want)
    if diff:
        key, was, now = diff[0]
        raise BadInputError(
            f"{out_dir}: made from other text or settings: its record's {key} is "
            f"{_shown(was)}, this build's {_shown(now)}. Delete the folder to build it "
            f"again, or give another --out (a recipe: DATA_DIR)")
    provenance.verify_folder(out_dir)  # a finished folder whose files changed since: say so
    return True


def prepare_pretrain(out_dir, train, options, *, valid=None, keep=False):
    """Build the folder (module docstring) with ``options``
    (:class:`~span_plugin.preprocess.folders.options.FolderOptions`; its name and
    unknown_labels are not read, and its command is recorded as given). Returns
    ``{split: lines}``, or None when ``keep`` found it finished."""
    spec, dict_path = options.spec, options.dict_path
    sources = {"train": train, **({"valid": valid} if valid else {})}
    for split, path in sources.items():
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file (--{split})")
        regular_file(path, f"--{split}")  # a device or FIFO is named, never read
    if keep and kept(out_dir, sources, spec, dict_path):
        return None
    with whole_folder(out_dir) as tmp:
        rows = {}
        for split, path in sources.items():
            text = _plain_text(path, tmp, f".{split}.txt")
            try:
                s = binarize_file(text, os.path.join(tmp, split), spec, dict_path,
                                  workers=options.workers, bad_utf8=options.bad_utf8)
            finally:
                if text != str(path):
                    os.remove(text)
            rows[split] = s.lines
        write_dict(dict_path, tmp)
        if spec.bpe == "gpt2" and getattr(spec, "encoder_json", None):
            shutil.copyfile(spec.encoder_json, os.path.join(tmp, "encoder.json"))
        with open(os.path.join(tmp, "segmentation"), "w", encoding="utf-8") as f:
            f.write(spec.segmentation + "\n")
        provenance.write_record(tmp, provenance.RecordFields(
            command=options.command, task=TASK, inputs=1,
            encoder=provenance.encoder_record(spec, dict_path), labels={"kind": "none"},
            source={split: provenance.file_entry(path) for split, path in sources.items()},
            rows=rows, bad_utf8=provenance.utf8_entry(options.bad_utf8, {})))
    return rows
