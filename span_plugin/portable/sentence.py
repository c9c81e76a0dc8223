"""Sentence(-pair) classification and regression (``span_classification``, and fairseq's
``sentence_prediction`` baseline: the same tokens, no spans): ``predict``,
``predict_logits`` and ``encode``.

    model.predict([("A man plays.", "A man is playing.")])
    # -> [{"label": "1", "probs": {"0": 0.2, "1": 0.8}}]    (regression: {"score": x})
"""

import torch

from span_plugin.formats.text_inputs import (check_batch_size, example_width, text_examples,
                                             warn_cut)
from span_plugin.portable.base import Predictor
from span_plugin.portable.batches import in_input_order, length_batches, pad_rows
from span_plugin.portable.results import class_results


class SentencePredictor(Predictor):

    @property
    def regression(self):
        return bool(getattr(self.cfg, "regression_target", False))

    @property
    def labels(self):
        """Label names in output order (classification)."""
        return list(self.head_labels or [])

    def encode(self, examples):
        """Examples (str, or tuples of str for pairs) -> ``[(tokens [T_i], spans [n_i,
        2])]``, as training lays them out (inputs longer than the model cut as the
        checkpoint was trained: one :class:`InputCutWarning` counts them)."""
        examples = text_examples(examples)
        if not examples:
            return []
        example_width(examples, self.num_inputs)
        cfg = self.cfg
        shorten = "none" if getattr(cfg, "shorten_method", "none") == "none" else "truncate"
        max_len = getattr(cfg, "max_positions", None)
        out, full = [], []
        for e in examples:
            tokens, spans = [], []
            for text in e:
                symbols, offsets = self.encoder.encode(text)
                tokens.append(self.tokens_of(symbols))
                spans.append([v for span in offsets for v in span])
            laid = self.lay_out(tokens, shorten, max_len)
            full.append(laid.full)
            out.append((laid.tokens, laid.spans(spans, getattr(cfg, "max_spans", None),
                                                getattr(cfg, "max_span_tokens", None))))
        if shorten != "none":
            warn_cut(full, max_len, f"the first {max_len} kept; trained with --shorten-method "
                                    f"{cfg.shorten_method}")
        for i, (t, _) in enumerate(out):
            if t.numel() > self.max_positions:
                raise ValueError(
                    f"example {i} has {t.numel()} tokens, more than the model's "
                    f"{self.max_positions}; the checkpoint was trained with --shorten-method none")
        return out

    @torch.no_grad()
    def predict_logits(self, examples, batch_size=32, order="length"):
        """Logits ``[N, C]`` (float32) of the examples, in input order; batched by
        length (``order`` "length", the least padding) or in input order ("file")."""
        check_batch_size(batch_size)
        encoded = self.encode(examples)
        if not encoded:
            return torch.zeros(0, int(self.cfg.num_classes))
        batches = length_batches([len(t) for t, _ in encoded], batch_size, order)
        out = []
        for batch in batches:
            chunk = [encoded[i] for i in batch]
            side = {"spans": pad_rows([s for _, s in chunk], 2)} if self.reads_spans else {}
            out.append(self.forward_batch([t for t, _ in chunk], **side).float().cpu())
        return in_input_order(batches, out)

    def predict(self, examples, batch_size=32, order="length"):
        """One dict per example: ``{"label", "probs"}``, regression ``{"score"}``."""
        return class_results(self.predict_logits(examples, batch_size, order), self.labels,
                             self.regression)
