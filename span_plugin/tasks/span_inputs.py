"""What the span tasks share: reading an input's token files (all shards of a split)
with their span files, the data record of the folder (checked when loading, saved in
checkpoints), sentence labels as ``sentence_prediction`` reads them, and building a
model that reads what the task gives it, with the head the task chooses.

The input layout itself (``<s> A </s> </s> B </s>``, shortening, span offsets) is
:func:`span_plugin.data.layout.lay_out`.
"""

import contextlib
import dataclasses
import itertools
import logging
import os

import numpy as np
from fairseq.data import (
    ConcatDataset,
    OffsetTokensDataset,
    RawLabelDataset,
    StripTokenDataset,
    data_utils,
)
from fairseq.tasks.sentence_prediction import SentencePredictionTask
from omegaconf import OmegaConf, open_dict

from span_plugin.data import span_index
from span_plugin.data.layout import check_label_count
from span_plugin.preprocess.records import provenance
from span_plugin.runtime import data_record, training_guard

logger = logging.getLogger(__name__)


def length_multiple_field():
    """The ``--length-multiple`` option of the fine-tuning tasks' configs."""
    return dataclasses.field(default=1, metadata={
        "help": "pad every batch's token axis to a multiple of this (1: to its longest "
        "item, as fairseq does); with --compile, 64 keeps the number of compiled graphs "
        "to one per multiple up to --max-positions"})


def length_multiple(cfg):
    """``cfg.length_multiple``; 1 for a config written before the option existed (an
    older checkpoint's task config)."""
    return getattr(cfg, "length_multiple", None) or 1


class SpanInputsTask:
    """Mixin, first base of a span task (before the fairseq task it extends).

    The folder's record of how it was made (``DATA/provenance.json``) is checked
    against the dictionaries and stored in the task state (fairseq saves it in every
    checkpoint); every file of the folder is checked against it when a split loads.
    A task sets ``task_name`` (its registered name), ``folder_command`` (the command
    that builds its folders) and ``model_archs`` (the ``--arch`` names that fit it), for
    messages, and implements ``build_split(split, combine) -> dataset`` and
    ``chosen_head(model_args) -> (head kind, options)``: the head :meth:`build_model`
    registers under ``--classification-head-name`` (kinds: ``models/heads.py``).
    """

    task_name = None
    model_inputs = "spans"  # what its batches give the model besides tokens (for errors)
    folder_command = "span-preprocess glue"  # what builds the task's folders
    model_archs = "roberta_span_base, roberta_span_large, ..."  # for errors

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        data_record.attach(self)

    def load_dataset(self, split, combine=False, **kwargs):
        """Load a split; raises if a file is missing or does not fit its tokens, or a
        setting does not fit the folder (:meth:`check_settings`)."""
        provenance.verify_folder(self.cfg.data)
        self.check_settings()
        dataset = self.build_split(split, combine)
        logger.info(f"Loaded {split} with #samples: {len(dataset)}")
        self.datasets[split] = dataset
        return dataset

    def check_settings(self):
        """Settings given by hand that the folder contradicts: refused before a split is
        built (in fairseq-train: one line, exit 2)."""

    def load_tokens(self, key, split, combine=False):
        """Token files of input ``key`` (``DATA/key/split``, shards split1, split2, ...
        when ``combine``), concatenated; each item a sentence's tokens + ``</s>``.
        Returns ``(dataset, [prefix of each shard])``, ``(None, [])`` when there is none."""
        tokens, prefixes = [], []
        for k in itertools.count():
            prefix = os.path.join(self.cfg.data, key, split + (str(k) if k > 0 else ""))
            toks = data_utils.load_indexed_dataset(prefix, self.source_dictionary)
            if toks is None:
                break
            tokens.append(toks)
            prefixes.append(prefix)
            if not combine:
                break
        return _concat(tokens), prefixes

    def load_input(self, key, split, combine=False):
        """Tokens and n-gram spans of one input (all shards of the split when
        ``combine``).

        Returns ``(tokens, spans)``, or ``(None, None)`` when the input does not exist
        (``input1`` of a single-sentence task). Span files are checked against the
        tokens here, before any training starts.
        """
        tokens, prefixes = self.load_tokens(key, split, combine)
        if tokens is None:
            return None, None
        spans = []
        shards = tokens.datasets if isinstance(tokens, ConcatDataset) else [tokens]
        for prefix, toks in zip(prefixes, shards):
            sprefix = span_index.span_prefix(prefix)
            if not span_index.exists(sprefix):
                raise FileNotFoundError(
                    f"{sprefix}.{{bin,idx}} not found: task {self.task_name} needs a "
                    f"span index beside every token file. Build the data folder with "
                    f"`{self.folder_command}` (docs/PREPROCESS.md), or write one with "
                    f"span_plugin.preprocess.binary.span_files.SpanIndexWriter (docs/DATA.md)"
                )
            spn = span_index.load_spans(sprefix)
            # fairseq-preprocess appends </s>: a sentence's own length is size - 1.
            span_index.check_alignment(sprefix, spn, np.asarray(toks.sizes) - 1)
            spans.append(spn)
        return tokens, _concat(spans)

    def build_model(self, cfg, from_checkpoint=False):
        """The span model with the task's head (:meth:`chosen_head`)."""
        model = self.build_model_of(cfg, from_checkpoint)
        kind, options = self.chosen_head(model.args)
        model.register_head(self.cfg.classification_head_name, kind, **options)
        return model

    def chosen_head(self, model_args):
        """``(kind, options)`` of the task's head: a kind of ``models/heads.py`` and the
        options its builder takes; ``model_args`` for a choice made by a model option
        (``--sentence-head``)."""
        raise NotImplementedError(f"task {self.task_name} names no head (chosen_head)")

    def build_model_of(self, cfg, from_checkpoint):
        """fairseq's model of ``cfg`` with the task's ``max_positions``; raises unless it
        is the span model (another model would silently ignore the ``model_inputs`` the
        task gives it)."""
        from fairseq import models

        from span_plugin.models.roberta_span import RobertaSpanModel

        with open_dict(cfg) if OmegaConf.is_config(cfg) else contextlib.ExitStack():
            cfg.max_positions = self.cfg.max_positions
        model = models.build_model(cfg, self, from_checkpoint)
        if not isinstance(model, RobertaSpanModel):
            raise ValueError(
                f"task {self.task_name} needs a model that reads {self.model_inputs} (--arch "
                f"{self.model_archs}); got {type(model).__name__}, which would silently ignore them"
            )
        if model.args.compile and not from_checkpoint:  # fairseq-train, not the hub or span-predict
            model.compile_for_training()
        return model


