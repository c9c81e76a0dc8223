"""Named entities (``span_tagging``, ``span_labeling``): ``predict_entities``,
``predict_words`` and ``decoding``. Words are cut as ``span-preprocess conll`` cuts them,
a sentence longer than the model between words; the checkpoint's decoding unless another
is given.

    model.predict_entities("EU rejects German call to boycott British lamb.")
    # -> [{"text": "EU", "type": "ORG", "start": 0, "end": 2}, ...]   (end exclusive)

A tagging head reads its tags by its ``--token-decoding`` (``viterbi`` unless trained
with ``argmax``); a span-labeling head gives the best non-overlapping entities
(``overlap="flat"``), or with ``overlap="nested"`` every span whose best type has
probability >= ``span_threshold`` (:mod:`span_plugin.modules.span_decoding`)."""

import torch

from span_plugin.formats import tags as T
from span_plugin.formats.text_inputs import check_batch_size, check_text, word_lists, words_of
from span_plugin.modules import entities as ner
from span_plugin.portable.base import Predictor
from span_plugin.portable.batches import length_batches, pad_rows
from span_plugin.portable.results import decoding_settings
from span_plugin.preprocess.folders.conll import split_points, word_token_counts


class NerPredictor(Predictor):
    def decoding(self, token_decoding=None, overlap=None, span_threshold=None):
        """The model's decoding settings with the ones given: a dict with
        ``token_decoding`` (tagging) or ``overlap`` and ``span_threshold`` (span
        labeling); a setting of the other kind of head is an error
        (:func:`span_plugin.portable.results.decoding_settings`)."""
        return decoding_settings(self.kind, self.token_decoding, token_decoding, overlap,
                                 span_threshold)

    @torch.no_grad()
    def predict_words(self, sentences, batch_size=32, token_decoding=None, overlap=None,
                      span_threshold=None, order="length"):
        """Entities of word lists: ``[[(first word, last word + 1, type)]]``, decoded as
        :meth:`decoding` says (``overlap="nested"``: possibly nested). Items are batched
        by length (``order`` "length") or in input order ("file"); the entities of a
        sentence are in the order of its parts either way."""
        check_batch_size(batch_size)
        settings = self.decoding(token_decoding, overlap, span_threshold)
        sentences = word_lists(sentences)
        items, owner = [], []
        for n, words in enumerate(sentences):
            for a, b in self._parts(words) if words else []:
                items.append((a, self._encode_words(words[a:b])))
                owner.append(n)
        out = [[] for _ in sentences]
        found_by_item = [None] * len(items)
        for batch in length_batches([len(t) for _, (t, _, _) in items], batch_size, order):
            chunk = [items[i] for i in batch]
            words = pad_rows([w for _, (_, _, w) in chunk], 2).to(self.device)
            result = self.forward_batch([t for _, (t, _, _) in chunk], words=words,
                                        spans=pad_rows([s for _, (_, s, _) in chunk], 2))
            if self.kind == "span_labeling":
                found = ner.labeling_entities(*result, self.entity_types,
                                              settings["overlap"], settings["span_threshold"])
            else:
                found = ner.tagging_entities(result, words, self.tag_names, self.metric_mode,
                                             settings["token_decoding"])[1]
            for i, ents in zip(batch, found):
                found_by_item[i] = ents
        for (a, _), n, ents in zip(items, owner, found_by_item):
            out[n].extend((s + a, e + a, t) for s, e, t in ents)
        return out

    def predict_entities(self, text, **decoding):
        """Entities in raw text: ``[{"text", "type", "start", "end"}]``, character
        offsets into ``text`` (end exclusive), in order; ``decoding``: the keyword
        arguments of :meth:`decoding`."""
        found = words_of(check_text(text, "text"))
        ents = self.predict_words([[w for w, _, _ in found]], **decoding)[0]
        return [{"text": text[found[s][1]:found[e - 1][2]], "type": t,
                 "start": found[s][1], "end": found[e - 1][2]} for s, e, t in sorted(ents)]

    @property
    def kind(self):
        return self.folder.task

    @property
    def tag_names(self):
        return list(self.head_labels or [])

    @property
    def entity_types(self):
        """The entity types: a span-labeling head's classes after class 0 (no entity,
        ``"O"``), or the types of a tagging head's IOB2 tags."""
        names = self.tag_names
        if self.folder.heads[self.head]["kind"] == "span":
            return names[1:]
        return T.types_of(names)

    @property
    def metric_mode(self):
        return ner.task_setting(self.cfg, "metric_mode")

    @property
    def token_decoding(self):
        return ner.task_setting(self.cfg, "token_decoding")

    def _encode_words(self, words):
        """One item: ``(tokens [T], spans [S, 2], words [W, 2])`` in the layout."""
        counts = word_token_counts(self.encoder, words, "input")
        symbols, spans = self.encoder.encode(" ".join(words))
        if len(symbols) != sum(counts):
            raise ValueError(f"{words[:8]}...: the encoder cuts the words apart differently "
                             f"from the line; cannot align them")
        laid = self.lay_out([self.tokens_of(symbols)])
        ends = torch.tensor(counts).cumsum(0)
        word_offsets = torch.stack([ends - torch.tensor(counts), ends], -1).view(-1)
        return (laid.tokens, laid.spans([[v for s in spans for v in s]]),
                laid.spans([word_offsets]))

    def _parts(self, words):
        return word_parts(self.encoder, words, int(self.cfg.max_positions))


def word_parts(encoder, words, max_positions):
    """Word ranges ``[(a, b)]`` of a sentence that each fit ``max_positions`` with
    ``<s>`` and ``</s>``, cut as ``span-preprocess conll`` cuts a long sentence."""
    limit = max_positions - 2
    counts = word_token_counts(encoder, words, "input")
    if sum(counts) <= limit:
        return [(0, len(words))]
    bounds = split_points(counts, ["O"] * len(words), limit,
                          lambda k: word_token_counts(encoder, [words[k]], "input")[0])
    return list(zip(bounds[:-1], bounds[1:]))
