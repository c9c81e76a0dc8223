"""Inference for ``span_tagging`` and ``span_labeling`` checkpoints on raw text.

    from span_plugin.inference.hub import SpanHubInterface
    hub = SpanHubInterface.from_pretrained("runs/ner/checkpoints/checkpoint_best.pt")
    hub.predict_entities("EU rejects German call to boycott British lamb.")
    # -> [{"text": "EU", "type": "ORG", "start": 0, "end": 2}, ...]   (end exclusive)

Decoding: a tagging checkpoint reads its tags by its ``--token-decoding`` (``viterbi``,
the best well-formed IOB2 sequence, unless trained with ``argmax``); ``token_decoding=``
overrides it. A span-labeling checkpoint gives the best non-overlapping entities
(``overlap="flat"``), or with ``overlap="nested"`` every span whose best type has
probability >= ``span_threshold`` (default 0.5), nested ones included and crossing ones
dropped in favour of the more probable (:mod:`span_plugin.modules.span_decoding`)::

    hub.predict_entities(text, overlap="nested", span_threshold=0.3)

``SpanHubInterface.from_pretrained`` returns a :class:`NerHubInterface` for these tasks
(encoder and data folder from the checkpoint's record, as for GLUE checkpoints).
Raw text is cut into CoNLL-like words (:data:`span_plugin.formats.text_inputs.WORD_RE`);
a list of words is encoded exactly as
``span-preprocess conll`` encodes a line of them, and cut between words when it is
longer than the model.
"""

import torch

from span_plugin.data.in_memory import TensorListDataset
from span_plugin.formats.text_inputs import WORD_RE, check_text, word_lists, words_of  # noqa: F401
from span_plugin.inference import conll_files
from span_plugin.inference.base import SpanHubInterface, collate_spans, register_adapter
from span_plugin.modules import entities as ner
from span_plugin.portable.ner import EntityPredictions, word_parts
from span_plugin.preprocess.folders.conll import word_token_counts


@register_adapter("span_tagging", "span_labeling", output=conll_files.OUTPUT)
class NerHubInterface(EntityPredictions, SpanHubInterface):
    """Entities from a fairseq checkpoint; ``decoding``, ``predict_words`` and
    ``predict_entities`` are :class:`span_plugin.portable.ner.EntityPredictions`'."""

    head_from_task = True

    @property
    def metric_mode(self):
        """How a tagging head's tags are read as entities (``--metric-mode``; older
        checkpoints: "default")."""
        return ner.task_setting(self.task.cfg, "metric_mode")

    @property
    def token_decoding(self):
        """How a tagging head's tags are read from its scores (``--token-decoding``)."""
        return ner.task_setting(self.task.cfg, "token_decoding")

    @property
    def kind(self):
        return self.task.cfg._name

    @property
    def tag_names(self):
        return self.task.tag_names

    @property
    def entity_types(self):
        return self.task.entity_types

    def _encode_words(self, words):
        """One item: ``(tokens [T], spans [S, 2], words [W, 2])``, positions in the
        task's layout (``<s>`` first)."""
        counts = word_token_counts(self.encoder, words, "input")
        symbols, spans = self.encoder.encode(" ".join(words))
        if len(symbols) != sum(counts):
            raise ValueError(f"{words[:8]}...: the encoder cuts the words apart differently "
                             f"from the line; cannot align them")
        layout = self.lay_out([TensorListDataset([self.tokens_of(symbols)])], "none")
        ends = torch.tensor(counts).cumsum(0)
        word_offsets = torch.stack([ends - torch.tensor(counts), ends], -1).view(-1)
        flat_spans = torch.tensor(spans, dtype=torch.long).view(-1)
        return (layout.tokens[0], layout.spans([TensorListDataset([flat_spans])])[0],
                layout.spans([TensorListDataset([word_offsets])])[0])

    def _parts(self, words):
        """Word ranges of a sentence that each fit the model."""
        return word_parts(self.encoder, words, self.task.cfg.max_positions)

    @staticmethod
    def _collate_rows(items):
        """Row items ``[n_i, 2]`` -> ``[B, S, 2]`` by the task's own collater."""
        return collate_spans(items)
