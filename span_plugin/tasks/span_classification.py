"""Task ``span_classification``: fairseq's ``sentence_prediction`` plus span files.

Everything ``sentence_prediction`` reads (``DATA/input0``, ``DATA/input1`` for pairs,
``DATA/label``) is read the same way; each input also has its span index
(``DATA/input0/{split}.spans.{bin,idx}``, see docs/DATA.md). The spans of an example
reach the model as ``net_input["spans"]``: LongTensor ``[B, S, 2]`` of positions in
``src_tokens``. The folder's data record (``DATA/provenance.json``,
:mod:`span_plugin.preprocess.records.provenance`) is checked and saved in checkpoints. See
docs/TASK_MODEL.md for the options and rules.
"""

import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq.tasks import register_task
from fairseq.tasks.sentence_prediction import SentencePredictionConfig

from span_plugin.data.layout import lay_out
from span_plugin.models.heads import chosen_kind
from span_plugin.tasks.span_inputs import SentenceSpanTask, length_multiple, length_multiple_field


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
    length_multiple: int = length_multiple_field()


@register_task("span_classification", dataclass=SpanClassificationConfig)
class SpanClassificationTask(SentenceSpanTask):
    """Sentence (pair) classification or regression with n-gram spans.

    Dictionaries, ``num_classes``, ``init_token``/``separator_token``, shortening,
    shuffling and labels behave as in ``sentence_prediction``; the model must take
    ``spans`` in its forward (architectures of ``roberta_span``).
    """

    task_name = "span_classification"

    def build_split(self, split, combine):
        cfg = self.cfg
        input0, spans0 = self.load_input("input0", split, combine)
        if input0 is None:
            raise FileNotFoundError(
                f"could not find dataset: {os.path.join(cfg.data, 'input0', split)}"
            )
        input1, spans1 = self.load_input("input1", split, combine)
        inputs = [input0] + ([input1] if input1 is not None else [])
        span_sets = [spans0] + ([spans1] if input1 is not None else [])

        shorten_splits = cfg.shorten_data_split_list
        shortened = not shorten_splits or split in shorten_splits.split(",")
        layout = lay_out(
            inputs, cfg.init_token, cfg.separator_token,
            shorten=cfg.shorten_method if shortened else "none",
            max_len=self.max_positions(), seed=cfg.seed,
        )
        spans = layout.spans(span_sets, max_spans=cfg.max_spans, max_span_tokens=cfg.max_span_tokens)
        return layout.dataset(
            self.source_dictionary.pad(), net_input=self.side_inputs(layout, spans),
            targets=self.sentence_targets(split, len(input0)),
            shuffle_seed=None if cfg.no_shuffle else cfg.seed, length_multiple=length_multiple(cfg),
        )

    def side_inputs(self, layout, spans):
        """The datasets of ``net_input`` besides the tokens, by name: ``spans``. A head
        reading another input gets it here, from the split's ``layout``
        (:class:`span_plugin.data.layout.Layout`) and its laid-out ``spans``."""
        return {"spans": spans}

    def chosen_head(self, model_args):
        """The ``--sentence-head`` (a model option: fairseq's ``sentence_prediction``
        builds the same one through ``register_classification_head``)."""
        return (chosen_kind("--sentence-head", model_args.sentence_head),
                {"num_classes": self.cfg.num_classes})
