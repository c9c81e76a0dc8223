"""Phrase-pair classification (``span_pair_classification``, docs/SPAN_PAIRS.md):
``predict_pairs``, character ranges mapped to tokens by the code of ``span-preprocess
pairs``, pairs laid out and truncated as in training.

    model.predict_pairs("Amrozi accused his brother", "Amrozi blamed his brother",
                        [{"source": [7, 14], "target": [7, 13]}])
    # -> {"phrases": [{"label": "paraphrase", "scores": {...}}], "sentence": {...} or None}
"""

import torch

from span_plugin.formats.text_inputs import check_text, warn_cut
from span_plugin.modules.span_layout import place_phrase_pairs
from span_plugin.portable.base import Predictor
from span_plugin.portable.batches import pad_rows
from span_plugin.portable.results import scored
from span_plugin.preprocess.folders.pairs import _BadRange, range_to_tokens


def read_sentences(sentence1, sentence2):
    """``(texts, shifts)``: the two sentences as ``span-preprocess pairs`` reads them (line
    breaks as spaces, stripped) and the characters stripped in front of each."""
    texts, shifts = [], []
    for t in (check_text(sentence1, "sentence1"), check_text(sentence2, "sentence2")):
        t = t.replace("\r", " ").replace("\n", " ")
        texts.append(t.strip())
        shifts.append(len(t) - len(t.lstrip()))
    return texts, shifts


def phrase_token_ranges(texts, shifts, encoded, phrase_pairs):
    """Phrase pairs' character ranges -> per-sentence token ranges, ``[(s0, e0), (s1,
    e1)]`` each, by the code of ``span-preprocess pairs``. ``texts``: the two sentences as
    :func:`read_sentences` gives them, ``shifts`` the characters it stripped in front,
    ``encoded``: ``(tokens, offsets)`` of each; a range that is not one is a ValueError
    naming the pair."""
    out = []
    for j, pair in enumerate(phrase_pairs):
        if isinstance(pair, dict):
            missing = [k for k in ("source", "target") if k not in pair]
            if missing:
                raise ValueError(f"phrase pair {j} has no {missing[0]!r}: expected "
                                 f"{{'source': [start, end], 'target': [start, end]}}")
            ranges = (pair["source"], pair["target"])
        else:
            ranges = tuple(pair)
            if len(ranges) != 2:
                raise ValueError(f"phrase pair {j} is {pair!r}: expected (source range, "
                                 f"target range) or a dict with source and target")
        spans = []
        for side, (key, rng) in enumerate(zip(("source", "target"), ranges)):
            if not (isinstance(rng, (list, tuple)) and len(rng) == 2):
                raise ValueError(f"phrase pair {j} {key} {rng!r}: expected [start, end]")
            lo, hi = rng
            if all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)):
                lo, hi = lo - shifts[side], hi - shifts[side]
            offsets = encoded[side][1]
            try:
                spans.append(range_to_tokens(offsets, [o[0] for o in offsets],
                                             [o[1] for o in offsets], texts[side], lo, hi))
            except _BadRange as bad:
                raise ValueError(f"phrase pair {j} {key} (sentence{side + 1}): {bad}") from None
        out.append(spans)
    return out


def refuse_cut_pairs(pairs, item, starts, truncated_at):
    """A ValueError naming the phrase pairs (indices into ``pairs``, token ranges per
    sentence) that the layout left out of ``item`` (its rows: the kept pairs' positions in
    the laid-out pair, ``(n_kept, 4+)``) because the pair is truncated at
    ``truncated_at``; ``starts``: where each sentence begins in it. Training leaves such
    pairs out; a prediction for them cannot be given."""
    if len(item) == len(pairs):
        return
    kept = {tuple(r) for r in item[:, :4].tolist()}
    cut = [j for j, p in enumerate(pairs)
           if (p[0][0] + starts[0], p[0][1] + starts[0], p[1][0] + starts[1], p[1][1] + starts[1])
           not in kept]
    raise ValueError(f"phrase pairs {cut} lie past the model's {truncated_at} "
                     f"positions (the pair is truncated there); shorten the sentences")


def pair_result(out, phrase_labels, labels):
    """``{"phrases": [{"label", "scores"}], "sentence": {...} or None}`` of one sentence
    pair from the model's outputs (``phrasal``: ``(n_pairs, n_phrase_labels)``,
    ``sentential``: ``(1, n_labels)``, each present when the model has that head)."""
    result = {"phrases": [], "sentence": None}
    if out.get("phrasal") is not None:
        result["phrases"] = [scored(phrase_labels, x) for x in out["phrasal"]]
    if out.get("sentential") is not None:
        result["sentence"] = scored(labels, out["sentential"][0])
    return result


class PairPredictor(Predictor):
    def _names(self, key):
        labels = self.head_labels
        return list((labels or {}).get(key) or []) if isinstance(labels, dict) else []

    @property
    def phrase_labels(self):
        return self._names("phrasal")

    @property
    def labels(self):
        return self._names("sentential")

    @torch.no_grad()
    def predict_pairs(self, sentence1, sentence2, phrase_pairs):
        """``{"phrases": [{"label", "scores"}], "sentence": {...} or None}`` of one
        sentence pair and its phrase pairs (character ranges of sentence1 / sentence2)."""
        texts, shifts = read_sentences(sentence1, sentence2)
        encoded = [self.encoder.tokenizer.tokens_with_offsets(t) for t in texts]
        pairs = phrase_token_ranges(texts, shifts, encoded, list(phrase_pairs))
        truncate = getattr(self.cfg, "shorten_method", "none") == "truncate"
        max_len = int(self.cfg.max_positions)
        laid = self.lay_out([self.tokens_of(tokens) for tokens, _ in encoded],
                            "truncate" if truncate else "none", max_len)
        if truncate:
            warn_cut([laid.full], max_len, f"the first {max_len} kept; trained with "
                                           f"--shorten-method truncate")
        if laid.tokens.numel() > self.max_positions:
            raise ValueError(f"the pair has {laid.tokens.numel()} tokens, more than the "
                             f"model's {self.max_positions}")
        sides = [torch.tensor([o for p in pairs for o in p[k]], dtype=torch.long) for k in (0, 1)]
        truncated_at = max_len if truncate else None
        item = place_phrase_pairs(sides[0], sides[1], torch.zeros(len(pairs), dtype=torch.long),
                                  laid.starts[0], laid.starts[1], truncated_at)
        refuse_cut_pairs(pairs, item, laid.starts, truncated_at)
        out = self.forward_batch([laid.tokens], phrases=pad_rows([item], 4))
        return pair_result(out, self.phrase_labels, self.labels)
