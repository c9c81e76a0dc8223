"""Word-level segmentation into spans (lists of span lengths in words that sum to the
number of words): the registry of segmentation kinds (:class:`Segmentation`) and the
n-gram ones, ``greedy`` (the paper's) and ``random``, and ``none``. What each kind does
and what a kind declares: docs/PREPROCESS.md, section "Module notes"."""

import random

SEGMENTATIONS = {}  # kind name -> Segmentation subclass, in registration order


def register_segmentation(name):
    """Class decorator: make ``cls`` the segmentation of kind ``name``."""
    def add(cls):
        if name in SEGMENTATIONS:
            raise ValueError(f"segmentation kind {name!r} is registered twice "
                             f"({SEGMENTATIONS[name].__name__} and {cls.__name__})")
        cls.name = name
        SEGMENTATIONS[name] = cls
        return cls
    return add


def segmentation_kind(name):
    """The registered Segmentation subclass of ``name``."""
    cls = SEGMENTATIONS.get(name)
    if cls is None:
        raise ValueError(f"segmentation method {name!r}: expected one of {tuple(SEGMENTATIONS)}")
    return cls


def segmentation_options():
    """``{field: Option}`` of every registered kind's options."""
    return {o.field: o for cls in SEGMENTATIONS.values() for o in cls.options}


class Segmentation:
    """``(keys, text) -> span lengths``: keys are the matching keys of the sentence's
    words (``[num_words]``), text the sentence. Built with ``ngrams`` (an NgramDict, or
    None when ``needs_dictionary`` is False), ``seed``, the tokenizer's word ``scheme``
    and the kind's ``options`` (Options of :mod:`span_plugin.tokenizers.options`, by
    field)."""

    name = None  # set by register_segmentation
    needs_dictionary = True
    options = ()
    help = ""  # one line for --segmentation

    def __init__(self, ngrams=None, seed=0, scheme=None):
        self.ngrams, self.seed, self.scheme = ngrams, seed, scheme

    def __call__(self, keys, text=""):
        raise NotImplementedError

    # Its part of the data record (keys of ``encoder`` besides the common ones).

    @classmethod
    def record(cls, spec):
        """Keys it adds to the record's ``encoder`` for an EncoderSpec."""
        return {}

    @classmethod
    def settings_from_record(cls, encoder, checkpoint):
        """Its options at inference, from a checkpoint's ``encoder`` record; raises
        :class:`~span_plugin.preprocess.file_records.SettingsMismatch` when what it
        recorded is not what it would use now."""
        return {}

    @classmethod
    def describe(cls, encoder):
        """Lines it adds to ``span-preprocess check``."""
        return []


class Segmenter:
    """A segmentation of kind ``segmentation`` ready to cut sentences: ``(keys, text) -> span
    lengths``. ``ngrams``: its dictionary (None for kinds that need none); ``scheme``:
    the word scheme of the keys (default: the dictionary's); ``options``: the kind's."""

    def __init__(self, ngrams=None, segmentation="greedy", seed=0, scheme=None, **options):
        kind = segmentation_kind(segmentation)
        if kind.needs_dictionary and ngrams is None:
            raise ValueError(f"segmentation {segmentation!r} needs an n-gram dictionary")
        own = {o.field for o in kind.options}
        other = sorted(k for k, v in options.items() if v is not None and k not in own)
        if other:
            raise ValueError(f"segmentation {segmentation!r} reads no {other[0]}")
        self.segmentation = segmentation
        self.seed = seed
        self.ngrams = ngrams
        scheme = scheme or (ngrams.words if ngrams is not None else "gpt2")
        self.cut = kind(ngrams=ngrams, seed=seed, scheme=scheme,
                        **{k: v for k, v in options.items() if k in own})

    def __call__(self, keys, text=""):
        """keys: matching keys of the sentence's words, ``[num_words]``. text: the
        sentence (seeds ``random``; ``chunker`` reads its words' case). Returns span
        lengths in words."""
        return self.cut(keys, text)


@register_segmentation("greedy")
class GreedySegmentation(Segmentation):
    help = "longest n-gram match"

    def __init__(self, ngrams, seed=0, scheme=None):
        super().__init__(ngrams, seed, scheme)
        self._grams = ngrams.grams
        self._first_max = ngrams.first_max

    def __call__(self, keys, text=""):
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


@register_segmentation("random")
class RandomSegmentation(GreedySegmentation):
    help = "greedy's lengths shuffled"

    def __call__(self, keys, text=""):
        lengths = super().__call__(keys, text)
        random.Random(f"{self.seed}\x00{text}").shuffle(lengths)
        return lengths


@register_segmentation("none")
class WordSegmentation(Segmentation):
    needs_dictionary = False
    help = "one word a span"

    def __call__(self, keys, text=""):
        return [1] * len(keys)


def lengths_to_bounds(lengths):
    """Span lengths ``[num_spans]`` -> word boundaries ``[num_spans + 1]`` from 0."""
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    return bounds
