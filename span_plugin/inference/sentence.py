"""Inference for sentence(-pair) classification and regression checkpoints
(``span_classification``, and fairseq's ``sentence_prediction`` baseline) on raw text.

    hub = SpanHubInterface.from_pretrained("checkpoints/checkpoint_best.pt")
    hub.predict([("A man plays.", "A man is playing.")])
    # -> [{"label": "1", "probs": {"0": 0.2, "1": 0.8}}]    (regression: {"score": x})
"""

import torch

from span_plugin.data.in_memory import TensorListDataset
from span_plugin.inference import glue_files
from span_plugin.inference.base import (SpanHubInterface, collate_spans, flat_offsets,
                                       register_adapter)
from span_plugin.formats.text_inputs import (check_batch_size, example_width, text_examples,
                                             warn_cut)
from span_plugin.portable.batches import in_input_order, length_batches
from span_plugin.portable.results import class_results


@register_adapter("span_classification", "sentence_prediction", output=glue_files.OUTPUT)
class SentenceHubInterface(SpanHubInterface):
    """``roberta_span`` (span heads), or fairseq's plain ``roberta`` fine-tuned with
    sentence_prediction (the baseline; it gets the same tokens, and no spans)."""

    def _encode_input(self, texts):
        """BPE + segmentation of one input column -> (token items, flat span items)."""
        toks, spans = TensorListDataset(), TensorListDataset()
        for text in texts:
            symbols, offsets = self.encoder.encode(text)
            toks.append(self.tokens_of(symbols))
            spans.append(flat_offsets(offsets))
        return toks, spans

    def encode(self, examples):
        """Examples (str, or tuples of str for pairs; one str is one example) -> model
        inputs, as training. Inputs longer than the model are cut as the checkpoint was
        trained (``--shorten-method``; one :class:`InputCutWarning` counts them).

        Returns a list of ``(tokens LongTensor [T_i], spans LongTensor [n_i, 2])``.
        """
        examples = text_examples(examples)
        if not examples:
            return []
        width = example_width(examples, self.num_inputs)
        cfg = self.task.cfg
        inputs = [self._encode_input([e[k] for e in examples]) for k in range(width)]
        layout = self.lay_out([toks for toks, _ in inputs],
                              "none" if cfg.shorten_method == "none" else "truncate")
        spans = layout.spans([s for _, s in inputs], max_spans=getattr(cfg, "max_spans", None),
                             max_span_tokens=getattr(cfg, "max_span_tokens", None))
        if layout.crop is not None:  # sizes before the cut: <s> A </s> [</s> B </s>]
            warn_cut(layout.crop.dataset.sizes, layout.crop.max_len,
                     f"the first {layout.crop.max_len} kept; trained with --shorten-method "
                     f"{cfg.shorten_method}")
        out = [(layout.tokens[i], spans[i]) for i in range(len(examples))]
        limit = self.model.max_positions()
        for i, (t, _) in enumerate(out):
            if t.numel() > limit:
                raise ValueError(
                    f"example {i} has {t.numel()} tokens, more than the model's {limit}; "
                    f"the checkpoint was trained with --shorten-method none"
                )
        return out

    @torch.no_grad()
    def predict_logits(self, examples, batch_size=32, order="length"):
        """Logits ``[N, C]`` (float32) of the examples, in input order (one str: one
        example, ``N == 1``); batched by length (``order`` "length", the least padding)
        or in input order ("file")."""
        check_batch_size(batch_size)
        encoded = self.encode(examples)
        if not encoded:
            return torch.zeros(0, self.task.cfg.num_classes)
        batches = length_batches([t.numel() for t, _ in encoded], batch_size, order)
        out = []
        for batch in batches:
            chunk = [encoded[i] for i in batch]
            side = {"spans": collate_spans([s for _, s in chunk])} if self.reads_spans else {}
            out.append(self.forward_batch([t for t, _ in chunk], **side).float().cpu())
        return in_input_order(batches, out)

    def predict(self, examples, batch_size=32, order="length"):
        """Predict raw sentences (str) or pairs ((str, str)); one str is one sentence.

        Returns a list of one dict per example (a list of one for one str):
        classification ``{"label": name, "probs": {name: p}}``; regression ``{"score":
        float}`` (in the units of the training labels: STS-B folders from
        span-preprocess hold score / 5).
        """
        logits = self.predict_logits(examples, batch_size=batch_size, order=order)
        return class_results(logits, None if self.regression else self.labels, self.regression)
