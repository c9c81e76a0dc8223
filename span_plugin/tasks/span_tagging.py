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

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from fairseq.data import data_utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING

from span_plugin.data import span_index
from span_plugin.data.layout import check_label_count, lay_out
from span_plugin.data.tagging_datasets import EntitySpansDataset, WordTagsDataset
from span_plugin.formats import tags as T
from span_plugin.models.heads import chosen_kind, head_choices
from span_plugin.modules.tag_decoding import TOKEN_DECODINGS
from span_plugin.preprocess.folders.conll import LABEL_DIR, WORDS_DIR, read_tag_names
from span_plugin.tasks.span_inputs import OneDictionaryTask, SpanInputsTask, length_multiple, length_multiple_field

logger = logging.getLogger(__name__)


@dataclass
class SpanTaggingConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "tagging folder (span-preprocess conll)"})
    init_token: Optional[int] = field(default=0, metadata={"help": "token prepended to every item"})
    max_positions: int = field(default=512, metadata={"help": "the model's positions"})
    tagging_head: ChoiceEnum(head_choices("--tagging-head")) = field(
        default="sf", metadata={"help": "token: a linear layer per token (baseline); sf: the "
                                "token-level Span Fine-tuning head (within-span CNN joined "
                                "with the token features)"})
    classification_head_name: str = field(default="tagging_head")
    metric_mode: ChoiceEnum(["default", "strict"]) = field(
        default="default", metadata={"help": "how entity P/R/F1 read entities from tags: "
                                     "default: conlleval's chunking (seqeval's default mode; "
                                     "an I-X after O starts an entity); strict: seqeval's "
                                     "strict IOB2 mode (only a B-X I-X* sequence is one)"})
    token_decoding: ChoiceEnum(list(TOKEN_DECODINGS)) = field(
        default="viterbi", metadata={"help": "tagging heads: how word tags are read from the "
                                     "head's scores on validation, in span-predict and the "
                                     "hub: viterbi: the best well-formed IOB2 sequence (I-X "
                                     "only after B-X or I-X); argmax: each word's best tag "
                                     "(may be ill-formed). span_labeling ignores it"})
    length_multiple: int = length_multiple_field()
    no_shuffle: bool = False
    seed: int = II("common.seed")


@register_task("span_tagging", dataclass=SpanTaggingConfig)
class SpanTaggingTask(SpanInputsTask, OneDictionaryTask, FairseqTask):
    """Word tagging (NER as IOB2 tags) read at each word's first sub-token."""

    model_inputs = "spans and words"
    task_name = "span_tagging"
    folder_command = "span-preprocess conll"
    model_archs = "roberta_tagging, roberta_tagging_base/large"

    def __init__(self, cfg, dictionary, tag_names):
        self.dictionary = dictionary  # before the data record is checked against it
        self.tag_names = tag_names
        self.entity_types = T.types_of(tag_names)
        super().__init__(cfg)

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
        """Tokens, n-gram spans, word spans and tags of a split, checked against each
        other and against ``--max-positions``."""
        data = self.cfg.data
        prefix = os.path.join(data, "input0", split)
        tokens, spans = self.load_input("input0", split)
        if tokens is None:
            raise FileNotFoundError(f"could not find dataset: {prefix}")
        lengths = np.asarray(tokens.sizes) - 1  # fairseq-preprocess appends </s>
        words_prefix = os.path.join(data, WORDS_DIR, split)
        words = span_index.load_spans(words_prefix)
        span_index.check_alignment(words_prefix, words, lengths)
        label_prefix = os.path.join(data, LABEL_DIR, split)
        labels = data_utils.load_indexed_dataset(label_prefix, None, dataset_impl="mmap")
        check_label_count(labels, f"{label_prefix}.bin", len(tokens), f"{prefix}.bin")
        word_counts = np.asarray(words.sizes) // 2
        bad = np.flatnonzero(np.asarray(labels.sizes) != word_counts)
        if bad.size:
            raise ValueError(f"{label_prefix}.bin: line {bad[0] + 1} has {labels.sizes[bad[0]]} "
                             f"tags for {word_counts[bad[0]]} words; rebuild the folder")
        too_long = np.flatnonzero(lengths + 1 + int(self.cfg.init_token is not None)
                                  > self.cfg.max_positions)
        if too_long.size:
            i = int(too_long[0])
            raise ValueError(
                f"{prefix}.bin: line {i + 1} has {lengths[i]} tokens, more than "
                f"--max-positions {self.cfg.max_positions} holds with <s> and </s>; rebuild "
                f"with span-preprocess conll --max-tokens {self.cfg.max_positions - 2}")
        return tokens, spans, words, labels

    def build_split(self, split, combine):
        cfg = self.cfg
        tokens, spans, words, labels = self._load_split(split)
        layout = lay_out([tokens], cfg.init_token)
        return layout.dataset(
            self.dictionary.pad(),
            net_input={"spans": layout.spans([spans]), "words": layout.spans([words])},
            targets={"target": WordTagsDataset(labels), **self.extra_targets(labels)},
            shuffle_seed=None if cfg.no_shuffle else cfg.seed, length_multiple=length_multiple(cfg),
        )

    def extra_targets(self, labels):
        """Targets of a subclass beside the tags (span_labeling: entities)."""
        return {}

    def chosen_head(self, model_args):
        """The ``--tagging-head``."""
        return (chosen_kind("--tagging-head", str(self.cfg.tagging_head)),
                {"num_classes": self.num_labels})


@dataclass
class SpanLabelingConfig(SpanTaggingConfig):
    max_span_words: int = field(default=8, metadata={"help": "L: candidate spans of 1..L words"})
    negative_sampling: float = field(
        default=0.0, metadata={"help": "0: train on every candidate span; r > 0: on the gold "
                               "entities and, per sentence, round(r * words) random non-entity "
                               "spans (drawn anew every update)"})


@register_task("span_labeling", dataclass=SpanLabelingConfig)
class SpanLabelingTask(SpanTaggingTask):
    """Every span of up to L words labelled with an entity type or none; decoding for the
    metric keeps the best non-overlapping spans (CoNLL is flat; span-predict and the hub
    can also output nested spans)."""

    task_name = "span_labeling"

    def extra_targets(self, labels):
        return {"entities": EntitySpansDataset(labels, self.tag_names)}

    def chosen_head(self, model_args):
        return "span", {"num_classes": 1 + len(self.entity_types),
                        "max_words": self.cfg.max_span_words}
