"""An exported model folder (``span-export hf`` of a fine-tuned checkpoint; the format in
docs/EXPORT.md) read for inference: checked whole against its ``files.json`` before
anything in it is read, then its ``config.json``'s ``span_plugin`` section (task, model
and task arguments, heads, labels, data record, the segmentation's files) checked for
what this loader can build.

JSON and file names only: no torch, no fairseq.
"""

import os
from dataclasses import dataclass

from span_plugin.formats.model_folder import CONFIG, FORMAT, ModelFolderError, verify_folder

# The tasks a folder may name, and the predictions each gets (portable.predictors).
TASKS = ("span_classification", "sentence_prediction", "span_tagging", "span_labeling",
         "span_qa", "span_pair_classification")


@dataclass(frozen=True)
class ModelFolder:
    """What an exported folder says about its model. ``heads``: ``{name: {"kind",
    "options", "inputs"}}``; ``labels``: ``{head name: names}``; ``record``: the data
    record of the folder it was trained on (None: made without one)."""

    path: str
    config: dict
    task: str
    model_args: dict
    task_args: dict
    heads: dict
    labels: dict
    record: dict
    files: dict

    def file(self, key):
        """The path of the folder's ``files[key]`` (``"ngrams"``, ``"chunker"``), or None."""
        name = self.files.get(key)
        return os.path.join(self.path, name) if name else None

    @property
    def where(self):
        return os.path.join(self.path, CONFIG)


def _section(config, key, kind, where):
    value = config.get(key)
    if not isinstance(value, kind):
        raise ModelFolderError(f"{where}: span_plugin.{key} is {type(value).__name__}, "
                               f"expected {kind.__name__}")
    return value


def read_folder(path, known_kinds):
    """The :class:`ModelFolder` at ``path``, after :func:`verify_folder` (a missing,
    changed, unlisted or pickle file is refused naming it). A head of a kind not in
    ``known_kinds``, a task this loader does not serve, or an encoder-only folder is a
    :class:`ModelFolderError` naming ``config.json``."""
    path = os.fspath(path)
    config = verify_folder(path)
    where = os.path.join(path, CONFIG)
    section = config.get("span_plugin")
    if not isinstance(section, dict):
        raise ModelFolderError(
            f"{where}: no 'span_plugin' section: an encoder exported without a task head; "
            f"load it with transformers' AutoModel (load_model reads fine-tuned folders)")
    if section.get("format") != FORMAT:
        raise ModelFolderError(f"{where}: span_plugin.format {section.get('format')!r}, "
                               f"expected {FORMAT}")
    task = section.get("task")
    if task not in TASKS:
        raise ModelFolderError(f"{where}: task {task!r}; load_model serves {', '.join(TASKS)}")
    heads = _section(section, "heads", dict, where)
    if not heads:
        raise ModelFolderError(f"{where}: span_plugin.heads is empty: no task head to predict with")
    for name, head in heads.items():
        kind = head.get("kind") if isinstance(head, dict) else None
        if kind not in known_kinds:
            raise ModelFolderError(f"{where}: head {name!r} has kind {kind!r}; known kinds: "
                                   f"{', '.join(sorted(known_kinds))}")
    files = section.get("files") or {}
    for key, name in files.items():
        if name is not None and not os.path.exists(os.path.join(path, name)):  # chunker: a folder
            raise ModelFolderError(f"{os.path.join(path, name)}: missing (config.json names "
                                   f"it as the {key} file)")
    return ModelFolder(path=path, config=config, task=task,
                       model_args=_section(section, "model_args", dict, where),
                       task_args=_section(section, "task_args", dict, where),
                       heads=heads, labels=section.get("labels") or {},
                       record=section.get("data_record"), files=files)
