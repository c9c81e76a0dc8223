"""``span-export hf`` of a fine-tuned checkpoint: one self-contained folder (format 1,
docs/EXPORT.md) of the predictor's parts (encoder, heads, labels, settings, data record,
n-gram dictionary or chunker, card, ``files.json``) that :func:`span_plugin.portable.load_model`
reads without fairseq. Design notes: docs/EXPORT.md, "Module notes"."""

import json
import os
import shutil
from pathlib import Path
from typing import Dict, Optional

from span_plugin.convert.export_source import checkpoint_file, fine_tuned_heads
from span_plugin.convert.hf_export import check_export_dir, plan_hf_export, write_hf_folder
from span_plugin.convert.hf_source import ConversionError
from span_plugin.export.model_card import write_model_card
from span_plugin.formats.model_folder import FORMAT, file_sha256, write_manifest
from span_plugin.export.hf_classes import check_choice, choose_class
from span_plugin.portable import check_model_folder

HEADS_PREFIX = "span_heads."
CHUNKER_DIR = "chunker"
RESULTS = "results.json"


def _checked_copy(src, dst: Path, sha256: str, what: str) -> None:
    """Copy ``src`` to ``dst`` and check the copy's sha256 against the record's."""
    if src is None or not os.path.isfile(src):
        raise ConversionError(f"{src}: the {what} the checkpoint's data record names is "
                              f"not there")
    shutil.copyfile(src, dst)
    actual = file_sha256(dst)
    if actual != sha256:
        raise ConversionError(f"{src}: not the {what} the checkpoint was trained with "
                              f"(sha256 {actual[:12]}, recorded {sha256[:12]})")


def _ngrams_path(entry: Dict) -> str:
    """Where the recorded n-gram dictionary is: the packaged one of this installation,
    else the recorded path."""
    if entry.get("packaged"):
        from span_plugin.preprocess.segmentation.ngrams import default_ngrams_path

        return str(default_ngrams_path(entry["words"]))
    return entry["path"]


def _ngrams_name(path) -> str:
    """``ngrams`` with the dictionary's suffixes (``.txt.gz``: the reader opens by them)."""
    suffixes = Path(path).suffixes
    return "ngrams" + "".join(suffixes[-2:] if suffixes[-1:] == [".gz"] else suffixes[-1:])


def _chunker_files(record: Dict, folder: Path) -> Optional[str]:
    """The chunker of the record into ``folder/chunker/``, an NLTK data folder: NLTK's
    tagger files and CoNLL-2000 train and test, byte for byte (checked against the
    recorded sha256s), and the trained model (``chunker_model.json``, which the chunker
    reads before training). Checked by building the chunker from it: the recorded model."""
    recorded = (record.get("encoder") or {}).get("chunker")
    if not recorded:
        return None
    from span_plugin.preprocess.segmentation import chunker

    model = chunker.build(recorded["nltk_data"])  # the hub's: in memory
    if model.fingerprint != recorded["model_sha256"]:
        raise ConversionError(
            f"{recorded['nltk_data']}: the chunker trained from it now (sha256 "
            f"{model.fingerprint[:12]}, NLTK {model.key['nltk']}) is not the one the checkpoint "
            f"was trained with ({recorded['model_sha256'][:12]}, NLTK {recorded['nltk']})")
    root = folder / CHUNKER_DIR
    entries = [(rel, recorded["tagger"][part]) for part, rel in chunker.TAGGER_FILES.items()]
    entries += [(chunker.TRAIN_FILE, recorded["train"])]
    entries += [(chunker.TEST_FILE, recorded["test"])] if recorded.get("test") else []
    for rel, entry in entries:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        _checked_copy(entry["path"], root / rel, entry["sha256"], "chunker's NLTK file")
    (root / chunker.MODEL_FILE).write_text(
        json.dumps(chunker.model_data(model), separators=(",", ":")), encoding="utf-8")
    if chunker.build(str(root)).fingerprint != model.fingerprint:  # read back, not trained
        raise ConversionError(f"{root / chunker.MODEL_FILE}: does not read back as the "
                              f"chunker written")
    return CHUNKER_DIR


def _results(path: Path) -> Optional[Dict]:
    """The run's results.json: beside the checkpoint, or beside its checkpoints/ folder
    (where the recipes write it)."""
    for folder in (path.parent, path.parent.parent):
        candidate = folder / RESULTS
        if candidate.is_file():
            try:
                return json.loads(candidate.read_text(encoding="utf-8"))
            except ValueError as err:
                raise ConversionError(f"{candidate}: not JSON ({err})") from None
    return None


