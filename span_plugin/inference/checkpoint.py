"""A fine-tuned fairseq checkpoint as a predictor: fairseq loads it (safe loading, the
data folder and the encoder checked against the data record), and the checkpoint's
parts become what an exported folder gives (:class:`CheckpointParts`: task, settings,
heads, labels, record), so the predictor of :mod:`span_plugin.portable` serves it in
memory, with the code that serves exported folders.

    from span_plugin.hub import SpanHubInterface
    model = SpanHubInterface.from_pretrained("checkpoints/checkpoint_best.pt")
    model.predict([("A man plays.", "A man is playing.")])
    model.model, model.task   # fairseq's model and task, for scripts that read them
"""

import argparse
import enum
import json
import os
import re
from typing import Dict, Mapping

import torch.nn as nn
from fairseq.dataclass.utils import overwrite_args_by_name

import span_plugin
from span_plugin.convert.export_source import SBO_HEAD
from span_plugin.convert.hf_source import ConversionError
from span_plugin.models.heads import head_inputs
from span_plugin.portable.folder import ModelFolder
from span_plugin.portable.tasks import TASKS, build_predictor, check_folder_kind
from span_plugin.preprocess.records import encoder_settings, provenance
from span_plugin.runtime import data_record

span_plugin.register()  # the stack fixes, and every task and model a checkpoint may name

# Settings that name paths of the training machine, not the model.
LOCAL_SETTINGS = ("data", "save_dir", "restore_file", "finetune_from_model", "user_dir",
                  "tensorboard_logdir", "log_file")


class CheckpointMismatchError(ValueError):
    """A checkpoint whose ``model`` tensors do not fit the model its cfg builds: names
    missing, unexpected or of another shape (``Module.load_state_dict``'s RuntimeError)."""


class CheckpointParts(ModelFolder):
    """What a checkpoint says about its model, as an exported folder says it; errors name
    the checkpoint file."""

    @property
    def where(self):
        return self.path


class DictionaryVocab:
    """A fairseq dictionary behind the predictors' vocabulary: symbols -> ids as
    fairseq-preprocess binarizes a line; fairseq's special indices are the model's."""

    def __init__(self, dictionary):
        self.dictionary = dictionary
        self.bos, self.pad = dictionary.bos(), dictionary.pad()
        self.eos, self.unk = dictionary.eos(), dictionary.unk()

    def line(self, symbols):
        """LongTensor ``[len + 1]``: the symbols' ids and ``</s>``."""
        return self.dictionary.encode_line(" ".join(symbols), append_eos=True,
                                           add_if_not_exist=False).long()

    def fairseq_index(self, index):
        return index


class FairseqNetwork(nn.Module):
    """A fairseq span model behind the predictors' call: ``forward(tokens [B, T], head,
    **inputs)`` -> the head's output."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, head, **inputs):
        out, _ = self.model(tokens, classification_head_name=head, **inputs)
        return out


def settings(cfg, drop=()) -> Dict:
    """The JSON scalars of a cfg section (a DictConfig, dict or Namespace), sorted;
    fairseq's choice fields as their values."""
    if isinstance(cfg, argparse.Namespace):
        cfg = vars(cfg)
    out = {}
    for key in sorted(cfg.keys() if isinstance(cfg, Mapping) or hasattr(cfg, "keys") else []):
        if key in drop or str(key).startswith("_") and key != "_name":
            continue
        try:
            value = cfg[key]
        except Exception:  # noqa: BLE001 - an unresolved ??? value: not a setting
            continue
        if isinstance(value, enum.Enum):
            value = value.value
        if value is None or isinstance(value, (bool, int, float, str)):
            out[str(key)] = value
    return out


def head_specs(model, path, strict=True) -> Dict:
    """``{name: {"kind", "options", "inputs"}}`` of every task head of ``model``. fairseq's
    own ``RobertaClassificationHead`` is the plugin's ``plain`` kind (the same
    computation); another module is a ConversionError when ``strict`` (an export must know
    what it computes), else of kind None (the checkpoint still predicts)."""
    heads = {}
    for name, head in model.classification_heads.items():
        if name == SBO_HEAD:
            continue
        kind, options = getattr(head, "kind", None), getattr(head, "options", {})
        if kind is None:
            kind, options = _fairseq_head(head, name, path, strict)
        options = {k: v.value if isinstance(v, enum.Enum) else v for k, v in options.items()}
        try:
            json.dumps(options)
        except TypeError as err:
            raise ConversionError(f"{path}: head {name!r} options {options!r} are not "
                                  f"JSON ({err})") from None
        heads[name] = {"kind": kind, "options": options, "inputs": list(head_inputs(head))}
    return heads


