"""Text -> (tokens, span offsets) in one pass: a tokenizer
(:mod:`span_plugin.tokenizers`) and the n-gram segmenter over its words.

``SpanTokenizer.encode(text) -> (tokens, spans)``:

- ``tokens``: the symbols exactly as fairseq's ``dict.txt`` holds them (for GPT-2 BPE
  the decimal ids, as fairseq's ``multiprocessing_bpe_encoder.py`` writes them; the
  line is stripped first, as that script does);
- ``spans``: list of (start, end) token offsets, end exclusive, sorted, covering every
  token; an empty line gives ``([], [])``.

How each kind cuts words into tokens is in its module (:mod:`span_plugin.tokenizers.gpt2`,
...). Nothing is downloaded: every tokenizer takes local file paths.
"""

from span_plugin.preprocess.segmentation.ngrams import load_ngrams
from span_plugin.preprocess.segmentation.segmentations import Segmenter, segmentation_kind, segmentation_options
from span_plugin.tokenizers import TOKENIZERS, build_tokenizer, file_options, tokenizer_kind

# The registered kinds, live: a kind registered later is one too.
BPE_KINDS = TOKENIZERS.keys()


class SpanTokenizer:
    """A tokenizer and a segmenter over its words (their schemes must agree)."""

    def __init__(self, tokenizer, segmenter):
        self.tokenizer = tokenizer
        self.segmenter = segmenter
        ngrams = segmenter.ngrams
        if ngrams is not None and ngrams.words != tokenizer.word_scheme:
            raise ValueError(
                f"n-gram dictionary {ngrams.path} is over {ngrams.words!r} words, but "
                f"{type(tokenizer).__name__} segments {tokenizer.word_scheme!r} words: its "
                f"entries could not match. Build one with `span-preprocess ngrams --words "
                f"{tokenizer.word_scheme} ...` (or leave --ngrams out for the packaged one)")

    def encode(self, text):
        text = text.strip()
        tokens, starts, keys = self.tokenizer.pieces(text)
        if not keys:
            return tokens, ([(0, len(tokens))] if tokens else [])
        spans = []
        i = 0
        starts.append(len(tokens))
        for n in self.segmenter(keys, text):
            spans.append((starts[i], starts[i + n]))
            i += n
        return tokens, spans

    def encode_words(self, text):
        """Debug helper: the segmentation of ``text`` as lists of word keys."""
        text = text.strip()
        _, _, keys = self.tokenizer.pieces(text)
        out, i = [], 0
        for n in self.segmenter(keys, text):
            out.append(keys[i:i + n])
            i += n
        return out

    def decode(self, tokens):
        return self.tokenizer.decode(tokens)


def option_fields():
    """The EncoderSpec fields that kinds declare: every registered tokenizer's files and
    every segmentation's options (live: a kind registered later adds its own)."""
    return {**file_options(), **segmentation_options()}


class EncoderSpec:
    """Everything needed to build a :class:`SpanTokenizer`; picklable, so workers
    rebuild it.

    bpe: a registered tokenizer kind (``gpt2``, ``sentencepiece``, ``fastbpe``,
    ``wordpiece``, ...). ngrams: dictionary path; None means the packaged default of the
    tokenizer's word scheme. ngrams_top_k keeps the K most frequent entries only.
    segmentation: a registered segmentation kind; seed: of ``random``.
    ``options``: the files of the tokenizers (``encoder_json=...``, as each kind
    declares them: ``Tokenizer.files``) and the options of the segmentations
    (``nltk_data=``); one not given reads as None.
    """

    def __init__(self, bpe="gpt2", ngrams=None, ngrams_top_k=None, segmentation="greedy",
                 seed=0, **options):
        _check_options(options, "EncoderSpec")
        self.bpe = bpe
        self.ngrams = ngrams
        self.ngrams_top_k = ngrams_top_k
        self.segmentation = segmentation
        self.seed = seed
        self.__dict__.update(options)

    def __getattr__(self, name):  # only for names not set: a declared option not given
        if name in option_fields():
            return None
        raise AttributeError(f"EncoderSpec has no {name!r}")

    def _given(self):
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def __eq__(self, other):
        return isinstance(other, EncoderSpec) and self._given() == other._given()

    def __repr__(self):  # also the key workers cache their encoder under
        return "EncoderSpec(" + ", ".join(f"{k}={v!r}" for k, v in self._given().items()) + ")"

    def build(self):
        return make_encoder(**self.__dict__)


def _check_options(options, where):
    unknown = sorted(set(options) - set(option_fields()))
    if unknown:
        raise TypeError(f"{where}: unknown file argument {unknown[0]!r}; expected "
                        f"EncoderSpec fields {tuple(option_fields())}")


def make_encoder(bpe="gpt2", ngrams=None, ngrams_top_k=None, segmentation="greedy", seed=0,
                 **options):
    """Build a :class:`SpanTokenizer`. ``options``: the tokenizer's files by EncoderSpec
    field (``encoder_json=...``) and the segmentation's options (``nltk_data=``; those
    of other kinds are ignored). ``ngrams`` is a path, a loaded NgramDict, or None for
    the packaged default dictionary of the tokenizer's word scheme (not loaded at all
    for segmentations that need none: ``none``, ``chunker``)."""
    _check_options(options, "make_encoder")
    tokenizer = tokenizer_kind(bpe)
    kind = segmentation_kind(segmentation)
    scheme = tokenizer.word_scheme
    if not kind.needs_dictionary:
        dictionary = None
    elif ngrams is None or isinstance(ngrams, (str, bytes)) or hasattr(ngrams, "__fspath__"):
        dictionary = load_ngrams(ngrams, top_k=ngrams_top_k, words=scheme)
    else:
        dictionary = ngrams
    segmenter = Segmenter(dictionary, segmentation=segmentation, seed=seed, scheme=scheme,
                          **{o.field: options.get(o.field) for o in kind.options})
    return SpanTokenizer(build_tokenizer(bpe, **options), segmenter)
