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
- WordPiece (BERT-family): the ``tokenizers`` library encodes the line with the
  model's own normalizer and pre-tokenizer; the words are its pre-tokens (its
  ``word_ids``), so segmentation and sub-words cannot disagree. Tokens are the
  vocabulary's strings, with BERT's ``[CLS] [SEP] [PAD] [UNK] [MASK]`` written as
  fairseq's ``<s> </s> <pad> <unk> <mask>`` (the names span-convert's ``dict.txt``
  uses). Words are in the ``bert`` word scheme, the others in ``gpt2``
  (:mod:`span_plugin.tokenizers.words`).

Nothing is downloaded: every encoder takes local file paths.
"""

import json
from dataclasses import dataclass

import regex

from span_plugin.tokenizers import words as W

BPE_KINDS = ("gpt2", "sentencepiece", "fastbpe", "wordpiece")


# BERT's special tokens and the fairseq symbols they become (span-convert maps them).
BERT_SPECIALS = (("[CLS]", "<s>"), ("[PAD]", "<pad>"), ("[SEP]", "</s>"), ("[UNK]", "<unk>"))
BERT_MASK = "[MASK]"  # becomes <mask>, which the task appends last


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

    word_scheme = "gpt2"  # the words its keys are made of (words.WORD_SCHEMES)

    def __init__(self, segmenter):
        self.segmenter = segmenter
        ngrams = segmenter.ngrams
        if ngrams is not None and ngrams.words != self.word_scheme:
            raise ValueError(
                f"n-gram dictionary {ngrams.path} is over {ngrams.words!r} words, but "
                f"{type(self).__name__} segments {self.word_scheme!r} words: its entries "
                f"could not match. Build one with `span-preprocess ngrams --words "
                f"{self.word_scheme} ...` (or leave --ngrams out for the packaged one)")

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
        """Debug helper: the segmentation of ``text`` as lists of word keys."""
        text = text.strip()
        _, _, keys = self._pieces(text)
        out, i = [], 0
        for n in self.segmenter(keys, text):
            out.append(keys[i:i + n])
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


class WordPieceSpanEncoder(SpanEncoder):
    """BERT-family WordPiece through ``tokenizers``, from a local ``tokenizer.json``,
    ``vocab.txt``, or a folder holding one (a Hugging Face model folder or the output
    of ``span-convert``). Padding and truncation stored in a ``tokenizer.json`` are
    switched off: the task pads and shortens.

    Fast path: a line of printable ASCII (most English text) with a BERT normalizer and
    pre-tokenizer needs no Unicode work: its words are runs of letters and digits and
    single punctuation characters, lower-cased when the normalizer lower-cases, and
    each distinct word goes through the library's WordPiece model once (cached).
    Every other line, and any line holding an added token such as ``[SEP]``, takes the
    library's full pipeline. Both give the same tokens (tested on every GLUE row here).
    """

    word_scheme = "bert"
    # BERT's special tokens -> the fairseq symbols that take their embedding rows in a
    # span-convert checkpoint (one table for both).
    SPECIALS = {**dict(BERT_SPECIALS), BERT_MASK: "<mask>"}
    CACHE_LIMIT = 1 << 20
    _ASCII_WORD = regex.compile(r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]")
    _NOT_PLAIN_ASCII = regex.compile(r"[^\x20-\x7e\t\n\r]")

    def __init__(self, path, segmenter):
        super().__init__(segmenter)
        self.tokenizer = load_wordpiece(path)
        layout = json.loads(self.tokenizer.to_str())
        norm, pre = layout.get("normalizer") or {}, layout.get("pre_tokenizer") or {}
        self.fast = norm.get("type") == "BertNormalizer" and pre.get("type") == "BertPreTokenizer"
        self.lowercase = bool(norm.get("lowercase"))
        self.added = [(a["content"].lower() if a.get("normalized") else a["content"],
                       bool(a.get("normalized"))) for a in layout.get("added_tokens", [])]
        self._cache = {}

    def _word_tokens(self, word):
        toks = self._cache.get(word)
        if toks is None:
            specials = self.SPECIALS
            toks = tuple(specials.get(t.value, t.value) for t in self.tokenizer.model.tokenize(word))
            if len(self._cache) >= self.CACHE_LIMIT:
                self._cache.clear()
            self._cache[word] = toks
        return toks

    def _plain(self, text):
        """True when the fast path gives the library's result for ``text``."""
        if not self.fast or self._NOT_PLAIN_ASCII.search(text):
            return False
        lower = None
        for content, normalized in self.added:
            if normalized:
                lower = text.lower() if lower is None else lower
            if content in (lower if normalized else text):
                return False
        return True

    def _pieces(self, text):
        if self._plain(text):
            words = self._ASCII_WORD.findall(text.lower() if self.lowercase else text)
            tokens, starts = [], []
            for w in words:
                starts.append(len(tokens))
                tokens.extend(self._word_tokens(w))
            return tokens, starts, W.match_keys(words)
        return self._pieces_full(text)

    def _pieces_full(self, text):
        """The library's whole pipeline: words are its pre-tokens (``word_ids``)."""
        e = self.tokenizer.encode(text, add_special_tokens=False)
        specials = self.SPECIALS
        tokens = [specials.get(t, t) for t in e.tokens]
        starts, words, offsets, last = [], [], e.offsets, None
        for i, w in enumerate(e.word_ids):
            if w != last:
                starts.append(i)
                last = w
        for k, s in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(tokens)
            words.append(text[offsets[s][0]:offsets[end - 1][1]])
        return tokens, starts, W.bert_keys(words)

    def decode(self, tokens):
        inverse = {v: k for k, v in self.SPECIALS.items()}
        return self.tokenizer.decode(
            [self.tokenizer.token_to_id(inverse.get(t, t)) for t in tokens],
            skip_special_tokens=False)


