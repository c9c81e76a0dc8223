"""An exported model folder (``span-export hf`` of a fine-tuned checkpoint; the format in
docs/EXPORT.md) read for inference: checked whole before anything in it is used
(:func:`span_plugin.formats.model_folder.check_folder`: the listing, every JSON file,
the tensors' header, config.json against the tensors, labels and itself, the files it
names inside the folder with their recorded sha256), then what this loader adds: the
head kinds it can build and the chunker's files against the data record.

JSON and file names only: no torch, no fairseq.
"""

import os
from dataclasses import dataclass, field

from span_plugin.formats.model_folder import CONFIG, ModelFolderError, check_folder


@dataclass(frozen=True)
class ModelFolder:
    """What an exported folder says about its model. ``heads``: ``{name: {"kind",
    "options", "inputs"}}``; ``labels``: ``{head name: names}``; ``record``: the data
    record of the folder it was trained on (None: made without one); ``shapes``:
    ``{tensor name: (dtype, shape)}`` of ``model.safetensors``, from its header;
    ``listed``: ``{file name: sha256}`` of ``files.json``."""

    path: str
    config: dict
    task: str
    model_args: dict
    task_args: dict
    heads: dict
    labels: dict
    record: dict
    files: dict
    shapes: dict = field(default_factory=dict)
    listed: dict = field(default_factory=dict)

    def file(self, key):
        """The path of the folder's ``files[key]`` (``"ngrams"``, ``"chunker"``), or None."""
        name = self.files.get(key)
        return os.path.join(self.path, *name.split("/")) if name else None

    @property
    def where(self):
        return os.path.join(self.path, CONFIG)


def _check_chunker(folder):
    """The chunker's NLTK files in the folder against the sha256 the data record holds."""
    encoder = (folder.record or {}).get("encoder") or {}
    recorded = encoder.get("chunker")
    name = folder.files.get("chunker")
    if not recorded:
        if name is not None:
            raise ModelFolderError(f"{folder.where}: span_plugin.files.chunker: {name!r}, but "
                                   f"the data record names no chunker")
        return
    if name is None:
        raise ModelFolderError(f"{folder.where}: span_plugin.files.chunker: missing, but the "
                               f"data record's segmentation reads a chunker")
    from span_plugin.preprocess.segmentation.chunker import TAGGER_FILES, TEST_FILE, TRAIN_FILE

    entries = [(f"tagger.{part}", rel, (recorded.get("tagger") or {}).get(part))
               for part, rel in TAGGER_FILES.items()]
    entries += [("train", TRAIN_FILE, recorded.get("train"))]
    if recorded.get("test"):
        entries += [("test", TEST_FILE, recorded["test"])]
    for key, rel, entry in entries:
        listed = folder.listed.get(f"{name}/{rel}")
        want = (entry or {}).get("sha256") if isinstance(entry, dict) else None
        if listed is None or listed != want:
            got = f"sha256 {listed[:12]}" if listed else "missing"
            raise ModelFolderError(
                f"{folder.where}: span_plugin.data_record.encoder.chunker.{key}.sha256: "
                f"{str(want)[:12]}, but {name}/{rel} is {got}: not the chunker's file the "
                f"model was trained with")


def read_folder(path, known_kinds):
    """The :class:`ModelFolder` at ``path``, checked whole
    (:func:`~span_plugin.formats.model_folder.check_folder`). A head of a kind not in
    ``known_kinds``, a task this loader does not serve, or a chunker file other than the
    recorded one is a :class:`ModelFolderError` naming ``config.json`` and the field."""
    path = os.fspath(path)
    config, listed, shapes = check_folder(path)
    where = os.path.join(path, CONFIG)
    section = config["span_plugin"]
    from span_plugin.portable.tasks import TASKS  # the predictors: torch

    task = section["task"]
    if task not in TASKS:
        raise ModelFolderError(f"{where}: span_plugin.task: {task!r}; load_model serves "
                               f"{', '.join(TASKS)}")
    heads = section["heads"]
    for name, head in heads.items():
        if head["kind"] not in known_kinds:
            raise ModelFolderError(f"{where}: head {name!r} has kind {head['kind']!r}; known "
                                   f"kinds: {', '.join(sorted(known_kinds))}")
    found = ModelFolder(path=path, config=config, task=task,
                        model_args=section["model_args"], task_args=section["task_args"],
                        heads=heads, labels=section.get("labels") or {},
                        record=section.get("data_record"), files=section.get("files") or {},
                        shapes=shapes, listed=listed)
    _check_chunker(found)
    return found