class OneDictionaryTask:
    """Mixin of the tasks with one dictionary (``self.dictionary``) for inputs and
    targets, and ``--max-positions`` in their config."""

    def max_positions(self):
        return self.cfg.max_positions

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary


class SentenceSpanTask(SpanInputsTask, SentencePredictionTask):
    """Base of the span tasks on sentence_prediction folders (``input0``, ``input1``,
    ``label``): its dictionaries, ``num_classes``, ``init_token``/``separator_token``,
    shortening options and sentence labels; encoder-only inputs."""

    def __init__(self, cfg, data_dictionary, label_dictionary):
        if cfg.d2v2_multi or cfg.add_prev_output_tokens:
            raise ValueError(
                f"{self.task_name} does not support --d2v2-multi or "
                f"--add-prev-output-tokens (encoder-only RoBERTa inputs only)"
            )
        super().__init__(cfg, data_dictionary, label_dictionary)

    def check_settings(self):
        """``--num-classes`` against the label dictionary: a count given by hand that is
        not its number of labels would fail mid-training (a class id past the head's
        outputs: an IndexError) or train outputs no label names."""
        d, cfg = self.label_dictionary, self.cfg
        if d is None or cfg.regression_target or not self.uses_label_classes():
            return
        names = [s for s in d.symbols[d.nspecial:] if not s.startswith("madeupword")]
        if names[-1:] == ["<mask>"]:  # sentence_prediction adds it to every dictionary it loads
            names.pop()
        if cfg.num_classes != len(names):
            path = os.path.join(cfg.data, "label", "dict.txt")
            training_guard.refuse(
                f"--num-classes {cfg.num_classes}, but the label dictionary {path} holds "
                f"{len(names)} labels ({', '.join(names[:8])}{' ...' if len(names) > 8 else ''})"
                f": give --num-classes {len(names)}")

    def uses_label_classes(self):
        """Whether ``--num-classes`` counts the label dictionary's classes (it does when
        the task trains sentence labels)."""
        return True

    def sentence_targets(self, split, examples):
        """``{"target": labels}`` of the split (one per example, checked), or ``{}``
        when it has none or the folder has no label dictionary (phrasal-only)."""
        if not self.cfg.regression_target and self.label_dictionary is None:
            return {}
        labels = self.load_sentence_labels(split)
        if labels is None:
            return {}
        check_label_count(labels, os.path.join(self.cfg.data, "label", split), examples,
                          os.path.join(self.cfg.data, "input0", split))
        return {"target": labels}

    def load_sentence_labels(self, split):
        """Labels of ``DATA/label/split`` as sentence_prediction reads them (class ids,
        or ``num_classes`` floats per line with ``--regression-target``); None when the
        split has none."""
        prefix = os.path.join(self.cfg.data, "label", split)
        if not self.cfg.regression_target:
            labels = data_utils.load_indexed_dataset(prefix, self.label_dictionary)
            if labels is None:
                return None
            return OffsetTokensDataset(
                StripTokenDataset(labels, id_to_strip=self.label_dictionary.eos()),
                offset=-self.label_dictionary.nspecial,
            )
        path = prefix + ".label"
        if not os.path.exists(path):
            return None
        values = []
        with open(path) as h:
            for i, line in enumerate(h):
                fields = line.split()
                if len(fields) != self.cfg.num_classes:
                    raise ValueError(
                        f"{path}: line {i + 1} has {len(fields)} values, expected "
                        f"num_classes={self.cfg.num_classes}"
                    )
                values.append([float(x) for x in fields])
        return RawLabelDataset(values)


def _concat(datasets):
    if not datasets:
        return None
    return datasets[0] if len(datasets) == 1 else ConcatDataset(datasets)