def resolve_wordpiece(path):
    """``(tokenizer file, tokenizer_config.json or None)`` that ``--wordpiece PATH``
    stands for: a tokenizer.json or vocab.txt, or a folder holding one (tokenizer.json
    preferred). The config is returned only for a bare vocab.txt that takes its casing
    from a tokenizer_config.json beside it."""
    import os

    path = str(path)
    if os.path.isdir(path):
        for name in ("tokenizer.json", "vocab.txt"):
            if os.path.exists(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
        else:
            raise FileNotFoundError(f"{path}: no tokenizer.json or vocab.txt in this folder")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: WordPiece tokenizer file not found")
    config = os.path.join(os.path.dirname(path), "tokenizer_config.json")
    if path.endswith(".json") or not os.path.exists(config):
        config = None
    return path, config


def load_wordpiece(path):
    """A ``tokenizers.Tokenizer`` (padding and truncation off) from a tokenizer.json, a
    vocab.txt or a folder with one of them (:func:`resolve_wordpiece`). For a bare
    vocab.txt, lower-casing follows ``do_lower_case`` of a tokenizer_config.json beside
    it, else the vocabulary itself (no upper-case entry: an uncased model)."""
    from tokenizers import Tokenizer
    from tokenizers.implementations import BertWordPieceTokenizer

    path, config = resolve_wordpiece(path)
    if path.endswith(".json"):
        tok = Tokenizer.from_file(path)
        model = json.loads(tok.to_str())["model"]
        if model.get("type") != "WordPiece":
            raise ValueError(f"{path}: a {model.get('type')} tokenizer; --bpe wordpiece "
                             f"needs a WordPiece one (BERT family)")
    else:
        with open(path, encoding="utf-8") as f:
            vocab = [line.rstrip("\n") for line in f]
        if config:
            with open(config, encoding="utf-8") as f:
                lower = bool(json.load(f).get("do_lower_case", True))
        else:
            lower = not any(t != t.lower() for t in vocab if not t.startswith("["))
        tok = BertWordPieceTokenizer(path, lowercase=lower)
    tok.no_padding()
    tok.no_truncation()
    return tok


@dataclass
class EncoderSpec:
    """Everything needed to build an encoder; picklable, so workers rebuild it.

    bpe: ``gpt2`` (needs encoder_json, vocab_bpe), ``sentencepiece`` (needs
    sentencepiece_model), ``fastbpe`` (needs bpe_codes, optional bpe_vocab) or
    ``wordpiece`` (needs wordpiece: tokenizer.json, vocab.txt or their folder).
    ngrams: dictionary path; None means the packaged default of the encoder's word
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

    def build(self):
        return make_encoder(**self.__dict__)


def make_encoder(bpe="gpt2", encoder_json=None, vocab_bpe=None, sentencepiece_model=None,
                 bpe_codes=None, bpe_vocab=None, ngrams=None, ngrams_top_k=None,
                 segmentation="greedy", seed=0, wordpiece=None):
    """Build a span encoder. ``ngrams`` is a path, a loaded NgramDict, or None for the
    packaged default dictionary of the encoder's word scheme (not loaded at all for
    ``segmentation="none"``)."""
    from span_plugin.preprocess.ngrams import load_ngrams
    from span_plugin.preprocess.segment import Segmenter

    if bpe not in BPE_KINDS:
        raise ValueError(f"bpe {bpe!r}: expected one of {BPE_KINDS}")
    scheme = WordPieceSpanEncoder.word_scheme if bpe == "wordpiece" else SpanEncoder.word_scheme
    if segmentation == "none":
        dictionary = None
    elif ngrams is None or isinstance(ngrams, (str, bytes)) or hasattr(ngrams, "__fspath__"):
        dictionary = load_ngrams(ngrams, top_k=ngrams_top_k, words=scheme)
    else:
        dictionary = ngrams
    seg = Segmenter(dictionary, method=segmentation, seed=seed)
    if bpe == "gpt2":
        if not encoder_json or not vocab_bpe:
            raise ValueError("gpt2 BPE needs local encoder_json and vocab_bpe paths")
        return GPT2SpanEncoder(encoder_json, vocab_bpe, seg)
    if bpe == "wordpiece":
        if not wordpiece:
            raise ValueError("wordpiece needs a local tokenizer.json, vocab.txt or model "
                             "folder (--wordpiece)")
        return WordPieceSpanEncoder(wordpiece, seg)
    if bpe == "sentencepiece":
        if not sentencepiece_model:
            raise ValueError("sentencepiece needs a local sentencepiece_model path")
        return SentencePieceSpanEncoder(sentencepiece_model, seg)
    if not bpe_codes:
        raise ValueError("fastbpe needs a local bpe_codes path")
    return FastBPESpanEncoder(bpe_codes, seg, bpe_vocab)
