"""Subword encoders that return the tokens and the span offsets of a sentence in one pass.

``encode(text) -> (tokens, spans)``:

- ``tokens``: the symbols exactly as fairseq's ``dict.txt`` holds them. For GPT-2 BPE
  these are the decimal BPE ids as strings, identical to fairseq's
  ``examples/roberta/multiprocessing_bpe_encoder.py`` output for the same line (the
  line is stripped first, as that script does).
- ``spans``: list of (start, end) token offsets, end exclusive, sorted, covering every
  token; an empty line gives ``([], [])``.

How words map to tokens:

- GPT-2: each word is one GPT-2 pre-token, so its tokens are exactly that pre-token's
  BPE tokens. A whitespace-only pre-token (from runs of spaces) has no word; its
  tokens join the following word (or the last word at the end of a line).
- sentencepiece: the line is split into the same words, and each word is encoded by
  sentencepiece on its own (so it starts with the ``▁`` word marker, also for
  punctuation that followed a word without a space in the text). Tokens of a word are
  the pieces of that word.
- fastBPE: the words are joined by single spaces (the pre-tokenized text fastBPE
  expects) and encoded in one call; a token not ending in ``@@`` ends a word.

Nothing is downloaded: every encoder takes local file paths.
"""

import json
from dataclasses import dataclass

from . import words as W
from .ngrams import load_ngrams
from .segment import Segmenter

BPE_KINDS = ("gpt2", "sentencepiece", "fastbpe")


def _bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable characters: printable Latin-1
    bytes map to themselves, the other 68 bytes to U+0100 onwards in byte order."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class SpanEncoder:
    """Base: subclasses give ``_pieces(text) -> (tokens, word_starts, keys)``."""

    def __init__(self, segmenter):
        self.segmenter = segmenter

    def encode(self, text):
        text = text.strip()
        tokens, starts, keys = self._pieces(text)
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
        """Debug helper: the words of ``text`` and the segmentation, as word lists."""
        text = text.strip()
        _, _, keys = self._pieces(text)
        ws = W.split_words(text)
        out, i = [], 0
        for n in self.segmenter(keys, text):
            out.append(ws[i:i + n])
            i += n
        return out


