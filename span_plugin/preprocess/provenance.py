"""One record of how a task folder was made: ``DATA/provenance.json``.

``span-preprocess glue`` and ``span-preprocess table`` write it last, once every other
file of the folder exists (a folder without it was made before records existed, or its
preparation did not finish)::

    {"format": "span_plugin data record 1", "plugin_version": "0.2.0",
     "command": "span-preprocess glue --task RTE ...", "task": "RTE", "inputs": 2,
     "encoder": {"bpe": "gpt2",
                 "files": {"encoder_json": {"path": "/abs/encoder.json", "sha256": "..."},
                           "vocab_bpe": {...}},
                 "srcdict": {"path": "/abs/dict.txt", "sha256": "..."},
                 "ngrams": {"path": ..., "sha256": ..., "packaged": "ngrams.default.txt.gz",
                            "top_k": null, "words": "gpt2",       (null: segmentation none)
                            "built": {"corpus": "wiki.AA.txt.gz,...", "min_count": "11",
                                      ...}},  (the dictionary header, ngrams.read_header)
                 "segmentation": "greedy", "seed": 0},
     "labels": {"kind": "classes", "names": ["entailment", "not_entailment"],
                "positive": "entailment"}       (regression: {"kind": "regression",
                                                  "scale": 5.0, "range": [0.0, 5.0]})
     "source": {"train": {"path": ..., "sha256": ...}, ...},
     "rows": {"train": 2490, "valid": 277, "test": 3000},
     "bad_utf8": {"mode": "replace", "replacements": {"train": 2, "valid": 0}},
     "files": {"input0/train.bin": "<sha256>", ..., "label/dict.txt": "<sha256>"}}

``encoder.files`` is keyed by :class:`~span_plugin.preprocess.encoding.EncoderSpec`
field names; a WordPiece folder is recorded as the tokenizer file it resolves to
(``wordpiece``), plus ``wordpiece_config`` when a bare vocab.txt took its casing from a
tokenizer_config.json. ``files`` covers every file of the folder except ``raw/`` and the
record itself. Segmentation ``chunker`` records no n-grams (null) but ``encoder.chunker``:
its NLTK data folder and files (tagger JSON, CoNLL-2000 train and test, by sha256), NLTK's
version, the trained model's sha256 and its CoNLL-2000 test scores
(:func:`chunker_record`).

Who reads it:

- the tasks (``span_classification`` itself; ``sentence_prediction`` through the
  ``span_classification`` criterion) check the folder against it with :func:`attach`
  and :func:`verify_folder`, and put it into the task state, which fairseq saves in
  every checkpoint as ``task_state`` (key :data:`STATE_KEY`);
- the hub and ``span-predict`` rebuild the encoder from the checkpoint's copy
  (:mod:`span_plugin.preprocess.encoder_settings`);
- ``span-preprocess check`` prints it (:func:`describe`) and verifies the folder.
"""

import hashlib
import json
import logging
import os

logger = logging.getLogger(__name__)

RECORD_NAME = "provenance.json"
FORMAT = "span_plugin data record 1"
STATE_KEY = "span_plugin_data_record"  # in the task state, hence in checkpoints


class ProvenanceError(ValueError):
    """A folder or file that disagrees with its record; the message names both."""


# ---------------------------------------------------------------------------------
# Hashing


_HASHES = {}  # (abs path, size, mtime_ns) -> sha256


def sha256(path):
    """Hex sha256 of a file's bytes (cached per path, size and modification time)."""
    path = os.path.abspath(path)
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def file_entry(path):
    """``{"path": absolute path, "sha256": ...}`` of an existing file."""
    return {"path": os.path.abspath(path), "sha256": sha256(path)}


def short(digest):
    return digest[:12]


# ---------------------------------------------------------------------------------
# Writing


def plugin_version():
    from span_plugin.version import __version__

    return __version__


