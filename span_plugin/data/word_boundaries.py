"""Where words begin in a block of token ids, from the dictionary alone (numpy only), for
span masking's whole words: :func:`build_word_boundaries` of a kind (``wordpiece``,
``gpt2``, ``sentencepiece``, ``token`` or ``auto``) gives a :class:`WordBoundaries`.
The rule of each kind and how ``auto`` picks: docs/PRETRAIN.md, section "Module notes"."""

import json

import numpy as np
import regex

KINDS = ("auto", "gpt2", "wordpiece", "sentencepiece", "token")
SPM_MARK = "\u2581"  # sentencepiece's word marker

# Character classes of GPT-2's pre-tokenizer; SPACE also marks a leading space.
CONT, LETTER, DIGIT, OTHER, SPACE, EDGE = range(6)  # EDGE: always a word edge
CONTRACTIONS = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"}
_LETTER = regex.compile(r"\p{L}")
_DIGIT = regex.compile(r"\p{N}")
_SPACE = regex.compile(r"\s")


def _ordinary(symbols, nspecial):
    """Symbols that came from text: not the specials, ``<mask>`` or fairseq's
    ``madeupword`` padding entries."""
    return [s for s in symbols[nspecial:] if s != "<mask>" and not s.startswith("madeupword")]


def detect_kind(symbols, nspecial, where="dict.txt"):
    ordinary = _ordinary(symbols, nspecial)
    if ordinary and all(s.isdigit() for s in ordinary):
        return "gpt2"
    if any(s.startswith("##") for s in ordinary):
        return "wordpiece"
    if any(s.startswith(SPM_MARK) for s in ordinary):
        return "sentencepiece"
    raise ValueError(
        f"{where}: cannot tell where words begin from its symbols (neither GPT-2 ids, "
        f"WordPiece '##' pieces nor sentencepiece '{SPM_MARK}' pieces); pass --word-boundaries token (every token a word) or "
        f"the kind of this vocabulary")


def _char_class(ch):
    # The regex module's classes, as GPT-2's pre-tokenizer (words.py) uses them.
    if _SPACE.match(ch):
        return SPACE
    if _LETTER.match(ch):
        return LETTER
    if _DIGIT.match(ch):
        return DIGIT
    return OTHER


def _utf8_len(lead):
    """Bytes of the character a lead byte starts (0 for a continuation byte)."""
    if lead < 0x80:
        return 1
    if lead < 0xC0:
        return 0
    return 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def byte_classes(data: bytes):
    """``(first, last, blank)`` of one token's bytes: the class of its first and last
    character (CONT when it starts inside a character, EDGE when a character is cut),
    and whether it is whitespace only."""
    if not data:
        return EDGE, EDGE, False
    n = _utf8_len(data[0])
    if n == 0:
        first = CONT
    elif len(data) < n:
        first = EDGE
    else:
        first = _char_class(data[:n].decode("utf-8", errors="replace"))
    k = len(data) - 1
    while k > 0 and _utf8_len(data[k]) == 0:
        k -= 1
    n = _utf8_len(data[k])
    last = _char_class(data[k:].decode("utf-8", errors="replace")) if n and k + n == len(data) else EDGE
    text = data.decode("utf-8", errors="replace")
    blank = bool(text) and all(_SPACE.match(c) for c in text)
    return first, last, blank


class WordBoundaries:
    """``boundaries(tokens [T]) -> bool [T]``: True where a token begins a word.

    begins: bool ``[V]``, for vocabularies where a token's own symbol decides.
    """

    def __init__(self, begins):
        self.begins = np.asarray(begins, dtype=bool)

    def __call__(self, tokens):
        return self.begins[tokens]


class GPT2WordBoundaries(WordBoundaries):
    """GPT-2 byte-level BPE: a token's start depends on the token before it.

    first, last: int8 ``[V]`` character classes; blank: bool ``[V]`` whitespace-only.
    """

    def __init__(self, first, last, blank):
        self.first, self.last, self.blank = first, last, blank

    def __call__(self, tokens):
        first = self.first[tokens]
        prev_last = np.empty_like(first)
        prev_last[0] = EDGE
        prev_last[1:] = self.last[tokens[:-1]]
        prev_blank = np.zeros(len(tokens), dtype=bool)
        prev_blank[1:] = self.blank[tokens[:-1]]
        edge = (first == SPACE) | (first == EDGE) | (prev_last == EDGE) | (first != prev_last)
        return edge & (first != CONT) & ~prev_blank


def gpt2_boundaries(symbols, nspecial, encoder_json):
    """Tables of a GPT-2 ``dict.txt`` (decimal ids) from its ``encoder.json``."""
    from span_plugin.tokenizers.gpt2 import bytes_to_unicode

    with open(encoder_json, encoding="utf-8") as f:
        decoder = {v: k for k, v in json.load(f).items()}
    unmap = {c: b for b, c in bytes_to_unicode().items()}
    size = len(symbols)
    first = np.full(size, EDGE, dtype=np.int8)
    last = np.full(size, EDGE, dtype=np.int8)
    blank = np.zeros(size, dtype=bool)
    for i, s in enumerate(symbols):
        if i < nspecial or not s.isdigit() or int(s) not in decoder:
            continue  # specials and other symbols are words of their own
        piece = decoder[int(s)]
        if piece in CONTRACTIONS:
            continue
        first[i], last[i], blank[i] = byte_classes(bytes(unmap[c] for c in piece))
    return GPT2WordBoundaries(first, last, blank)


def build_word_boundaries(kind, symbols, nspecial, encoder_json=None, where="dict.txt"):
    """The word-start rule of a dictionary (``symbols`` in id order; the first
    ``nspecial`` are fairseq's specials). ``encoder_json`` is needed for gpt2."""
    if kind == "auto":
        kind = detect_kind(symbols, nspecial, where)
    if kind == "gpt2":
        if not encoder_json:
            raise ValueError(
                f"{where} holds GPT-2 BPE ids: word boundaries need its encoder.json "
                f"(--encoder-json PATH, or put encoder.json beside dict.txt)")
        return gpt2_boundaries(symbols, nspecial, encoder_json)
    if kind == "wordpiece":
        return WordBoundaries([not s.startswith("##") for s in symbols])
    if kind == "sentencepiece":
        return WordBoundaries([s.startswith(SPM_MARK) for s in symbols])
    if kind == "token":
        return WordBoundaries(np.ones(len(symbols), dtype=bool))
    raise ValueError(f"word boundaries {kind!r}: expected one of {KINDS}")
