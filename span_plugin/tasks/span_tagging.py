"""Tasks ``span_tagging`` (a label per word) and ``span_labeling`` (labelled spans of
words), on tagging folders made by ``span-preprocess conll`` (docs/NER.md).

One input, laid out as ``<s> tokens </s>`` (``--init-token 0``). ``net_input`` holds
``src_tokens``, ``spans`` (n-gram spans ``[B, S, 2]``, for the token-level SF head) and
``words`` (each word's token offsets ``[B, W, 2]``), all positions in ``src_tokens``.
Targets: ``target`` tag ids per word ``[B, W]`` (padding -100); ``span_labeling`` adds
``entities`` ``[B, E, 3]`` (first word, last word + 1, type; type 0 = none).
Items never exceed the model: ``span-preprocess conll --max-tokens`` cut long sentences
between words, and a folder with a longer item is refused when loaded.
"""

import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from fairseq.data import (
    IdDataset,
    NestedDictionaryDataset,
    NumelDataset,
    NumSamplesDataset,
    PrependTokenDataset,
    RightPadDataset,
    SortDataset,
    data_utils,
)
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING, OmegaConf, open_dict

from span_plugin.preprocess import provenance

from span_plugin.formats import tags as T
from span_plugin.data import span_index
from span_plugin.data.span_datasets import LayoutSpansDataset, layout_starts
from span_plugin.data.tagging_datasets import EntitySpansDataset, WordTagsDataset
from span_plugin.preprocess.conll import LABEL_DIR, WORDS_DIR, read_tag_names

logger = logging.getLogger(__name__)


@dataclass
class SpanTaggingConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "tagging folder (span-preprocess conll)"})
    init_token: Optional[int] = field(default=0, metadata={"help": "token prepended to every item"})
    max_positions: int = field(default=512, metadata={"help": "the model's positions"})
    tagging_head: ChoiceEnum(["token", "sf"]) = field(
        default="sf", metadata={"help": "token: a linear layer per token (baseline); sf: the "
                                "token-level Span Fine-tuning head (within-span CNN joined "
                                "with the token features)"})
    classification_head_name: str = field(default="tagging_head")
    no_shuffle: bool = False
    seed: int = II("common.seed")


