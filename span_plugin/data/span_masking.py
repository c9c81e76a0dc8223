"""Masking of one token block ``tokens [T]`` for masked-LM pre-training, in numpy (no
fairseq, no torch): SpanBERT's span masking and its two ablations, BERT's whole-word and
token masking (:class:`SpanMasker`, ``scheme``: ``span``, ``whole-word``, ``token``).
:meth:`SpanMasker.apply` gives ``source`` and ``target`` as fairseq's masked_lm has
them, drawn from the ``numpy.random.Generator`` it is given. How each scheme chooses its
ranges and the budget: docs/PRETRAIN.md, section "Module notes"."""

from dataclasses import dataclass

import numpy as np


def truncated_geometric(p, max_len):
    """Probabilities of lengths ``1..max_len`` under Geo(p) truncated and renormalised:
    ``[max_len]`` float64, summing to 1."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"geometric p={p}: expected 0 < p <= 1")
    if max_len < 1:
        raise ValueError(f"max span length {max_len}: expected at least 1")
    probs = p * (1.0 - p) ** np.arange(max_len)
    return probs / probs.sum()


def words_from_starts(word_start, maskable):
    """Words of a block: ``(starts [W], lengths [W])`` in token positions.

    word_start: bool ``[T]``, True where a token begins a word.
    maskable: bool ``[T]``; a token that is not maskable belongs to no word and ends the
    word before it.
    """
    begins = maskable & (word_start | ~np.concatenate(([False], maskable[:-1])))
    starts = np.flatnonzero(begins)
    ids = np.cumsum(begins) - 1
    lengths = np.bincount(ids[maskable], minlength=len(starts))
    return starts, lengths


def expand(starts, lengths):
    """Positions covered by spans ``(starts [n], lengths [n])``, in order: ``[sum]``."""
    total = int(lengths.sum())
    offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return offsets + np.arange(total)


SCHEMES = ("span", "whole-word", "token")


@dataclass
class SpanMasker:
    """Masks blocks with one of :data:`SCHEMES` (see the module docstring).

    mask_idx, pad_idx: ids of ``<mask>`` and ``<pad>``.
    replacement_ids: int ``[R]``, the ids a "random token" is drawn from (the
    dictionary's ordinary symbols).
    special: bool ``[V]``, True for ids that are never masked.
    scheme: ``span`` (SpanBERT; geometric spans of words, or the n-gram units given),
    ``whole-word`` (BERT-WWM) or ``token`` (BERT).
    """

    mask_idx: int
    pad_idx: int
    replacement_ids: np.ndarray
    special: np.ndarray
    mask_prob: float = 0.15
    random_token_prob: float = 0.1
    leave_unmasked_prob: float = 0.1
    geometric_p: float = 0.2
    max_span_words: int = 10
    scheme: str = "span"

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ValueError(f"masking scheme {self.scheme!r}: expected one of {SCHEMES}")
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"mask_prob={self.mask_prob}: expected 0 < p < 1")
        if self.random_token_prob + self.leave_unmasked_prob > 1.0:
            raise ValueError("random_token_prob + leave_unmasked_prob must be at most 1")
        self.lengths = np.arange(1, self.max_span_words + 1)
        self.length_probs = truncated_geometric(self.geometric_p, self.max_span_words)
        self.replacement_ids = np.asarray(self.replacement_ids, dtype=np.int64)

    # -- choosing spans -------------------------------------------------------------

    def maskable(self, tokens):
        return ~self.special[tokens]

    def _budget(self, maskable_tokens):
        return max(1, int(round(self.mask_prob * maskable_tokens)))

    @staticmethod
    def _drop_edges(starts, lengths, size):
        """Units holding the block's first or last position are not maskable."""
        keep = (starts > 0) & (starts + lengths < size)
        return starts[keep], lengths[keep]

    def geometric_spans(self, rng, word_starts, word_lengths, size):
        """Spans of whole words: ``(starts [n], ends [n])`` token ranges, sorted,
        separated by at least one word. A range may hold a special token (a ``</s>``
        between two words of the span); :meth:`apply` leaves it unmasked.

        word_starts, word_lengths: ``[W]`` token start and token count of each word.
        """
        word_starts, word_lengths = self._drop_edges(word_starts, word_lengths, size)
        n_words = len(word_starts)
        if n_words == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        budget = self._budget(int(word_lengths.sum()))
        # Enough lengths that their words hold the budget (every word has a token).
        span_words = rng.choice(self.lengths, size=budget, p=self.length_probs)
        n = int(np.searchsorted(np.cumsum(span_words), budget)) + 1
        span_words = span_words[:n]
        # n spans of these lengths fit with one free word between neighbours.
        while n > 1 and span_words.sum() + n - 1 > n_words:
            n -= 1
            span_words = span_words[:n]
        span_words[0] = min(span_words[0], n_words)
        free = n_words - int(span_words.sum()) - (n - 1)
        # A uniform placement: spread the free words over the n + 1 gaps.
        slots = np.sort(rng.choice(free + n, size=n, replace=False))
        first = slots + np.cumsum(span_words) - span_words  # first word of each span
        # Keep spans in a random order until the budget, so that the kept ones are
        # spread over the block; the last one kept is cut at a word boundary.
        cum = np.concatenate(([0], np.cumsum(word_lengths)))
        order = rng.permutation(n)
        reach = np.cumsum(cum[first + span_words][order] - cum[first][order])
        k = min(int(np.searchsorted(reach, budget)), n - 1)
        need = budget - (int(reach[k - 1]) if k else 0)  # tokens the last one must give
        last = order[k]
        w0, n0 = first[last], span_words[last]
        span_words[last] = min(int(np.searchsorted(cum[w0 + 1:w0 + n0 + 1] - cum[w0], need)) + 1, n0)
        kept = np.sort(order[: k + 1])
        first, span_words = first[kept], span_words[kept]
        last_word = first + span_words - 1
        return word_starts[first], word_starts[last_word] + word_lengths[last_word]

    def unit_spans(self, rng, unit_starts, unit_lengths, size):
        """Whole units (n-gram segments) in a random order until the budget:
        ``(starts [n], ends [n])``, sorted by position."""
        unit_starts, unit_lengths = self._drop_edges(
            np.asarray(unit_starts, dtype=np.int64), np.asarray(unit_lengths, dtype=np.int64), size)
        if len(unit_starts) == 0:
            return unit_starts, unit_lengths
        order = rng.permutation(len(unit_starts))
        reach = np.cumsum(unit_lengths[order])
        budget = self._budget(int(reach[-1]))
        chosen = np.sort(order[: int(np.searchsorted(reach, budget)) + 1])
        return unit_starts[chosen], unit_starts[chosen] + unit_lengths[chosen]

    def whole_words(self, rng, word_starts, word_lengths, size):
        """BERT's whole-word masking: whole words in a random order, a word that would
        overshoot the budget skipped, until the budget: ``(starts [n], ends [n])``,
        sorted by position, one range per word.

        word_starts, word_lengths: ``[W]`` token start and token count of each word.
        """
        word_starts, word_lengths = self._drop_edges(
            np.asarray(word_starts, dtype=np.int64), np.asarray(word_lengths, dtype=np.int64), size)
        if len(word_starts) == 0:
            return word_starts, word_starts.copy()
        need = self._budget(int(word_lengths.sum()))
        rest = rng.permutation(len(word_starts))  # the order words are considered in
        taken = []
        # BERT's loop, a run of words at a time: of the words that still fit, the longest
        # prefix that fits is taken; the next one does not fit now, nor later (the need
        # only shrinks), so it is dropped with every word too long for the need.
        while need > 0:
            rest = rest[word_lengths[rest] <= need]
            if len(rest) == 0:
                break
            k = int(np.searchsorted(np.cumsum(word_lengths[rest]), need, side="right"))
            taken.append(rest[:k])
            need -= int(word_lengths[rest[:k]].sum())
            rest = rest[k + 1:]
        chosen = np.sort(np.concatenate(taken)) if taken else np.zeros(0, dtype=np.int64)
        return word_starts[chosen], word_starts[chosen] + word_lengths[chosen]

    def single_tokens(self, rng, maskable):
        """BERT's token masking: exactly the budget of maskable tokens, uniformly
        without replacement, the block's first and last position excepted:
        ``(starts [n], ends [n])``, sorted, each one token long.

        maskable: bool ``[T]``.
        """
        candidates = np.flatnonzero(maskable[1:-1]) + 1 if len(maskable) > 2 else np.zeros(0, dtype=np.int64)
        if len(candidates) == 0:
            return candidates, candidates.copy()
        chosen = np.sort(rng.choice(candidates, size=self._budget(len(candidates)), replace=False))
        return chosen, chosen + 1

    # -- replacing ------------------------------------------------------------------

    def apply(self, rng, tokens, starts, ends):
        """``(source [T], target [T])`` int64 for the chosen spans (token ranges);
        80/10/10 per span. Special tokens inside a range stay as they are."""
        tokens = np.asarray(tokens, dtype=np.int64)
        source = tokens.copy()
        target = np.full_like(tokens, self.pad_idx)
        lengths = ends - starts
        positions = expand(starts, lengths)
        u = np.repeat(rng.random(len(starts)), lengths)
        keep = ~self.special[tokens[positions]]
        positions, u = positions[keep], u[keep]
        target[positions] = tokens[positions]
        to_mask = u < 1.0 - self.random_token_prob - self.leave_unmasked_prob
        to_random = ~to_mask & (u < 1.0 - self.leave_unmasked_prob)
        source[positions[to_mask]] = self.mask_idx
        picks = positions[to_random]
        source[picks] = self.replacement_ids[rng.integers(0, len(self.replacement_ids), len(picks))]
        return source, target

    def choose(self, rng, tokens, word_start=None, units=None):
        """The chosen ranges of one block under :attr:`scheme`: ``(starts [n], ends
        [n])``. ``span`` takes units when given (n-gram segments), else word_start;
        ``whole-word`` needs word_start; ``token`` neither."""
        size = len(tokens)
        maskable = self.maskable(tokens)
        if self.scheme == "token":
            return self.single_tokens(rng, maskable)
        if self.scheme == "span" and units is not None:
            units = np.asarray(units, dtype=np.int64).reshape(-1, 2)
            return self.unit_spans(rng, units[:, 0], units[:, 1] - units[:, 0], size)
        if word_start is None:
            raise ValueError(f"masking scheme {self.scheme!r} needs the word starts of the "
                             f"block (word_start, bool [T])")
        word_starts, word_lengths = words_from_starts(word_start, maskable)
        if self.scheme == "whole-word":
            return self.whole_words(rng, word_starts, word_lengths, size)
        return self.geometric_spans(rng, word_starts, word_lengths, size)

    def __call__(self, rng, tokens, word_start=None, units=None):
        """Mask one block.

        tokens: int ``[T]``. word_start: bool ``[T]``, True where a token begins a word
        (geometric spans, whole words). units: int ``[n, 2]`` (start, end) token ranges,
        the n-gram segments, sorted, non-overlapping (``span`` only; instead of the
        geometric spans). Returns ``(source [T], target [T], spans [n, 2])``, spans the
        chosen (start, end) ranges (spans, words or single tokens).
        """
        tokens = np.asarray(tokens)
        starts, ends = self.choose(rng, tokens, word_start, units)
        source, target = self.apply(rng, tokens, starts, ends)
        return source, target, np.stack([starts, ends], axis=1)
