"""Task ``span_classification``: fairseq's ``sentence_prediction`` plus span files.

Everything ``sentence_prediction`` reads (``DATA/input0``, ``DATA/input1`` for pairs,
``DATA/label``) is read the same way; each input also has its span index
(``DATA/input0/{split}.spans.{bin,idx}``, see docs/DATA.md). The spans of an example
reach the model as ``net_input["spans"]``: LongTensor ``[B, S, 2]`` of positions in
``src_tokens``. The folder's data record (``DATA/provenance.json``,
:mod:`span_plugin.preprocess.provenance`) is checked and saved in checkpoints. See
docs/TASK_MODEL.md for the options and rules.
"""

import contextlib
import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from fairseq.data import (
    ConcatDataset,
    ConcatSentencesDataset,
    IdDataset,
    NestedDictionaryDataset,
    NumelDataset,
    NumSamplesDataset,
    OffsetTokensDataset,
    PrependTokenDataset,
    RawLabelDataset,
    RightPadDataset,
    SortDataset,
    StripTokenDataset,
    data_utils,
)
from fairseq.tasks import register_task
from fairseq.tasks.sentence_prediction import SentencePredictionConfig, SentencePredictionTask
from omegaconf import OmegaConf, open_dict

from span_plugin.preprocess import provenance
from span_plugin.data import span_index
from span_plugin.data.span_datasets import CropWindowDataset, LayoutSpansDataset, layout_starts

logger = logging.getLogger(__name__)


@dataclass
class SpanClassificationConfig(SentencePredictionConfig):
    max_spans: Optional[int] = field(
        default=None,
        metadata={
            "help": "r: keep at most this many spans per example, the first ones in "
            "order (after shortening); None or 0 keeps all"
        },
    )
    max_span_tokens: Optional[int] = field(
        default=None,
        metadata={
            "help": "l: keep at most this many tokens of each span, its first ones; "
            "None or 0 keeps all"
        },
    )


