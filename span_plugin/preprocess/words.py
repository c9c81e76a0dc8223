"""The word tokenizer shared by the n-gram counter and the segmenter.

Words are GPT-2's pre-tokens (the regex fairseq's ``gpt2_bpe_utils`` splits text with)
with whitespace removed: GPT-2 splits punctuation and the contractions ``'s 't 're
've 'm 'll 'd`` off words, so ``"York,"`` gives the words ``York`` and ``,`` and
``"new york,"`` can match the n-gram ``new york``. Pre-tokens made only of whitespace
give no word. Matching keys are the words lower-cased with :func:`match_keys`; the
dictionary builder and every segmenter use these two functions and nothing else, so
every dictionary entry can match.
"""

import regex

# GPT-2's pre-tokenizer, as in fairseq/data/encoders/gpt2_bpe_utils.py.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
PRETOKEN_RE = regex.compile(GPT2_PATTERN)

# The same alternatives in the same order, so it cuts text at exactly the same places;
# \K drops the optional leading space from the match and whitespace-only pre-tokens
# match as the empty string. findall on it gives the words without a second pass.
_WORD_RE = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\K\p{L}+| ?\K\p{N}+| ?\K[^\s\p{L}\p{N}]+|\s+(?!\S)\K|\s+\K"""
)

# The characters regex's \s matches (Unicode White_Space; all of them lie below
# U+3001). Python's str.isspace also accepts U+001C..U+001F, which GPT-2's regex
# treats as punctuation, so it cannot be used to tell a whitespace pre-token.
REGEX_SPACE = frozenset(chr(c) for c in range(0x3001) if regex.match(r"\s", chr(c)))


def pretokens(text: str) -> list:
    """GPT-2 pre-tokens of ``text`` (leading spaces kept, as BPE needs them)."""
    return PRETOKEN_RE.findall(text)


def is_space(pretoken: str) -> bool:
    """True for a pre-token made only of whitespace (it holds no word)."""
    return pretoken[-1] in REGEX_SPACE


def word_of(pretoken: str) -> str:
    """The word in a non-whitespace pre-token: its optional leading space removed."""
    return pretoken[1:] if pretoken[0] == " " and len(pretoken) > 1 else pretoken


def split_words(text: str) -> list:
    """Words of ``text`` in order (same as ``word_of`` over non-space pre-tokens)."""
    return [w for w in _WORD_RE.findall(text) if w]


def match_keys(words) -> list:
    """Case-folded matching keys, one per word.

    Words never hold whitespace, so lower-casing them joined by newlines is the same
    as lower-casing each (the newline also ends a word for Greek final sigma) and is
    several times faster.
    """
    if not words:
        return []
    return "\n".join(words).lower().split("\n")
