"""BERT-family WordPiece through the ``tokenizers`` library.

The library encodes the line with the model's own normalizer and pre-tokenizer; the
words are its pre-tokens (its ``word_ids``), so segmentation and sub-words cannot
disagree. Tokens are the vocabulary's strings, with BERT's ``[CLS] [SEP] [PAD] [UNK]
[MASK]`` written as fairseq's ``<s> </s> <pad> <unk> <mask>`` (the names span-convert's
``dict.txt`` uses). Words are in the ``bert`` word scheme
(:mod:`span_plugin.tokenizers.words`).
"""

import json
import os

import regex

from span_plugin.formats.lines import MAX_TOKENIZER_BYTES, regular_file
from span_plugin.tokenizers import words as W
from span_plugin.tokenizers.base import Tokenizer, register_tokenizer, skip_leading_space
from span_plugin.tokenizers.options import Option

# BERT's special tokens and the fairseq symbols they become (span-convert maps them).
BERT_SPECIALS = (("[CLS]", "<s>"), ("[PAD]", "<pad>"), ("[SEP]", "</s>"), ("[UNK]", "<unk>"))
BERT_MASK = "[MASK]"  # becomes <mask>, which the task appends last


@register_tokenizer("wordpiece")
class WordPieceTokenizer(Tokenizer):
    """From a local ``tokenizer.json``, ``vocab.txt``, or a folder holding one (a
    Hugging Face model folder or the output of ``span-convert``). Padding and
    truncation stored in a ``tokenizer.json`` are switched off: the task pads and
    shortens.

    Fast path: a line of printable ASCII (most English text) with a BERT normalizer and
    pre-tokenizer needs no Unicode work: its words are runs of letters and digits and
    single punctuation characters, lower-cased when the normalizer lower-cases, and
    each distinct word goes through the library's WordPiece model once (cached).
    Every other line, and any line holding an added token such as ``[SEP]``, takes the
    library's full pipeline. Both give the same tokens (tested on every GLUE row here).
    """

    word_scheme = "bert"
    # Recorded as the file a folder resolves to, and its tokenizer_config.json when a
    # bare vocab.txt took its casing from one (record key ``wordpiece_config``).
    files = (Option("wordpiece", help="WordPiece tokenizer.json, vocab.txt, or a folder with "
                    "one (a Hugging Face model or span-convert output)",
                    recorded=lambda path: recorded_wordpiece(path)),)
    needs = "wordpiece needs a local tokenizer.json, vocab.txt or model folder (--wordpiece)"
    # BERT's special tokens -> the fairseq symbols that take their embedding rows in a
    # span-convert checkpoint (one table for both).
    SPECIALS = {**dict(BERT_SPECIALS), BERT_MASK: "<mask>"}
    CACHE_LIMIT = 1 << 20
    _ASCII_WORD = regex.compile(r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]")
    _NOT_PLAIN_ASCII = regex.compile(r"[^\x20-\x7e\t\n\r]")

    def __init__(self, wordpiece):
        self.library = load_wordpiece(wordpiece)  # the ``tokenizers`` library's Tokenizer
        layout = json.loads(self.library.to_str())
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
            toks = tuple(specials.get(t.value, t.value) for t in self.library.model.tokenize(word))
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

    def pieces(self, text):
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
        e = self.library.encode(text, add_special_tokens=False)
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

    def offsets(self, text):
        e = self.library.encode(text, add_special_tokens=False)
        return skip_leading_space(text, [tuple(o) for o in e.offsets])

    def decode(self, tokens):
        inverse = {v: k for k, v in self.SPECIALS.items()}
        return self.library.decode(
            [self.library.token_to_id(inverse.get(t, t)) for t in tokens],
            skip_special_tokens=False)


def resolve_wordpiece(path):
    """``(tokenizer file, tokenizer_config.json or None)`` that ``--wordpiece PATH``
    stands for: a tokenizer.json or vocab.txt, or a folder holding one (tokenizer.json
    preferred). The config is returned only for a bare vocab.txt that takes its casing
    from a tokenizer_config.json beside it."""
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
    regular_file(path, "--wordpiece", MAX_TOKENIZER_BYTES)
    config = os.path.join(os.path.dirname(path), "tokenizer_config.json")
    if path.endswith(".json") or not os.path.exists(config):
        config = None
    else:
        regular_file(config, None, MAX_TOKENIZER_BYTES)
    return path, config


def recorded_wordpiece(path):
    """The files ``--wordpiece PATH`` stands for in a data record."""
    tokenizer, config = resolve_wordpiece(path)
    return {"wordpiece": tokenizer, "wordpiece_config": config}


def load_wordpiece(path):
    """A ``tokenizers.Tokenizer`` (padding and truncation off) from a tokenizer.json, a
    vocab.txt or a folder with one of them (:func:`resolve_wordpiece`). For a bare
    vocab.txt, lower-casing follows ``do_lower_case`` of a tokenizer_config.json beside
    it, else the vocabulary itself (no upper-case entry: an uncased model)."""
    from tokenizers import Tokenizer as LibraryTokenizer
    from tokenizers.implementations import BertWordPieceTokenizer

    path, config = resolve_wordpiece(path)
    if path.endswith(".json"):
        tok = LibraryTokenizer.from_file(path)
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
