"""The hub base: a fine-tuned checkpoint loaded for inference on raw text, and the
registry that picks the adapter of the task the checkpoint records. Import it from
:mod:`span_plugin.inference.hub`, which registers every adapter (the adapters import
this module; the hub imports them).

    from span_plugin.inference.hub import SpanHubInterface
    hub = SpanHubInterface.from_pretrained("checkpoints/checkpoint_best.pt")
    # span_classification / sentence_prediction -> SentenceHubInterface: predict, predict_logits
    # span_tagging / span_labeling               -> NerHubInterface: predict_entities, predict_words
    # span_pair_classification                   -> PairHubInterface: predict_pairs
    # span_qa                                    -> QAHubInterface: predict_answers

An adapter is a subclass decorated with :func:`register_adapter` (``task names ->
class``); importing :mod:`span_plugin.inference.hub` registers them all.

The data folder, BPE files, n-gram dictionary and segmentation come from the data
record the checkpoint holds (:mod:`span_plugin.preprocess.records.encoder_settings`); any of them may be
given again and is then checked against it (files by sha256). BPE and segmentation run
on the fly with the encoders of ``span_plugin.preprocess`` (the code ``span-preprocess``
binarizes with); the tokens and spans then go through the layout of training
(:func:`span_plugin.data.layout.lay_out`), so positions, shortening and the r/l limits
are exactly those of training.
"""

import os
import re

import numpy as np
import torch
import torch.nn as nn
from fairseq.data import data_utils
from fairseq.dataclass.utils import overwrite_args_by_name

import span_plugin
from span_plugin.data.in_memory import TensorListDataset
from span_plugin.data.layout import lay_out
from span_plugin.data.span_datasets import LayoutSpansDataset
from span_plugin.inference.folder_kinds import check_folder_kind
from span_plugin.models.heads import head_inputs
from span_plugin.portable.results import finite_outputs
from span_plugin.preprocess.records import encoder_settings, provenance
from span_plugin.runtime import data_record

span_plugin.register()  # the stack fixes, and every task and model a checkpoint may name

ADAPTERS = {}  # task name -> the SpanHubInterface subclass that serves it


def register_adapter(*task_names, output=None):
    """Class decorator: ``from_pretrained`` returns this class for checkpoints trained
    with any of ``task_names``; ``output``, its ``span-predict`` options and writer
    (:class:`span_plugin.inference.outputs.Output`; None: not served by the command)."""
    def register(cls):
        for name in task_names:
            if name in ADAPTERS:
                raise ValueError(f"task {name!r} already served by {ADAPTERS[name].__name__}")
            ADAPTERS[name] = cls
        cls.output = output
        return cls
    return register


def adapter_outputs():
    """The ``span-predict`` output of every registered adapter, each once, in
    registration order."""
    return list({id(cls.output): cls.output for cls in ADAPTERS.values()
                 if cls.output is not None}.values())


# Span items LongTensor [n_i, 2] -> [B, S, 2], padded with (0, 0) rows (empty spans).
collate_spans = LayoutSpansDataset([TensorListDataset()], [np.zeros(0)]).collater


class CheckpointMismatchError(ValueError):
    """A checkpoint whose ``model`` tensors do not fit the model its cfg builds: names
    missing, unexpected or of another shape (``Module.load_state_dict``'s RuntimeError)."""


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


def flat_offsets(spans):
    """``[(start, end)]`` -> LongTensor ``[2 n]``, the item layout of span files (what
    :meth:`Layout.spans` reads)."""
    return torch.tensor([v for span in spans for v in span], dtype=torch.long)


