"""Inference for ``span_qa`` checkpoints on raw (question, context) pairs.

    from span_plugin.inference.hub import SpanHubInterface
    hub = SpanHubInterface.from_pretrained("runs/squad/checkpoints/checkpoint_best.pt")
    hub.predict_answers([("Who wrote it?", "It was written by Ann Lee in 1990.")])
    # -> [{"text": "Ann Lee", "start": 18, "end": 25, "score": ..., "null_margin": ...,
    #      "nbest": [...]}]      (character offsets into the context, end exclusive)

The pairs go through the code of training: the encoder the checkpoint records,
:func:`span_plugin.preprocess.folders.qa.encode_question` and ``passage_windows`` with the
folder's window size and stride, the layout and batches of
:class:`span_plugin.data.qa_windows.QAWindowsDataset`, and the decoder of the
validation metrics, at the answer boundaries the checkpoint records (``--answer-boundaries``
of training: word unless it said token; token for checkpoints made before the option).
``answer_boundaries="word"`` or ``"token"`` decodes otherwise (re-decoding a checkpoint).
"""

import torch

from span_plugin.data.in_memory import TensorListDataset
from span_plugin.data.layout import lay_out
from span_plugin.data.qa_windows import QAWindowsDataset
from span_plugin.formats.squad import QAExample
from span_plugin.formats.text_inputs import check_batch_size, question_pairs
from span_plugin.inference import qa_files
from span_plugin.inference.base import SpanHubInterface, flat_offsets, register_adapter
from span_plugin.modules.qa_decoding import answers_of_batch
from span_plugin.portable.batches import length_order, unpermuted
from span_plugin.portable.qa import question_windows
from span_plugin.portable.results import finite_outputs
from span_plugin.preprocess.folders.qa import spans_in_window


@register_adapter("span_qa", output=qa_files.OUTPUT)
class QAHubInterface(SpanHubInterface):
    head_from_task = True

    def dataset(self, examples):
        """The :class:`QAWindowsDataset` of ``QAExample`` items (answers unused)."""
        positions, stride = self.task.window_settings  # those of training
        columns = {k: TensorListDataset() for k in (
            "question", "passage", "offsets", "answer", "question_spans", "passage_spans")}
        window_question = []
        for n, ex in enumerate(examples):
            enc, windows = question_windows(self.encoder, ex, n, positions, stride)
            q_ids = self.tokens_of(enc.question)
            q_spans = flat_offsets(enc.question_spans)
            for a, b in windows:
                columns["question"].append(q_ids)
                columns["passage"].append(self.tokens_of(enc.context[a:b]))
                columns["question_spans"].append(q_spans)
                columns["passage_spans"].append(flat_offsets(spans_in_window(enc.context_spans, a, b)))
                columns["offsets"].append(torch.tensor(enc.offsets[a:b], dtype=torch.long).view(-1))
                columns["answer"].append(torch.zeros(0, dtype=torch.long))
                window_question.append(n)
        d = self.task.source_dictionary
        layout = lay_out([columns["question"], columns["passage"]], d.bos(), d.eos())
        spans = layout.spans([columns["question_spans"], columns["passage_spans"]])
        return QAWindowsDataset(layout, window_question, columns["offsets"], columns["answer"],
                                list(examples), self.task.source_dictionary.pad(), spans=spans)

    @property
    def answer_boundaries(self):
        """How the checkpoint decodes answers: "word" or "token" (module docstring)."""
        return self.task.answer_boundaries

    def batch_outputs(self, examples, batch_size=16):
        """``(batch, head output)`` of each batch of ``QAExample`` items, in order: what
        decoding reads (one pass of the model, for any number of decodings)."""
        check_batch_size(batch_size)
        data = self.dataset(examples)
        for k in range(0, len(data), batch_size):
            batch = data.collater([data[i] for i in range(k, min(k + batch_size, len(data)))])
            net_input = {name: x.to(self.device) for name, x in batch["net_input"].items()}
            with torch.no_grad():
                output, _ = self.model(**net_input, classification_head_name=self.head)
            yield batch, finite_outputs(output, self.head)

    def predict_examples(self, examples, n_best=20, null_threshold="default", batch_size=16,
                         answer_boundaries=None, order="length"):
        """Answers of ``QAExample`` items (see :func:`decode_answers`), in order.

        null_threshold: "default" = the task's threshold for SQuAD 2.0 models, None
        (never "") otherwise; None or a number overrides it. answer_boundaries: None =
        the checkpoint's; "word" or "token" overrides it. order: "length" (questions of
        like length batched together) or "file"; answers are in input order either way.
        """
        check_batch_size(batch_size)
        if null_threshold == "default":
            null_threshold = self.task.cfg.null_threshold if self.task.squad_v2 else None
        boundaries = answer_boundaries or self.answer_boundaries
        if not examples:
            return []
        # Questions of like length share batches (``order`` "length"), answered in input order.
        permutation = length_order([len(ex.question) + len(ex.context) for ex in examples],
                                   order)
        out = []
        for batch, output in self.batch_outputs([examples[i] for i in permutation],
                                                batch_size):
            qa = batch["qa"]
            out.extend(answers_of_batch(output, qa["question"], qa["offsets"],
                                        [r.context for r in qa["records"]], n_best,
                                        null_threshold, boundaries))
        return unpermuted(permutation, out)

    def predict_answers(self, pairs, n_best=20, null_threshold="default", batch_size=16,
                        answer_boundaries=None):
        """Answers of raw ``(question, context)`` pairs: dicts ``text``, ``start``,
        ``end`` (characters of the context, end exclusive; -1 for no answer),
        ``score``, ``null_margin``, ``nbest``. A pair that is not two strings is a
        TypeError, an empty question or context a ValueError (as ``span-preprocess qa``
        refuses them), each naming the pair's index. answer_boundaries: as
        :meth:`predict_examples`."""
        examples = [QAExample(id=str(n), question=q, context=c, answers=[], impossible=False,
                              where="pair", labelled=False)
                    for n, (q, c) in enumerate(question_pairs(pairs))]
        return self.predict_examples(examples, n_best, null_threshold, batch_size,
                                     answer_boundaries)
