"""Inference for ``span_pair_classification`` checkpoints (transfer fine-tuning,
docs/SPAN_PAIRS.md) on raw sentence pairs with phrase pairs.

    from span_plugin.inference.hub import SpanHubInterface
    hub = SpanHubInterface.from_pretrained("runs/transfer-MRPC/checkpoints/checkpoint_best.pt")
    hub.predict_pairs("Amrozi accused his brother", "Amrozi blamed his brother",
                      [{"source": [7, 14], "target": [7, 13]}])
    # -> {"phrases": [{"label": "paraphrase", "scores": {"paraphrase": 0.7, ...}}],
    #     "sentence": {"label": "1", "scores": {"0": 0.2, "1": 0.8}}}

Phrase pairs are character ranges ``[start, end)`` as in the JSON Lines format; they
are mapped to tokens by the code of ``span-preprocess pairs``
(``Tokenizer.tokens_with_offsets``, :func:`span_plugin.preprocess.folders.pairs.range_to_tokens`) and laid
out by the layout of training (:mod:`span_plugin.data.layout`), so the model sees what
training fed it. Files: :mod:`span_plugin.inference.pair_files` (``span-predict --input``).
"""

import torch

from span_plugin.data.in_memory import TensorListDataset
from span_plugin.formats.text_inputs import warn_cut
from span_plugin.inference import pair_files
from span_plugin.inference.base import SpanHubInterface, register_adapter
from span_plugin.portable.pairs import (pair_result, phrase_token_ranges, read_sentences,
                                        refuse_cut_pairs)


@register_adapter("span_pair_classification", output=pair_files.OUTPUT)
class PairHubInterface(SpanHubInterface):
    head_from_task = True

    @property
    def phrase_labels(self):
        return list(self.task.phrase_labels)

    @torch.no_grad()
    def predict_pairs(self, sentence1, sentence2, phrase_pairs):
        """Classify each phrase pair of one sentence pair (and the pair itself when the
        checkpoint has a sentential head).

        phrase_pairs: ``[{"source": [s, e], "target": [s, e]}, ...]`` or
        ``[((s, e), (s, e)), ...]``, character ranges of sentence1 / sentence2.
        Returns ``{"phrases": [{"label", "scores": {label: p}}], "sentence": {...} or
        None}``. A pair that the truncation to the model's positions would cut is an
        error (training leaves such pairs out).
        """
        texts, shifts = read_sentences(sentence1, sentence2)
        encoded = [self.encoder.tokenizer.tokens_with_offsets(t) for t in texts]
        pairs = phrase_token_ranges(texts, shifts, encoded, list(phrase_pairs))
        layout = self.lay_out(
            [TensorListDataset([self.tokens_of(tokens)]) for tokens, _ in encoded],
            "truncate" if self.task.cfg.shorten_method == "truncate" else "none")
        tokens = layout.tokens[0]
        if layout.crop is not None:  # the pair before the cut: <s> A </s> </s> B </s>
            warn_cut(layout.crop.dataset.sizes, layout.crop.max_len,
                     f"the first {layout.crop.max_len} kept; trained with --shorten-method "
                     f"truncate")
        if tokens.numel() > self.model.max_positions():
            raise ValueError(f"the pair has {tokens.numel()} tokens, more than the model's "
                             f"{self.model.max_positions()}")
        flat = [TensorListDataset([torch.tensor([o for p in pairs for o in p[k]], dtype=torch.long)])
                for k in (0, 1)]
        labels = TensorListDataset([torch.zeros(len(pairs), dtype=torch.int32)])
        ds = layout.phrase_pairs(flat[0], flat[1], labels, "phrases")
        item = ds[0]
        refuse_cut_pairs(pairs, item, [int(layout.starts[k][0]) for k in (0, 1)],
                         layout.truncated_at)
        out = self.forward_batch([tokens], phrases=ds.collater([item]))
        return pair_result(out, self.phrase_labels, self.labels)
