"""One record of how a task folder was made, ``DATA/provenance.json``, written last by
``span-preprocess`` (:func:`write_record`), read back and checked against the folder
(:func:`read_record`, :func:`verify_folder`) and printed by ``span-preprocess check``
(:func:`describe`). Its fields, who writes each part and who reads it: docs/DATA.md and
docs/PREPROCESS.md, section "Module notes"."""

import json
import os
from dataclasses import dataclass
from typing import Optional

from span_plugin.files.atomic import atomic_file
from span_plugin.formats.lines import regular_file
from span_plugin.preprocess.file_records import check_plausible, file_entry, sha256, short
from span_plugin.preprocess.segmentation.segmentations import segmentation_kind
from span_plugin.tokenizers import tokenizer_kind

RECORD_NAME = "provenance.json"
FORMAT = "span_plugin data record 1"


class ProvenanceError(ValueError):
    """A folder or file that disagrees with its record; the message names both."""


# ---------------------------------------------------------------------------------
# Writing


def plugin_version():
    from span_plugin.version import __version__

    return __version__


def encoder_record(spec, srcdict):
    """The ``encoder`` part of a record for an EncoderSpec and its fairseq dict.txt:
    the common settings, and what its tokenizer and segmentation kinds record."""
    from span_plugin.preprocess.segmentation.ngrams import DEFAULT_FILES, default_ngrams_path, read_header

    tokenizer = tokenizer_kind(spec.bpe)
    segmentation = segmentation_kind(spec.segmentation)
    paths = tokenizer.recorded_paths({o.field: getattr(spec, o.field) for o in tokenizer.options})
    ngrams = None
    if segmentation.needs_dictionary:
        words = tokenizer.word_scheme
        path = spec.ngrams or default_ngrams_path(words)
        ngrams = dict(file_entry(path), top_k=spec.ngrams_top_k, words=words,
                      packaged=DEFAULT_FILES[words] if spec.ngrams is None else None,
                      built=read_header(path))  # corpus and counting settings
    return {"bpe": spec.bpe, "files": {k: file_entry(p) for k, p in paths.items()},
            "srcdict": file_entry(srcdict), "ngrams": ngrams,
            "segmentation": spec.segmentation, "seed": spec.seed,
            **segmentation.record(spec)}


def folder_files(folder):
    """Relative paths of the files a record covers: all but raw/ and the record."""
    out = []
    for root, dirs, names in os.walk(folder):
        rel_root = os.path.relpath(root, folder)
        if rel_root == "raw":
            dirs[:] = []
            continue
        dirs.sort()
        for name in sorted(names):
            rel = os.path.normpath(os.path.join(rel_root, name))
            if rel != RECORD_NAME:
                out.append(rel.replace(os.sep, "/"))
    return out


def utf8_entry(mode, replacements):
    """The record's ``bad_utf8``: ``{"mode": "error" | "replace", "replacements":
    {split: invalid UTF-8 sequences read as U+FFFD}}``."""
    return {"mode": mode, "replacements": dict(replacements)}


@dataclass(frozen=True)
class RecordFields:
    """What a record says of how its folder was made (all but the format, the plugin's
    version and the files' hashes). encoder: :func:`encoder_record`; source: ``{split:
    file_entry}``; rows: ``{split: rows}``; bad_utf8: :func:`utf8_entry` of the
    sources, when the builder read them as text (None: left out of the record)."""

    command: Optional[str]
    task: str
    inputs: int
    encoder: dict
    labels: dict
    source: dict
    rows: dict
    bad_utf8: Optional[dict] = None


def write_record(folder, fields):
    """Hash every file of ``folder`` and write its record of ``fields``
    (:class:`RecordFields`), atomically and last."""
    record = {
        "format": FORMAT,
        "plugin_version": plugin_version(),
        "command": fields.command,
        "task": fields.task,
        "inputs": fields.inputs,
        "encoder": fields.encoder,
        "labels": fields.labels,
        "source": fields.source,
        "rows": fields.rows,
        **({"bad_utf8": fields.bad_utf8} if fields.bad_utf8 is not None else {}),
        "files": {rel: sha256(os.path.join(folder, rel)) for rel in folder_files(folder)},
    }
    with atomic_file(os.path.join(folder, RECORD_NAME), text=True) as f:
        json.dump(record, f, indent=1, sort_keys=False)
        f.write("\n")
    return record


# ---------------------------------------------------------------------------------
# Reading and checking


def read_record(folder):
    """The record of ``folder``, or None when it has none."""
    path = os.path.join(folder, RECORD_NAME)
    if not os.path.exists(path):
        return None
    regular_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (ValueError, UnicodeDecodeError) as err:
        raise ProvenanceError(f"{path}: not a readable record ({err}); rebuild the folder "
                              f"with span-preprocess") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ProvenanceError(f"{path}: format {record.get('format') if isinstance(record, dict) else None!r}, "
                              f"expected {FORMAT!r}; rebuild the folder with span-preprocess")
    return record


