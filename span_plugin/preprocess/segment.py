"""Word-level segmentation into spans: greedy longest match, random, none.

A segmentation is a list of span lengths in words that sums to the number of words.

- ``greedy`` (the paper's): from the left, at word i try n = min(longest n-gram
  starting with word i, words left) down to 2; a dictionary hit makes an n-word span,
  no hit a one-word span. Matching uses the case-folded keys of
  :mod:`span_plugin.tokenizers.words`. Unlike the public reference code, an n-gram
  ending on the last word is found, and punctuation is a word of its own.
- ``random``: the greedy span lengths of the same sentence, shuffled. The span-length
  distribution is exactly the greedy one; the boundaries are random. The shuffle is
  seeded by ``seed`` and the sentence text, so it does not depend on worker count or
  line order.
- ``none``: every word is its own span (the paper's "CNN without segmentation").
- ``chunker``: every chunk of a POS-tag chunker trained on CoNLL-2000 is a span, every
  word outside chunks a one-word span (the paper's "NLTK SF"; needs NLTK and its data,
  :mod:`span_plugin.preprocess.chunker`). It reads the sentence text for the words'
  case and uses no n-gram dictionary.
"""

import random

METHODS = ("greedy", "random", "none", "chunker")
NO_DICTIONARY = ("none", "chunker")  # the methods that need no n-gram dictionary


class Segmenter:
    def __init__(self, ngrams=None, method="greedy", seed=0, chunker=None):
        """chunker: for ``chunker``, a ``(keys, text) -> lengths`` callable
        (:class:`~span_plugin.preprocess.chunker.ChunkSegmenter`)."""
        if method not in METHODS:
            raise ValueError(f"segmentation method {method!r}: expected one of {METHODS}")
        if method not in NO_DICTIONARY and ngrams is None:
            raise ValueError(f"segmentation {method!r} needs an n-gram dictionary")
        if (method == "chunker") != (chunker is not None):
            raise ValueError(f"segmentation {method!r}: a chunker is given for, and only "
                             f"for, 'chunker'")
        self.method = method
        self.chunker = chunker
        self.seed = seed
        self.ngrams = ngrams
        self._grams = ngrams.grams if ngrams is not None else set()
        self._first_max = ngrams.first_max if ngrams is not None else {}

    def __call__(self, keys, text=""):
        """keys: matching keys of the sentence's words, ``[num_words]``.
        text: the sentence (seeds ``random``; ``chunker`` reads its words' case).
        Returns span lengths in words."""
        if self.method == "none":
            return [1] * len(keys)
        if self.method == "chunker":
            return self.chunker(keys, text)
        lengths = self.greedy(keys)
        if self.method == "random":
            random.Random(f"{self.seed}\x00{text}").shuffle(lengths)
        return lengths

    def greedy(self, keys):
        grams, first_max = self._grams, self._first_max
        total = len(keys)
        out = []
        i = 0
        while i < total:
            n = min(first_max.get(keys[i], 1), total - i)
            while n >= 2 and tuple(keys[i:i + n]) not in grams:
                n -= 1
            if n < 1:
                n = 1
            out.append(n)
            i += n
        return out


def lengths_to_bounds(lengths):
    """Span lengths ``[num_spans]`` -> word boundaries ``[num_spans + 1]`` from 0."""
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    return bounds
