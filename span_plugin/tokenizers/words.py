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
    as lower-casing each (the newline also ends a word for Greek final sigma), in one
    call instead of one per word.
    """
    if not words:
        return []
    return "\n".join(words).lower().split("\n")


# ---------------------------------------------------------------------------------
# Word schemes: which "words" an n-gram dictionary and a segmenter talk about.
#
# "gpt2": the GPT-2 pre-tokens above (used by the gpt2, sentencepiece and fastbpe
#         encoders).
# "spm":  sentencepiece's own words (the sentencepiece-line encoder: XLM-R, CamemBERT):
#         the text normalized with sentencepiece's nmt_nfkc rule (NFKC, control
#         characters removed, every kind of space, zero-width ones included, one space,
#         runs of spaces one space) and split at the spaces, so punctuation stays with its
#         word ("York," is one word, as the pieces "▁York ," are). A token starting with
#         "▁" starts such a word. Keys are the normalized words lower-cased.
# "bert": BERT's pre-tokens: the text split on whitespace, every punctuation character
#         a word of its own, every CJK character a word of its own ("don't" -> "don",
#         "'", "t"). Keys are the words lower-cased with accents stripped, so one
#         dictionary serves cased and uncased WordPiece vocabularies alike.
# A dictionary records its scheme in its header; an encoder refuses a dictionary of
# another scheme (its entries could never match, or match the wrong words).

WORD_SCHEMES = ("gpt2", "bert", "spm")

_BERT = {}


def _bert_parts():
    """The canonical BERT normalizer and pre-tokenizer (``tokenizers``, built once)."""
    if not _BERT:
        from tokenizers import normalizers, pre_tokenizers

        _BERT["norm"] = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)
        _BERT["pre"] = pre_tokenizers.BertPreTokenizer()
    return _BERT["norm"], _BERT["pre"]


def bert_words(text: str) -> list:
    """BERT words of ``text``, already in key form (lower-cased, accents stripped)."""
    norm, pre = _bert_parts()
    return [w for w, _ in pre.pre_tokenize_str(norm.normalize_str(text))]


def bert_keys(words) -> list:
    """Keys of words cut by a BERT tokenizer (any casing): the canonical normalization
    applied to each word. Words hold no whitespace, so they are normalized in one call
    joined by spaces; CJK padding can add spaces, hence ``split()``. Falls back to one
    call per word if the count changes (a word the canonical pre-tokenizer would cut)."""
    if not words:
        return []
    norm, _ = _bert_parts()
    keys = norm.normalize_str(" ".join(words)).split()
    if len(keys) != len(words):
        keys = ["".join(norm.normalize_str(w).split()) or w for w in words]
    return keys


SPM_SPACE = "\u2581"  # sentencepiece's word marker; its normalizer writes spaces as it
_SPM = {}


def _spm_normalizer():
    """sentencepiece's nmt_nfkc normalizer (the rule XLM-R's and CamemBERT's models were
    trained with, and spm_train's default), built once."""
    if not _SPM:
        import sentencepiece

        _SPM["norm"] = sentencepiece.SentencePieceNormalizer(rule_name="nmt_nfkc")
    return _SPM["norm"]


def spm_words(text: str) -> list:
    """spm words of ``text``, already in key form (normalized, lower-cased)."""
    return [w for w in _spm_normalizer().normalize(text).lower().split(SPM_SPACE) if w]


def spm_keys(words) -> list:
    """Keys of words as they stand in the raw text (a sentencepiece-line tokenizer's word
    surfaces): normalized and lower-cased, all in one call joined by spaces. Falls back
    to one call per word if the count changes (a word the normalizer cuts or empties:
    a model normalized by another rule than nmt_nfkc)."""
    if not words:
        return []
    keys = spm_words(" ".join(words))
    if len(keys) != len(words):
        keys = ["".join(spm_words(w)) or w.lower() for w in words]
    return keys


def spm_word_ranges(text: str) -> list:
    """``[(char_start, char_end)]`` in ``text`` of its spm words, in order."""
    normalized, where = _spm_normalizer().Normalize(text, with_offsets=True)
    ranges, start = [], None
    for i, ch in enumerate(normalized + SPM_SPACE):  # the marker closes the last word
        if ch != SPM_SPACE and start is None:
            start = i
        elif ch == SPM_SPACE and start is not None:
            ranges.append((where[start], where[i]))
            start = None
    return ranges


def splitter(scheme: str):
    """``line -> words`` (in key form) of a word scheme, for counting n-grams."""
    if scheme == "gpt2":
        return split_words
    if scheme == "bert":
        return bert_words
    if scheme == "spm":
        return spm_words
    raise ValueError(f"word scheme {scheme!r}: expected one of {WORD_SCHEMES}")


def word_ranges(text, scheme):
    """(start, end) character ranges of the words of ``text`` and their match keys, in
    the word scheme ``scheme`` (:data:`WORD_SCHEMES`)."""
    if scheme == "gpt2":
        found = [(m.start(), m.end()) for m in _WORD_RE.finditer(text) if m.end() > m.start()]
        return found, match_keys([text[a:b] for a, b in found])
    if scheme == "bert":
        # Cut the raw text: whitespace and punctuation cuts are cuts of the normalised
        # text too, so each word ends where a WordPiece token ends.
        found = [span for _, span in _bert_parts()[1].pre_tokenize_str(text)]
        return found, bert_keys([text[a:b] for a, b in found])
    if scheme == "spm":
        found = spm_word_ranges(text)
        return found, spm_keys([text[a:b] for a, b in found])
    raise ValueError(f"word scheme {scheme!r}: expected one of {WORD_SCHEMES}")