class GPT2SpanEncoder(SpanEncoder):
    """GPT-2 byte-level BPE (RoBERTa's), from local ``encoder.json`` and ``vocab.bpe``."""

    CACHE_LIMIT = 1 << 20

    def __init__(self, encoder_json, vocab_bpe, segmenter):
        super().__init__(segmenter)
        with open(encoder_json, encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(vocab_bpe, encoding="utf-8") as f:
            lines = f.read().split("\n")
        # First line is a version header, the last is empty.
        self.ranks = {tuple(m.split()): r for r, m in enumerate(lines[1:-1])}
        self.decoder = {v: k for k, v in self.encoder.items()}
        self.byte_map = _bytes_to_unicode()
        self.byte_unmap = {c: b for b, c in self.byte_map.items()}
        self._cache = {}

    def _bpe(self, symbol_text):
        """Merge the lowest-ranked adjacent pair, all its occurrences left to right,
        until no pair has a rank (GPT-2's algorithm)."""
        parts = list(symbol_text)
        ranks = self.ranks
        while len(parts) > 1:
            best, best_rank = None, None
            for pair in zip(parts, parts[1:]):
                r = ranks.get(pair)
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = pair, r
            if best is None:
                break
            a, b = best
            merged, i, n = [], 0, len(parts)
            while i < n:
                if i < n - 1 and parts[i] == a and parts[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts

    def pretoken_tokens(self, pretoken):
        """The token strings (decimal ids) of one pre-token, cached."""
        toks = self._cache.get(pretoken)
        if toks is None:
            mapped = "".join(self.byte_map[b] for b in pretoken.encode("utf-8"))
            toks = tuple(str(self.encoder[p]) for p in self._bpe(mapped))
            if len(self._cache) >= self.CACHE_LIMIT:
                self._cache.clear()
            self._cache[pretoken] = toks
        return toks

    def _pieces(self, text):
        tokens, starts, words = [], [], []
        pending = None  # token offset of whitespace pre-tokens waiting for a word
        for pt in W.PRETOKEN_RE.findall(text):
            if pt[-1] in W.REGEX_SPACE:
                if pending is None:
                    pending = len(tokens)
            else:
                starts.append(len(tokens) if pending is None else pending)
                pending = None
                words.append(pt[1:] if pt[0] == " " and len(pt) > 1 else pt)
            tokens.extend(self.pretoken_tokens(pt))
        return tokens, starts, W.match_keys(words)

    def decode(self, tokens):
        """Token strings (decimal ids) -> text."""
        chars = "".join(self.decoder[int(t)] for t in tokens)
        return bytes(self.byte_unmap[c] for c in chars).decode("utf-8", errors="replace")


class SentencePieceSpanEncoder(SpanEncoder):
    """sentencepiece model from a local ``.model`` file; tokens are pieces."""

    def __init__(self, model_path, segmenter):
        super().__init__(segmenter)
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=str(model_path))

    def _pieces(self, text):
        words = W.split_words(text)
        tokens, starts = [], []
        for pieces in (self.sp.encode(words, out_type=str) if words else []):
            starts.append(len(tokens))
            tokens.extend(pieces)
        return tokens, starts, W.match_keys(words)

    def decode(self, tokens):
        return self.sp.decode(list(tokens))


class FastBPESpanEncoder(SpanEncoder):
    """fastBPE from a local codes file (and optional vocabulary); tokens carry ``@@``."""

    def __init__(self, codes_path, segmenter, vocab_path=None):
        super().__init__(segmenter)
        import fastBPE

        args = [str(codes_path)] + ([str(vocab_path)] if vocab_path else [])
        self.bpe = fastBPE.fastBPE(*args)

    def _pieces(self, text):
        words = W.split_words(text)
        if not words:
            return [], [], []
        tokens = self.bpe.apply([" ".join(words)])[0].split(" ")
        starts, new_word = [], True
        for i, t in enumerate(tokens):
            if new_word:
                starts.append(i)
            new_word = not t.endswith("@@")
        if len(starts) != len(words):
            raise ValueError(f"fastBPE gave {len(starts)} words for {len(words)} input "
                             f"words in {text[:80]!r}")
        return tokens, starts, W.match_keys(words)

    def decode(self, tokens):
        return " ".join(tokens).replace("@@ ", "")


@dataclass
class EncoderSpec:
    """Everything needed to build an encoder; picklable, so workers rebuild it.

    bpe: ``gpt2`` (needs encoder_json, vocab_bpe), ``sentencepiece`` (needs
    sentencepiece_model) or ``fastbpe`` (needs bpe_codes, optional bpe_vocab).
    ngrams: dictionary path; None means the packaged default. ngrams_top_k keeps the
    K most frequent entries only.
    """

    bpe: str = "gpt2"
    encoder_json: str = None
    vocab_bpe: str = None
    sentencepiece_model: str = None
    bpe_codes: str = None
    bpe_vocab: str = None
    ngrams: str = None
    ngrams_top_k: int = None
    segmentation: str = "greedy"
    seed: int = 0

    def build(self):
        return make_encoder(**self.__dict__)


def make_encoder(bpe="gpt2", encoder_json=None, vocab_bpe=None, sentencepiece_model=None,
                 bpe_codes=None, bpe_vocab=None, ngrams=None, ngrams_top_k=None,
                 segmentation="greedy", seed=0):
    """Build a span encoder. ``ngrams`` is a path, a loaded NgramDict, or None for the
    packaged default dictionary (not loaded at all for ``segmentation="none"``)."""
    if bpe not in BPE_KINDS:
        raise ValueError(f"bpe {bpe!r}: expected one of {BPE_KINDS}")
    if segmentation == "none":
        dictionary = None
    elif ngrams is None or isinstance(ngrams, (str, bytes)) or hasattr(ngrams, "__fspath__"):
        dictionary = load_ngrams(ngrams, top_k=ngrams_top_k)
    else:
        dictionary = ngrams
    seg = Segmenter(dictionary, method=segmentation, seed=seed)
    if bpe == "gpt2":
        if not encoder_json or not vocab_bpe:
            raise ValueError("gpt2 BPE needs local encoder_json and vocab_bpe paths")
        return GPT2SpanEncoder(encoder_json, vocab_bpe, seg)
    if bpe == "sentencepiece":
        if not sentencepiece_model:
            raise ValueError("sentencepiece needs a local sentencepiece_model path")
        return SentencePieceSpanEncoder(sentencepiece_model, seg)
    if not bpe_codes:
        raise ValueError("fastbpe needs a local bpe_codes path")
    return FastBPESpanEncoder(bpe_codes, seg, bpe_vocab)
