"""Extractive QA (``span_qa``): ``predict_answers`` and ``predict_examples``, by the code
of training: the windows of ``passage_windows`` with the folder's window size and stride
(from the data record), each ``<s> Q </s> </s> P </s>``, all windows of a question in one
batch (``batch_size`` counts questions), and the decoder of the validation metrics at the
answer boundaries the checkpoint records (``answer_boundaries=`` decodes otherwise).

    model.predict_answers([("Who wrote it?", "It was written by Ann Lee in 1990.")])
    # -> [{"text": "Ann Lee", "start": 18, "end": 25, "score": ..., "null_margin": ...,
    #      "nbest": [...]}]      (character offsets into the context, end exclusive)
"""

import torch

from span_plugin.formats.squad import QAExample
from span_plugin.formats.text_inputs import check_batch_size, question_pairs
from span_plugin.modules.qa_decoding import answers_of_batch
from span_plugin.portable.base import Predictor
from span_plugin.portable.batches import length_order, pad_rows, pad_tokens, unpermuted
from span_plugin.preprocess.folders.qa import encode_question, passage_windows, spans_in_window

LEGACY_BOUNDARIES = "token"  # a checkpoint made before --answer-boundaries decoded so


def question_windows(encoder, example, n, positions, stride):
    """``(encoded question, [(a, b)] context token ranges of its windows)`` of the
    ``n``-th ``QAExample``, as ``span-preprocess qa`` cuts them; a question that leaves
    no room is a ValueError naming it."""
    try:
        enc = encode_question(encoder, example.question, example.context)
        return enc, passage_windows(len(enc.context), len(enc.question), positions, stride)
    except ValueError as err:
        raise ValueError(f"{example.where or 'pair'} {n + 1} ({example.id}): {err}") from None


class QAPredictor(Predictor):
    @property
    def qa_labels(self):
        return (self.record or {}).get("labels") or {}

    @property
    def window_settings(self):
        """``(max_positions, doc_stride)`` of the training folder's windows."""
        labels = self.qa_labels
        return (labels.get("max_positions") or int(self.cfg.max_positions),
                labels.get("doc_stride", 128))

    @property
    def squad_v2(self):
        return "2.0" in set((self.qa_labels.get("versions") or {}).values())

    @property
    def answer_boundaries(self):
        return str(getattr(self.cfg, "answer_boundaries", None) or LEGACY_BOUNDARIES)

    def windows(self, examples):
        """``[(question index, tokens [T], passage (p0, p1), offsets [P, 2], spans [n,
        2])]``, every window of every example in order."""
        positions, stride = self.window_settings
        bos, eos = 0, 2  # fairseq's <s> and </s>: the QA layout's init and separator
        out = []
        for n, ex in enumerate(examples):
            enc, cuts = question_windows(self.encoder, ex, n, positions, stride)
            q_ids = self.tokens_of(enc.question)
            q_spans = [v for s in enc.question_spans for v in s]
            for a, b in cuts:
                laid = self.lay_out([q_ids, self.tokens_of(enc.context[a:b])],
                                    init_token=bos, separator_token=eos)
                p_spans = [v for s in spans_in_window(enc.context_spans, a, b) for v in s]
                p0 = laid.starts[1]
                out.append((n, laid.tokens, (p0, p0 + b - a),
                            torch.tensor(enc.offsets[a:b], dtype=torch.long).view(-1, 2),
                            laid.spans([q_spans, p_spans])))
        return out

    def batch_outputs(self, examples, batch_size=16):
        """``(question of each window [N], offsets [N, T, 2], head output)`` of each
        batch of ``batch_size`` questions, in order."""
        check_batch_size(batch_size)
        batches = {}
        for w in self.windows(examples):
            batches.setdefault(w[0] // batch_size, []).append(w)
        for k in range(0, len(examples), batch_size):
            chunk = batches[k // batch_size]
            tokens = pad_tokens([w[1] for w in chunk], self.vocab.pad)
            offsets = torch.full((*tokens.shape, 2), -1, dtype=torch.long)
            for i, (_, _, (p0, p1), offs, _) in enumerate(chunk):
                offsets[i, p0:p1] = offs
            output = self.forward_batch(
                [w[1] for w in chunk], passage=torch.tensor([w[2] for w in chunk]),
                spans=pad_rows([w[4] for w in chunk], 2))
            yield torch.tensor([w[0] - k for w in chunk]), offsets, output

    def predict_examples(self, examples, n_best=20, null_threshold="default", batch_size=16,
                         answer_boundaries=None, order="length"):
        """Answers of ``QAExample`` items, in order (dicts as :meth:`predict_answers`).

        null_threshold: "default" = the task's threshold for SQuAD 2.0 models, None
        (never "") otherwise; None or a number overrides it. answer_boundaries: None =
        the checkpoint's; "word" or "token" overrides it. order: "length" (questions of
        like length batched together) or "file"; answers are in input order either way.
        """
        check_batch_size(batch_size)
        if null_threshold == "default":
            null_threshold = float(self.cfg.null_threshold) if self.squad_v2 else None
        boundaries = answer_boundaries or self.answer_boundaries
        # Questions of like length share batches (``order`` "length"), answered in input order.
        permutation = length_order([len(ex.question) + len(ex.context) for ex in examples],
                                   order)
        examples = [examples[i] for i in permutation]
        out = []
        for k, (question, offsets, output) in zip(range(0, len(examples), batch_size),
                                                  self.batch_outputs(examples, batch_size)):
            contexts = [ex.context for ex in examples[k:k + batch_size]]
            out.extend(answers_of_batch(output, question, offsets, contexts, n_best,
                                        null_threshold, boundaries))
        return unpermuted(permutation, out)

    def predict_answers(self, pairs, n_best=20, null_threshold="default", batch_size=16,
                        answer_boundaries=None):
        """Answers of raw ``(question, context)`` pairs: dicts ``text``, ``start``,
        ``end`` (characters of the context, end exclusive; -1 for no answer), ``score``,
        ``null_margin``, ``nbest``."""
        examples = [QAExample(id=str(n), question=q, context=c, answers=[], impossible=False,
                              where="pair", labelled=False)
                    for n, (q, c) in enumerate(question_pairs(pairs))]
        return self.predict_examples(examples, n_best, null_threshold, batch_size,
                                     answer_boundaries)