def load_fine_tuned(path: Path, heads, data=None, files=None, ngrams=None):
    """The checkpoint's predictor (safe loading; its data folder and files checked
    against the data record) and its parts (``predictor.folder``), every head's kind
    known: a head whose computation is not known cannot be exported."""
    from span_plugin.inference.checkpoint import head_specs, load_predictor

    try:
        hub = load_predictor(path, data=data, head=heads[0], ngrams=ngrams, **(files or {}))
    except (ValueError, FileNotFoundError) as err:  # settings, data folder, weights
        raise ConversionError(str(err).splitlines()[0]) from err
    head_specs(hub.model, path, strict=True)  # refuses a head of no known kind
    return hub, hub.folder


def export_model(checkpoint, out_dir, force: bool = False, files=None, data=None,
                 ngrams_given=None):
    """Export ``checkpoint`` to ``out_dir``: a fine-tuned checkpoint as the folder of
    format 1, an encoder as part 1 does (:func:`span_plugin.convert.hf_export.export_hf`).
    ``data``, ``ngrams_given``: the task folder and n-gram dictionary when they moved (checked
    against the record). Every check runs before anything is written. Returns the plan
    and the ``span_plugin`` config (None for an encoder)."""
    from span_plugin.convert.hf_export import export_hf
    from span_plugin.convert.safe_load import load_checkpoint

    out_dir = check_export_dir(out_dir, force)
    path = checkpoint_file(checkpoint)
    heads = fine_tuned_heads(load_checkpoint(path, mmap=True)["model"])
    if not heads:
        return export_hf(path, out_dir, force=force, files=files), None
    plan = plan_hf_export(path, files, heads_allowed=True, data=data)
    hub, parts = load_fine_tuned(path, heads, data, files, ngrams_given)
    if not hub.record:
        raise ConversionError(
            f"{path}: holds no data record (its folder was made before span_plugin 0.2): the "
            f"tokenizer, n-gram dictionary and segmentation of its inputs are not known, so "
            f"no folder could encode text as training did; rebuild the folder with "
            f"span-preprocess and fine-tune again")
    tensors = plan.source.tensors
    head_info = parts.heads
    for name in head_info:
        prefix = f"classification_heads.{name}."
        plan.tensors.update({HEADS_PREFIX + name + "." + k[len(prefix):]: v
                             for k, v in tensors.items() if k.startswith(prefix)})
    record = json.loads(json.dumps(hub.record))  # a copy, of JSON types only
    encoder = record.get("encoder") or {}
    ngrams = encoder.get("ngrams")
    ngrams_path = (ngrams_given or _ngrams_path(ngrams)) if ngrams else None
    copied = {"ngrams": _ngrams_name(ngrams_path) if ngrams else None,
              "chunker": CHUNKER_DIR if encoder.get("chunker") else None}
    for key, name in copied.items():  # the record says where its files are in DIR
        if name:
            encoder[key]["file"] = name
    labels = parts.labels
    span = {"format": FORMAT, "task": parts.task, "model_args": parts.model_args,
            "task_args": parts.task_args, "heads": head_info, "labels": labels,
            "data_record": record, "files": copied}
    as_class = choose_class(hub, plan, head_info, labels, span)
    plan.config["span_export"] = {"source": str(path.resolve()), "tokenizer": plan.source.kind,
                                  "dropped": plan.dropped, "lm_head": plan.lm_head,
                                  "transformers": as_class}
    plan.config["span_plugin"] = span
    results = _results(path)

    def finish(folder: Path):
        if ngrams:
            _checked_copy(ngrams_path, folder / copied["ngrams"], ngrams["sha256"],
                          "n-gram dictionary")
        _chunker_files(record, folder)
        write_model_card(folder / "README.md", plan.config, results,
                         Path(os.path.abspath(out_dir)).name)
        write_manifest(folder)
        try:  # as load_model checks it, the weights aside
            check_model_folder(folder)
        except ValueError as err:
            raise ConversionError(f"the folder written does not pass the reader's check: "
                                  f"{err}") from err
        if as_class["pipeline"]:
            check_choice(folder)

    write_hf_folder(plan, out_dir, finish)
    return plan, span