def _fairseq_head(head, name, path, strict):
    from fairseq.models.roberta.model import RobertaClassificationHead

    if type(head) is RobertaClassificationHead:
        return "plain", {"num_classes": head.out_proj.out_features,
                         "inner_dim": head.dense.out_features}
    if not strict:
        return None, {}
    raise ConversionError(
        f"{path}: head {name!r} is {type(head).__module__}.{type(head).__name__}, neither "
        f"one of the plugin's head kinds nor fairseq's RobertaClassificationHead: its "
        f"computation is not known, so it cannot be exported")


def task_labels(task, heads) -> Dict:
    """``{head: [label names in class-index order]}`` from the task's dictionaries; a
    span-pair head: ``{"phrasal": [...], "sentential": [...]}`` (each only when that
    output exists); none for regression and QA."""
    def sentence_labels():
        d = task.label_dictionary
        return [d[i + d.nspecial] for i in range(task.cfg.num_classes)]

    out = {}
    for name, head in heads.items():
        kind, options = head["kind"], head["options"]
        if kind in ("sentence", "plain", None) and hasattr(task, "label_dictionary"):
            if not getattr(task.cfg, "regression_target", False):
                out[name] = sentence_labels()
        elif kind in ("token", "sf"):
            out[name] = list(task.tag_names)
        elif kind == "span":
            out[name] = ["O", *task.entity_types]  # class 0: no entity
        elif kind == "span_pair":
            pair = {}
            if options.get("phrase_classes"):
                pair["phrasal"] = list(task.phrase_labels)
            if options.get("sentence_classes"):
                pair["sentential"] = sentence_labels()
            out[name] = pair
    for name, names in out.items():
        want = heads[name]["options"].get("num_classes")
        if isinstance(names, list) and want is not None and len(names) != want:
            raise ConversionError(f"head {name!r}: {want} classes but the task's dictionary "
                                  f"names {len(names)}: {names}")
    return out


def checkpoint_parts(path, model, task, record) -> CheckpointParts:
    """The :class:`CheckpointParts` of a loaded checkpoint (a head of no known kind is of
    kind None: the checkpoint still predicts)."""
    task_args = settings(task.cfg, drop=LOCAL_SETTINGS)
    if hasattr(task, "answer_boundaries"):  # QA: the checkpoint's state, not the cfg default
        task_args["answer_boundaries"] = task.answer_boundaries
    heads = head_specs(model, path, strict=False)
    return CheckpointParts(path=str(path), config={}, task=task_args.get("_name"),
                           model_args=settings(model.args, drop=LOCAL_SETTINGS),
                           task_args=task_args, heads=heads, labels=task_labels(task, heads),
                           record=record, files={})


def load_predictor(checkpoint, data=None, head=None, **given):
    """The predictor of a fine-tuned ``checkpoint`` (what
    :meth:`span_plugin.hub.SpanHubInterface.from_pretrained` returns for one; its
    arguments). ``head``: the head to predict with (default: the one the task trained)."""
    from fairseq import checkpoint_utils

    files = encoder_settings.given_files(
        {k: v for k, v in given.items() if k not in encoder_settings.SETTINGS},
        "from_pretrained")  # names checked
    state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))
    cfg = state.get("cfg")
    task_cfg = cfg["task"] if cfg is not None else state["args"]
    task_name = _field(task_cfg, "_name") if cfg is not None else _field(task_cfg, "task")
    if task_name not in TASKS:
        model_cfg = cfg["model"] if cfg is not None else state.get("args")
        arch = _field(model_cfg, "arch") or _field(model_cfg, "_name")
        raise ValueError(f"{checkpoint}: trained with task {task_name!r} and model {arch!r}; "
                         f"SpanHubInterface loads checkpoints fine-tuned with task "
                         f"{' or '.join(TASKS)}")
    record = data_record.checkpoint_record(state)
    data = _data_folder(data, _field(task_cfg, "data"), record, checkpoint, task_name)
    spec = encoder_settings.encoder_spec(record, {
        k: (str(v) if isinstance(v, os.PathLike) else v)
        for k, v in {**{k: given.get(k) for k in encoder_settings.SETTINGS}, **files}.items()},
        checkpoint)
    model, task = _load(checkpoint, state, cfg, data)
    parts = checkpoint_parts(checkpoint, model, task, record)
    predictor = build_predictor(parts, spec.build(), DictionaryVocab(task.source_dictionary),
                                FairseqNetwork(model.eval()), head=head)
    predictor.model, predictor.task = model, task  # for users' scripts
    predictor.data = data
    if record is None:
        predictor.num_inputs = 2 if os.path.isdir(os.path.join(data, "input1")) else 1
    return predictor