@register_task("span_classification", dataclass=SpanClassificationConfig)
class SpanClassificationTask(SentencePredictionTask):
    """Sentence (pair) classification or regression with n-gram spans.

    Dictionaries, ``num_classes``, ``init_token``/``separator_token``, shortening,
    shuffling and labels behave as in ``sentence_prediction``; the model must take
    ``spans`` in its forward (architectures of ``roberta_span``).
    """

    def __init__(self, cfg, data_dictionary, label_dictionary):
        super().__init__(cfg, data_dictionary, label_dictionary)
        if cfg.d2v2_multi or cfg.add_prev_output_tokens:
            raise ValueError(
                "span_classification does not support --d2v2-multi or "
                "--add-prev-output-tokens (encoder-only RoBERTa inputs only)"
            )
        # The folder's record of how it was made: checked against the dictionaries
        # here, stored in the task state (fairseq saves it in every checkpoint).
        provenance.attach(self)

    def _load_input(self, key, split, combine):
        """Tokens and spans of one input (all shards of the split).

        Returns ``(tokens, spans)``, or ``(None, None)`` when the input does not
        exist (``input1`` of a single-sentence task). Span files are checked against
        the tokens here, before any training starts.
        """
        tokens, spans = [], []
        for k in itertools.count():
            prefix = os.path.join(self.cfg.data, key, split + (str(k) if k > 0 else ""))
            toks = data_utils.load_indexed_dataset(prefix, self.source_dictionary)
            if toks is None:
                break
            sprefix = span_index.span_prefix(prefix)
            if not span_index.exists(sprefix):
                raise FileNotFoundError(
                    f"{sprefix}.{{bin,idx}} not found: task span_classification needs a "
                    f"span index beside every token file. Build the data folder with "
                    f"`span-preprocess glue` (docs/PREPROCESS.md), or write one with "
                    f"span_plugin.data.span_index.SpanIndexWriter (docs/DATA.md)"
                )
            spn = span_index.load_spans(sprefix)
            # fairseq-preprocess appends </s>: a sentence's own length is size - 1.
            span_index.check_alignment(sprefix, spn, np.asarray(toks.sizes) - 1)
            tokens.append(toks)
            spans.append(spn)
            if not combine:
                break
        if not tokens:
            return None, None
        if len(tokens) == 1:
            return tokens[0], spans[0]
        return ConcatDataset(tokens), ConcatDataset(spans)

    def load_dataset(self, split, combine=False, **kwargs):
        """Load a split; raises if a span file is missing or does not fit its tokens."""
        cfg = self.cfg
        # Every file of the folder must be the one its record lists (once per process).
        provenance.verify_folder(cfg.data)
        input0, spans0 = self._load_input("input0", split, combine)
        if input0 is None:
            raise FileNotFoundError(
                f"could not find dataset: {os.path.join(cfg.data, 'input0', split)}"
            )
        input1, spans1 = self._load_input("input1", split, combine)

        sizes = [input0.sizes] + ([input1.sizes] if input1 is not None else [])
        starts = layout_starts(sizes, cfg.init_token, cfg.separator_token)
        span_sets = [spans0] + ([spans1] if input1 is not None else [])

        if cfg.init_token is not None:
            input0 = PrependTokenDataset(input0, cfg.init_token)
        if input1 is None:
            src_tokens = input0
        else:
            if cfg.separator_token is not None:
                input1 = PrependTokenDataset(input1, cfg.separator_token)
            src_tokens = ConcatSentencesDataset(input0, input1)

        with data_utils.numpy_seed(cfg.seed):
            shuffle = np.random.permutation(len(src_tokens))

        crop = None
        shorten_splits = cfg.shorten_data_split_list
        if cfg.shorten_method != "none" and (
            not shorten_splits or split in shorten_splits.split(",")
        ):
            crop = CropWindowDataset(
                src_tokens, self.max_positions(), mode=cfg.shorten_method, seed=cfg.seed
            )
            src_tokens = crop

        spans = LayoutSpansDataset(
            span_sets,
            starts,
            crop=crop,
            max_spans=cfg.max_spans,
            max_span_tokens=cfg.max_span_tokens,
        )

        dataset = {
            "id": IdDataset(),
            "net_input": {
                "src_tokens": RightPadDataset(src_tokens, pad_idx=self.source_dictionary.pad()),
                "src_lengths": NumelDataset(src_tokens, reduce=False),
                "spans": spans,
            },
            "nsentences": NumSamplesDataset(),
            "ntokens": NumelDataset(src_tokens, reduce=True),
        }
        target = self._load_target(split)
        if target is not None:
            if len(target) != len(src_tokens):
                raise ValueError(
                    f"{os.path.join(cfg.data, 'label', split)}: {len(target)} labels but "
                    f"{os.path.join(cfg.data, 'input0', split)} has {len(src_tokens)} "
                    f"sentences; rebuild the folder so every input has one label"
                )
            dataset["target"] = target

        dataset = NestedDictionaryDataset(dataset, sizes=[src_tokens.sizes])
        if not cfg.no_shuffle:
            dataset = SortDataset(dataset, sort_order=[shuffle])

        logger.info("Loaded {0} with #samples: {1}".format(split, len(dataset)))
        self.datasets[split] = dataset
        return dataset

    def _load_target(self, split):
        """Labels as sentence_prediction reads them; None when the split has none."""
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

    def build_model(self, cfg, from_checkpoint=False):
        from fairseq import models

        from span_plugin.models.roberta_span import RobertaSpanModel

        with open_dict(cfg) if OmegaConf.is_config(cfg) else contextlib.ExitStack():
            cfg.max_positions = self.cfg.max_positions
        model = models.build_model(cfg, self, from_checkpoint)
        if not isinstance(model, RobertaSpanModel):
            raise ValueError(
                f"task span_classification needs a model that reads spans (--arch "
                f"roberta_span_base, roberta_span_large, ...); got "
                f"{type(model).__name__}, which would silently ignore them"
            )
        model.register_classification_head(
            self.cfg.classification_head_name, num_classes=self.cfg.num_classes
        )
        return model