def encoder_record(spec, srcdict):
    """The ``encoder`` part of a record for an EncoderSpec and its fairseq dict.txt."""
    from span_plugin.tokenizers import TOKENIZERS
    from span_plugin.tokenizers.wordpiece import resolve_wordpiece
    from span_plugin.preprocess.ngrams import DEFAULT_FILES, default_ngrams_path, read_header

    files = {}
    if spec.bpe == "wordpiece":
        tokenizer, config = resolve_wordpiece(spec.wordpiece)
        files["wordpiece"] = file_entry(tokenizer)
        if config:
            files["wordpiece_config"] = file_entry(config)
    else:
        for name in ("encoder_json", "vocab_bpe", "sentencepiece_model", "bpe_codes", "bpe_vocab"):
            if getattr(spec, name):
                files[name] = file_entry(getattr(spec, name))
    ngrams = None
    if spec.segmentation not in ("none", "chunker"):
        words = TOKENIZERS[spec.bpe].word_scheme
        path = spec.ngrams or default_ngrams_path(words)
        ngrams = dict(file_entry(path), top_k=spec.ngrams_top_k, words=words,
                      packaged=DEFAULT_FILES[words] if spec.ngrams is None else None,
                      built=read_header(path))  # corpus and counting settings
    record = {"bpe": spec.bpe, "files": files, "srcdict": file_entry(srcdict),
              "ngrams": ngrams, "segmentation": spec.segmentation, "seed": spec.seed}
    if spec.segmentation == "chunker":  # its data files, model hash and test F1
        from span_plugin.preprocess.chunker import build

        record["chunker"] = chunker_record(build(spec.nltk_data))
    return record


def chunker_record(model):
    """The ``encoder.chunker`` part of a record for a
    :class:`span_plugin.preprocess.chunker.Model`."""
    from span_plugin.preprocess.chunker import TAGGER_FILES, TEST_FILE, TRAIN_FILE

    test = os.path.join(model.root, TEST_FILE)
    return {
        "nltk_data": model.root, "nltk": model.key["nltk"],
        "tagger": {part: file_entry(os.path.join(model.root, rel))
                   for part, rel in TAGGER_FILES.items()},
        "train": file_entry(os.path.join(model.root, TRAIN_FILE)),
        "test": file_entry(test) if os.path.isfile(test) else None,
        "chunker": model.description, "model_sha256": model.fingerprint,
        "test_scores": model.scores,  # with the tagger's POS tags; null without test.txt
    }


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


def write_record(folder, *, task, inputs, encoder, labels, rows, source, command,
                 bad_utf8=None):
    """Hash every file of ``folder`` and write its record (atomically, last).
    bad_utf8: :func:`utf8_entry` of the sources, when the builder read them as text."""
    record = {
        "format": FORMAT,
        "plugin_version": plugin_version(),
        "command": command,
        "task": task,
        "inputs": inputs,
        "encoder": encoder,
        "labels": labels,
        "source": source,
        "rows": rows,
        **({"bad_utf8": bad_utf8} if bad_utf8 is not None else {}),
        "files": {rel: sha256(os.path.join(folder, rel)) for rel in folder_files(folder)},
    }
    path = os.path.join(folder, RECORD_NAME)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return record


# ---------------------------------------------------------------------------------
# Reading and checking


def read_record(folder):
    """The record of ``folder``, or None when it has none."""
    path = os.path.join(folder, RECORD_NAME)
    if not os.path.exists(path):
        return None
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
    where = where or os.path.join(folder, RECORD_NAME)
    for rel, digest in record["files"].items():
        if only is not None and not only(rel):
            continue
        path = os.path.join(folder, rel)
        if not os.path.exists(path):
            raise ProvenanceError(f"{path}: missing, but {where} lists it; the folder is "
                                  f"incomplete: rebuild it with span-preprocess")
        actual = sha256(path)
        if actual != digest:
            raise ProvenanceError(
                f"{path}: its content (sha256 {short(actual)}) is not what {where} "
                f"records (sha256 {short(digest)}): the file changed after span-preprocess "
                f"made the folder. Rebuild the folder (or give the one the record "
                f"describes), or remove {RECORD_NAME} to use it unchecked")