def _load(checkpoint, state, cfg, data):
    """``(model, task)`` of the checkpoint; a RoBERTa-family model only."""
    from fairseq import checkpoint_utils
    from fairseq.models.roberta import RobertaModel

    # fairseq applies overrides only when it reads the file itself, not to a state
    # handed to load_model_ensemble_and_task: apply them here.
    overrides = {"load_checkpoint_heads": True, "data": data}
    if cfg is not None:
        overwrite_args_by_name(cfg, overrides)
    else:
        for k, v in overrides.items():
            setattr(state["args"], k, v)
    try:
        models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(checkpoint)], arg_overrides=overrides, state=state)
    except RuntimeError as err:
        mismatch = weights_mismatch(err)
        if mismatch is None:
            raise
        raise CheckpointMismatchError(
            f"{checkpoint}: its weights do not fit the model its cfg describes "
            f"({mismatch}): the checkpoint does not fit this model/task; it was changed "
            f"after fairseq saved it or saved for another architecture") from err
    model = models[0]
    if not isinstance(model, RobertaModel):
        args = getattr(model, "args", None)
        arch = getattr(args, "arch", None) or getattr(args, "_name", None) or "unknown arch"
        raise ValueError(f"checkpoint holds a {type(model).__name__} ({arch}), not a "
                         f"RoBERTa-family model (--arch roberta_span_* or roberta_*)")
    return model, task


def weights_mismatch(err, first=3):
    """What ``Module.load_state_dict``'s RuntimeError ``err`` says is missing, unexpected
    or of another shape (the first ``first`` names of each), or None for another error."""
    text = str(err)
    if "Error(s) in loading state_dict" not in text:
        return None
    parts = []
    for kind, what in (("Missing", "missing"), ("Unexpected", "unexpected")):
        found = re.search(kind + r' key\(s\) in state_dict: (.*)', text)
        if found:
            names = re.findall(r'"([^"]+)"', found.group(1))
            parts.append(f"{what}: {', '.join(names[:first])}"
                         + (f" and {len(names) - first} more" if len(names) > first else ""))
    shapes = re.findall(r"size mismatch for (\S+?):", text)
    if shapes:
        parts.append(f"of another shape: {', '.join(shapes[:first])}"
                     + (f" and {len(shapes) - first} more" if len(shapes) > first else ""))
    return "; ".join(parts) or text.splitlines()[0][:200]


def _data_folder(data, stored, record, checkpoint, task=None):
    """The task folder to read the dictionaries from: ``data`` when given, else the
    folder recorded at training time (absolute), else the path in the checkpoint's
    config. It must be of the kind ``task`` reads (a QA folder for span_qa, ...), and
    its dict.txt files must have the hashes of the checkpoint's record."""
    if data is None:
        tried = [p for p in ((record or {}).get("data_dir"), stored) if p]
        data = next((p for p in tried if os.path.isdir(p)), None)
        if data is None:
            raise FileNotFoundError(
                f"{checkpoint}: its data folder ({' or '.join(map(str, tried)) or 'unknown'}) "
                f"is not here: pass data=FOLDER (the folder it was trained on, or a copy; "
                f"its dict.txt files are checked against the checkpoint's record)")
    data = str(data)
    check_folder_kind(data, task, checkpoint)
    if record is not None:
        provenance.check_same_labels(data, record, checkpoint)
        provenance.verify_files(data, record, only=provenance.is_dictionary,
                                where=f"the data record in {checkpoint}")
    return data


def _field(cfg, key):
    """A key of a DictConfig/dict or an attribute of an argparse Namespace."""
    if cfg is None:
        return None
    return cfg.get(key) if hasattr(cfg, "get") else getattr(cfg, key, None)