def verify_files(folder, record, only=None, where=None):
    """Check the files of ``folder`` against the record's hashes (``only``: a
    predicate on relative paths; ``where``: what holds the record, for messages).
    Raises ProvenanceError at the first difference."""
    own = where is None  # the folder's own record, not a checkpoint's copy
    where = where or os.path.join(folder, RECORD_NAME)
    for rel, digest in record["files"].items():
        if only is not None and not only(rel):
            continue
        path = os.path.join(folder, rel)
        if not os.path.exists(path):
            raise ProvenanceError(
                f"{path}: missing, but {where} lists it; " + (
                    "the folder is incomplete: rebuild it with span-preprocess" if own else
                    f"{folder} is not the folder it was trained on: give that folder (or a copy)"))
        if is_dictionary(rel):  # a dictionary named by a checkpoint is read only if plausible
            check_plausible(rel, path)
        actual = sha256(path)
        if actual != digest:
            raise ProvenanceError(
                f"{path}: its content (sha256 {short(actual)}) is not what {where} "
                f"records (sha256 {short(digest)}): " + (
                    f"the file changed after span-preprocess made the folder. Rebuild the "
                    f"folder (or give the one the record describes), or remove "
                    f"{RECORD_NAME} to use it unchecked" if own else
                    f"{folder} is not the folder it was trained on, or was rebuilt since "
                    f"with other settings: give that folder (or a copy)"))


def comparable(value):
    """A record's value as two records are compared: a file entry by its content alone
    (its sha256), not by where the file was."""
    if isinstance(value, dict):
        if "sha256" in value and "path" in value:
            return value["sha256"]
        return {k: comparable(v) for k, v in value.items()}
    return value


def labels_summary(record):
    """A record's task and labels in a few words: ``MRPC, 2 classes (1, 0)``."""
    labels = record.get("labels") or {}
    kind, names = labels.get("kind"), labels.get("names") or []
    listed = ", ".join(map(str, names[:8])) + (", ..." if len(names) > 8 else "")
    what = {"classes": f"{len(names)} classes ({listed})",
            "tags": f"{len(names)} tags ({listed})",
            "regression": "regression (one value per row)",
            "qa": "extractive QA answers", "none": "no labels"}.get(kind, f"labels {kind!r}")
    return f"task {record.get('task')!r}, {what}"


def check_same_labels(folder, record, where):
    """Raise :class:`ProvenanceError` when ``folder``'s own record holds another label
    kind or label list (names, order) than ``record`` (what ``where``, a checkpoint, was
    trained on), naming both, before its files are compared one by one."""
    own = read_record(folder)
    if own is None or record is None:
        return
    mine, theirs = own.get("labels") or {}, record.get("labels") or {}
    if (mine.get("kind"), mine.get("names")) == (theirs.get("kind"), theirs.get("names")):
        return
    raise ProvenanceError(
        f"{folder} holds {labels_summary(own)}, but {where} was trained on a folder of "
        f"{labels_summary(record)}: give the folder it was trained on (or a copy)")


def is_dictionary(rel):
    return rel.endswith("/dict.txt")


_VERIFIED = set()


def verify_folder(folder):
    """Check every file of ``folder`` against its record, once per process."""
    folder = os.path.abspath(folder)
    record = read_record(folder)
    if record is None or folder in _VERIFIED:
        return record
    verify_files(folder, record)
    _VERIFIED.add(folder)
    return record


def positive_label(record):
    labels = (record or {}).get("labels") or {}
    return labels.get("positive")


def describe(record):
    """Readable lines for ``span-preprocess check``."""
    enc = record["encoder"]
    files = ", ".join(f"{os.path.basename(e['path'])} {short(e['sha256'])}"
                      for e in enc["files"].values())
    ng = enc["ngrams"]
    if ng is None:
        ngrams = f"none (segmentation {enc['segmentation']})"
    else:
        top = "all entries" if ng["top_k"] is None else f"top {ng['top_k']}"
        name = f"packaged {ng['packaged']}" if ng.get("packaged") else ng["path"]
        ngrams = f"{name} (sha256 {short(ng['sha256'])}, {top}, words={ng['words']})"
    labels = record["labels"]
    if labels["kind"] == "none":
        lab = "none (no labelled split)"
    elif labels["kind"] == "regression":
        lab = f"regression (stored as value / {labels.get('scale', 1.0):g})"
    elif labels["kind"] == "qa":
        lab = (f"extractive QA (windows of {labels.get('max_positions')} positions, stride "
               f"{labels.get('doc_stride')}; {labels.get('versions')})")
    elif labels["kind"] == "tags":
        lab = (f"entity tags {labels.get('scheme')} (read as {labels.get('input_scheme')}): "
               + ", ".join(labels["names"]))
    else:
        pos = labels.get("positive")
        lab = (", ".join(labels["names"])
               + (f" (F1 positive: {pos})" if pos else " (no F1 positive label)"))
    rows = ", ".join(f"{k} {v}" for k, v in record["rows"].items())
    return [
        f"record: made by span_plugin {record['plugin_version']}: {record['command']}",
        f"  task: {record['task']}, {record['inputs']} input(s); rows: {rows}",
        f"  encoder: {enc['bpe']} ({files}); dict.txt {enc['srcdict']['path']} "
        f"(sha256 {short(enc['srcdict']['sha256'])})",
        f"  n-grams: {ngrams}",
        f"  segmentation: {enc['segmentation']} (seed {enc['seed']})",
        *_segmentation_lines(enc),
        f"  labels: {lab}",
        *(["  invalid UTF-8 read as U+FFFD: "
           + ", ".join(f"{k} {v}" for k, v in record["bad_utf8"]["replacements"].items())]
          if (record.get("bad_utf8") or {}).get("mode") == "replace" else []),
        f"  files: {len(record['files'])} recorded, hashes match",
    ]


def _segmentation_lines(enc):
    """What the record's segmentation kind adds (nothing for a kind not registered)."""
    try:
        return segmentation_kind(enc["segmentation"]).describe(enc)
    except ValueError:
        return []