def is_dictionary(rel):
    return rel.endswith("/dict.txt")


_VERIFIED = set()
_WARNED = set()


def verify_folder(folder):
    """Check every file of ``folder`` against its record, once per process."""
    folder = os.path.abspath(folder)
    record = read_record(folder)
    if record is None or folder in _VERIFIED:
        return record
    verify_files(folder, record)
    _VERIFIED.add(folder)
    return record


def attach(task):
    """Read the record of the task's data folder, check its dictionaries, and put the
    record (with the folder's absolute path as ``data_dir``) into the task state, which
    fairseq saves in every checkpoint. A folder without a record gets a warning."""
    folder = getattr(getattr(task, "cfg", None), "data", None)
    state = getattr(task, "state", None)
    if not folder or state is None or STATE_KEY in state.state_dict:
        return
    record = read_record(folder)
    if record is None:
        if os.path.abspath(folder) not in _WARNED:
            _WARNED.add(os.path.abspath(folder))
            logger.warning(
                "%s has no %s (made before span_plugin 0.2, or by hand): it trains, but "
                "checkpoints will not record its encoder, n-gram dictionary and "
                "segmentation, so inference cannot check them. Rebuild it with "
                "span-preprocess to get one.", folder, RECORD_NAME)
        return
    verify_files(folder, record, only=is_dictionary)
    state.merge_state_dict({STATE_KEY: dict(record, data_dir=os.path.abspath(folder))})


def task_record(task):
    """The record a task holds (from its folder or a checkpoint), or None."""
    state = getattr(task, "state", None)
    return state.state_dict.get(STATE_KEY) if state is not None else None


def positive_label(record):
    labels = (record or {}).get("labels") or {}
    return labels.get("positive")


def chunker_line(chunker):
    scores = chunker.get("test_scores")
    f1 = f"CoNLL-2000 test F1 {scores['f1']:.4f}" if scores else "no test F1"
    return (f"{chunker['chunker']} on {chunker['train']['path']}, {f1}, NLTK "
            f"{chunker['nltk']}, model sha256 {short(chunker['model_sha256'])}")


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
        *([f"  chunker: {chunker_line(enc['chunker'])}"] if enc.get("chunker") else []),
        f"  labels: {lab}",
        *([f"  invalid UTF-8 read as U+FFFD: "
           + ", ".join(f"{k} {v}" for k, v in record["bad_utf8"]["replacements"].items())]
          if (record.get("bad_utf8") or {}).get("mode") == "replace" else []),
        f"  files: {len(record['files'])} recorded, hashes match",
    ]


# ---------------------------------------------------------------------------------
# Starting checkpoints


def check_checkpoint_dictionary(checkpoint, srcdict, state):
    """Raise :class:`ProvenanceError` when ``checkpoint`` was trained on a folder
    tokenized with another dictionary than ``srcdict``. A checkpoint of a span_plugin
    task (a GLUE run, a transfer run, its stripped encoder) records its folder's
    dict.txt; with the same number of entries but other content, loading would succeed
    and every embedding row would stand for another token. A checkpoint without a
    record (pretrained, converted) passes: there is nothing to compare. ``state``: the
    checkpoint, loaded (:func:`span_plugin.runtime.checkpoints.load_state`)."""
    record = (state.get("task_state") or {}).get(STATE_KEY) or {}
    trained = (record.get("encoder") or {}).get("srcdict")
    if trained is None or trained["sha256"] == sha256(srcdict):
        return
    raise ProvenanceError(
        f"{checkpoint} was trained on {record.get('data_dir', 'a folder')} tokenized with "
        f"{trained['path']} (sha256 {short(trained['sha256'])}), not with {srcdict} "
        f"(sha256 {short(sha256(srcdict))}): its embedding rows stand for other tokens. "
        f"Start from it with the dictionary (BPE_DIR or MODEL_DIR) it was trained with.")

