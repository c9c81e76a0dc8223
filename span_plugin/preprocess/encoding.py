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

from dataclasses import dataclass, fields

from span_plugin.preprocess.ngrams import load_ngrams
from span_plugin.preprocess.segment import NO_DICTIONARY, Segmenter
from span_plugin.tokenizers import TOKENIZERS, build_tokenizer

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


@dataclass
class EncoderSpec:
    """Everything needed to build a :class:`SpanTokenizer`; picklable, so workers
    rebuild it.

    bpe: a registered tokenizer kind: ``gpt2`` (needs encoder_json, vocab_bpe),
    ``sentencepiece`` (needs sentencepiece_model), ``fastbpe`` (needs bpe_codes,
    optional bpe_vocab) or ``wordpiece`` (needs wordpiece: tokenizer.json, vocab.txt or
    their folder); each kind declares its fields (``Tokenizer.files``).
    ngrams: dictionary path; None means the packaged default of the tokenizer's word
    scheme. ngrams_top_k keeps the K most frequent entries only.
    """

    bpe: str = "gpt2"
    encoder_json: str = None
    vocab_bpe: str = None
    sentencepiece_model: str = None
    bpe_codes: str = None
    bpe_vocab: str = None
    wordpiece: str = None
    ngrams: str = None
    ngrams_top_k: int = None
    segmentation: str = "greedy"
    seed: int = 0
    nltk_data: str = None  # segmentation chunker: NLTK data folder (None: $NLTK_DATA, ...)

    def build(self):
        return make_encoder(**self.__dict__)


# The EncoderSpec fields that name a tokenizer's files.
FILE_FIELDS = tuple(f.name for f in fields(EncoderSpec)
                    if f.name not in ("bpe", "ngrams", "ngrams_top_k", "segmentation", "seed",
                                      "nltk_data"))


def make_encoder(bpe="gpt2", ngrams=None, ngrams_top_k=None, segmentation="greedy", seed=0,
                 nltk_data=None, **files):
    """Build a :class:`SpanTokenizer`. ``files``: the tokenizer's files by EncoderSpec
    field (``encoder_json=...``). ``ngrams`` is a path, a loaded NgramDict, or None for
    the packaged default dictionary of the tokenizer's word scheme (not loaded at all
    for ``segmentation="none"`` or ``"chunker"``; the chunker's NLTK data folder is
    ``nltk_data``)."""
    unknown = sorted(set(files) - set(FILE_FIELDS))
    if unknown:
        raise TypeError(f"make_encoder: unknown file argument {unknown[0]!r}; expected "
                        f"EncoderSpec fields {FILE_FIELDS}")
    if bpe not in TOKENIZERS:
        raise ValueError(f"bpe {bpe!r}: expected one of {tuple(TOKENIZERS)}")
    scheme = TOKENIZERS[bpe].word_scheme
    chunker = None
    if segmentation == "chunker":
        from span_plugin.preprocess.chunker import ChunkSegmenter

        chunker = ChunkSegmenter(scheme, nltk_data)
    if segmentation in NO_DICTIONARY:
        dictionary = None
    elif ngrams is None or isinstance(ngrams, (str, bytes)) or hasattr(ngrams, "__fspath__"):
        dictionary = load_ngrams(ngrams, top_k=ngrams_top_k, words=scheme)
    else:
        dictionary = ngrams
    segmenter = Segmenter(dictionary, method=segmentation, seed=seed, chunker=chunker)
    return SpanTokenizer(build_tokenizer(bpe, **files), segmenter)