@register_task("span_tagging", dataclass=SpanTaggingConfig)
class SpanTaggingTask(FairseqTask):
    """Word tagging (NER as IOB2 tags) read at each word's first sub-token."""

    head_kind = None  # from cfg.tagging_head

    def __init__(self, cfg, dictionary, tag_names):
        super().__init__(cfg)
        self.dictionary = dictionary
        self.tag_names = tag_names
        self.entity_types = T.types_of(tag_names)
        provenance.attach(self)

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        if not os.path.exists(os.path.join(cfg.data, LABEL_DIR, "tags.txt")):
            raise FileNotFoundError(
                f"{cfg.data}: not a tagging folder (no {LABEL_DIR}/tags.txt); build one with "
                f"`span-preprocess conll` (docs/NER.md)")
        dictionary = cls.load_dictionary(os.path.join(cfg.data, "input0", "dict.txt"))
        dictionary.add_symbol("<mask>")  # as sentence_prediction: embedding rows match
        return cls(cfg, dictionary, read_tag_names(cfg.data))

    @property
    def num_labels(self):
        return len(self.tag_names)

    def _load_split(self, split):
        data = self.cfg.data
        prefix = os.path.join(data, "input0", split)
        tokens = data_utils.load_indexed_dataset(prefix, self.dictionary)
        if tokens is None:
            raise FileNotFoundError(f"could not find dataset: {prefix}")
        lengths = np.asarray(tokens.sizes) - 1  # fairseq-preprocess appends </s>
        files = {}
        for name, spans_prefix in (("spans", span_index.span_prefix(prefix)),
                                   ("words", os.path.join(data, WORDS_DIR, split))):
            files[name] = span_index.load_spans(spans_prefix)
            span_index.check_alignment(spans_prefix, files[name], lengths)
        label_prefix = os.path.join(data, LABEL_DIR, split)
        labels = data_utils.load_indexed_dataset(label_prefix, None, dataset_impl="mmap")
        if labels is None or len(labels) != len(tokens):
            raise ValueError(f"{label_prefix}.bin: {0 if labels is None else len(labels)} items, "
                             f"but {prefix}.bin has {len(tokens)}; rebuild the folder")
        words = np.asarray(files["words"].sizes) // 2
        bad = np.flatnonzero(np.asarray(labels.sizes) != words)
        if bad.size:
            raise ValueError(f"{label_prefix}.bin: line {bad[0] + 1} has {labels.sizes[bad[0]]} "
                             f"tags for {words[bad[0]]} words; rebuild the folder")
        too_long = np.flatnonzero(lengths + 1 + int(self.cfg.init_token is not None)
                                  > self.cfg.max_positions)
        if too_long.size:
            i = int(too_long[0])
            raise ValueError(
                f"{prefix}.bin: line {i + 1} has {lengths[i]} tokens, more than "
                f"--max-positions {self.cfg.max_positions} holds with <s> and </s>; rebuild "
                f"with span-preprocess conll --max-tokens {self.cfg.max_positions - 2}")
        return tokens, files["spans"], files["words"], labels

    def load_dataset(self, split, combine=False, **kwargs):
        cfg = self.cfg
        provenance.verify_folder(cfg.data)
        tokens, spans, words, labels = self._load_split(split)
        starts = layout_starts([tokens.sizes], cfg.init_token, None)
        if cfg.init_token is not None:
            tokens = PrependTokenDataset(tokens, cfg.init_token)
        dataset = {
            "id": IdDataset(),
            "net_input": {
                "src_tokens": RightPadDataset(tokens, pad_idx=self.dictionary.pad()),
                "src_lengths": NumelDataset(tokens, reduce=False),
                "spans": LayoutSpansDataset([spans], starts),
                "words": LayoutSpansDataset([words], starts),
            },
            "target": WordTagsDataset(labels),
            "nsentences": NumSamplesDataset(),
            "ntokens": NumelDataset(tokens, reduce=True),
        }
        self._add_targets(dataset, labels)
        dataset = NestedDictionaryDataset(dataset, sizes=[tokens.sizes])
        if not cfg.no_shuffle:
            with data_utils.numpy_seed(cfg.seed):
                dataset = SortDataset(dataset, sort_order=[np.random.permutation(len(tokens))])
        logger.info(f"Loaded {split} with #samples: {len(dataset)}")
        self.datasets[split] = dataset
        return dataset

    def _add_targets(self, dataset, labels):
        """Extra targets of a subclass (span_labeling: entities)."""

    def head_options(self):
        return {"kind": self.cfg.tagging_head, "num_classes": self.num_labels}

    def build_model(self, cfg, from_checkpoint=False):
        from fairseq import models

        from span_plugin.models.roberta_tagging import RobertaTaggingModel

        with open_dict(cfg) if OmegaConf.is_config(cfg) else contextlib.ExitStack():
            cfg.max_positions = self.cfg.max_positions
        model = models.build_model(cfg, self, from_checkpoint)
        if not isinstance(model, RobertaTaggingModel):
            raise ValueError(f"task {self.cfg._name} needs --arch roberta_tagging (or "
                             f"roberta_tagging_base/large); got {type(model).__name__}")
        model.register_tagging_head(self.cfg.classification_head_name, **self.head_options())
        return model

    def max_positions(self):
        return self.cfg.max_positions

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary


@dataclass
class SpanLabelingConfig(SpanTaggingConfig):
    max_span_words: int = field(default=8, metadata={"help": "L: candidate spans of 1..L words"})
    negative_sampling: float = field(
        default=0.0, metadata={"help": "0: train on every candidate span; r > 0: on the gold "
                               "entities and, per sentence, round(r * words) random non-entity "
                               "spans (drawn anew every update)"})


@register_task("span_labeling", dataclass=SpanLabelingConfig)
class SpanLabelingTask(SpanTaggingTask):
    """Every span of up to L words labelled with an entity type or none; decoding keeps
    the best non-overlapping spans."""

    def _add_targets(self, dataset, labels):
        dataset["entities"] = EntitySpansDataset(labels, self.tag_names)

    def head_options(self):
        return {"kind": "span", "num_classes": 1 + len(self.entity_types),
                "max_words": self.cfg.max_span_words}