class SpanHubInterface(nn.Module):
    """A fine-tuned model with its task, dictionaries and text encoder. Subclasses (the
    adapters) add the predictions of their task."""

    head_from_task = False  # True: the head is the one the task's config names, not ``head``
    output = None  # what span-predict writes for it (set by register_adapter)

    def __init__(self, task, model, encoder, head="sentence_classification_head"):
        super().__init__()
        from fairseq.models.roberta import RobertaModel

        if not isinstance(model, RobertaModel):
            raise ValueError(
                f"checkpoint holds a {type(model).__name__} ({_arch(model)}), not a "
                f"RoBERTa-family model (--arch roberta_span_* or roberta_*)"
            )
        if head not in model.classification_heads:
            raise ValueError(
                f"checkpoint has no classification head {head!r}; it has "
                f"{list(model.classification_heads)}"
            )
        self.task = task
        self.model = model.eval()
        self.encoder = encoder
        self.head = head
        # A span head declares the spans among its inputs (roberta_span); fairseq's heads read none.
        self.reads_spans = "spans" in head_inputs(model.classification_heads[head])
        self.record = data_record.task_record(task)  # how its training data was made
        self.data = getattr(task.cfg, "data", None)
        self.num_inputs = self.record["inputs"] if self.record else None  # None: not known

    @classmethod
    def from_pretrained(
        cls,
        checkpoint,
        data=None,
        bpe=None,
        ngrams=None,
        ngrams_top_k=None,
        segmentation=None,
        seed=None,
        head="sentence_classification_head",
        **encoder_files,
    ):
        """Load ``checkpoint`` (a fine-tuned checkpoint_*.pt) as the adapter of the task
        it was trained with. A folder of ``span-export hf`` is loaded without fairseq
        (:func:`span_plugin.portable.load_model`: the same predictions, from the folder
        alone; ``data`` only names a task folder whose splits span-predict reads).

        Every other argument defaults to what the checkpoint's data record says
        (:mod:`span_plugin.preprocess.records.encoder_settings`): ``data`` is the task folder it was
        trained on (its dict.txt files must have the recorded hashes); the encoder
        files (``encoder_files``: the files each registered tokenizer declares, by any
        of their keywords, e.g. ``gpt2_encoder_json=`` or ``encoder_json=``;
        ``wordpiece=`` is a tokenizer.json, vocab.txt or span-convert folder), the
        n-gram dictionary, its top-k, the segmentation and its seed. A file given
        again must have the recorded content; a setting given again must be the
        recorded one: a difference raises an error naming both. Checkpoints without a
        record take the settings given, unchecked. ``head``: the
        classification head of sentence checkpoints (the other tasks name their own).
        """
        from fairseq import checkpoint_utils

        if is_exported_folder(checkpoint):
            return _exported(checkpoint, data, head, bpe=bpe, ngrams=ngrams,
                             ngrams_top_k=ngrams_top_k, segmentation=segmentation, seed=seed,
                             **encoder_files)
        files = encoder_settings.given_files(encoder_files, "from_pretrained")  # names checked
        state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))
        cfg = state.get("cfg")
        task_cfg = cfg["task"] if cfg is not None else state["args"]
        task_name = _field(task_cfg, "_name") if cfg is not None else _field(task_cfg, "task")
        adapter = ADAPTERS.get(task_name)
        if adapter is None:
            model_cfg = cfg["model"] if cfg is not None else state.get("args")
            arch = _field(model_cfg, "arch") or _field(model_cfg, "_name")
            raise ValueError(
                f"{checkpoint}: trained with task {task_name!r} and model {arch!r}; "
                f"SpanHubInterface loads checkpoints fine-tuned with task "
                f"{' or '.join(ADAPTERS)}"
            )
        record = data_record.checkpoint_record(state)
        data = _data_folder(data, _field(task_cfg, "data"), record, checkpoint, task_name)
        # fairseq applies overrides only when it reads the file itself, not to a state
        # handed to load_model_ensemble_and_task: apply them here.
        overrides = {"load_checkpoint_heads": True, "data": data}
        if cfg is not None:
            overwrite_args_by_name(cfg, overrides)
        else:
            for k, v in overrides.items():
                setattr(state["args"], k, v)
        given = dict(bpe=bpe, ngrams=ngrams, ngrams_top_k=ngrams_top_k,
                     segmentation=segmentation, seed=seed, **files)
        spec = encoder_settings.encoder_spec(
            record, {k: (str(v) if isinstance(v, os.PathLike) else v) for k, v in given.items()},
            checkpoint)
        try:
            models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
                [str(checkpoint)], arg_overrides=overrides, state=state
            )
        except RuntimeError as err:
            mismatch = weights_mismatch(err)
            if mismatch is None:
                raise
            raise CheckpointMismatchError(
                f"{checkpoint}: its weights do not fit the model its cfg describes "
                f"({mismatch}): the checkpoint does not fit this model/task; it was changed "
                f"after fairseq saved it or saved for another architecture") from err
        if adapter.head_from_task:
            head = task.cfg.classification_head_name
        hub = adapter(task, models[0], spec.build(), head=head)
        hub.record = record
        hub.num_inputs = record["inputs"] if record else (
            2 if os.path.isdir(os.path.join(data, "input1")) else 1)
        return hub

    @property
    def device(self):
        return next(self.model.parameters()).device

    @property
    def regression(self):
        return bool(self.task.cfg.regression_target)

    @property
    def labels(self):
        """Label names in output order (classification)."""
        d = self.task.label_dictionary
        return [d[i + d.nspecial] for i in range(self.task.cfg.num_classes)]

    def tokens_of(self, symbols):
        """Encoder symbols -> LongTensor ``[len + 1]`` of dictionary ids, ``</s>`` last
        (as fairseq-preprocess binarizes a line)."""
        return self.task.source_dictionary.encode_line(
            " ".join(symbols), append_eos=True, add_if_not_exist=False).long()

    def lay_out(self, inputs, shorten):
        """The training layout (``<s> A </s> [</s> B </s>]``) of token items: ``inputs``
        is one :class:`TensorListDataset` per input; ``shorten`` "none" or "truncate"
        (to the task's positions). Returns a :class:`span_plugin.data.layout.Layout`."""
        cfg = self.task.cfg
        return lay_out(inputs, init_token=cfg.init_token,
                       separator_token=getattr(cfg, "separator_token", None),
                       shorten=shorten, max_len=self.task.max_positions())

    def forward_batch(self, tokens, **side):
        """Run the head on token items (LongTensor ``[T_i]`` each, right-padded here to
        ``[B, T]``) and collated side inputs (``spans=[B, S, 2]``, ...); returns the
        head's output."""
        pad = self.task.source_dictionary.pad()
        side = {name: x.to(self.device) for name, x in side.items()}
        out, _ = self.model(data_utils.collate_tokens(tokens, pad).to(self.device),
                            classification_head_name=self.head, **side)
        return finite_outputs(out, self.head)


def is_exported_folder(path):
    """Whether ``path`` is a model folder of ``span-export hf`` (it lists its files in
    ``files.json``)."""
    from span_plugin.portable import is_exported_folder as exported

    return exported(path)


def _exported(folder, data, head, **given):
    """The predictor of an exported folder (:func:`span_plugin.portable.exported_predictor`)."""
    from span_plugin.portable import exported_predictor

    return exported_predictor(folder, data, head, **given)


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


def _arch(model):
    args = getattr(model, "args", None)
    return getattr(args, "arch", None) or getattr(args, "_name", None) or "unknown arch"
