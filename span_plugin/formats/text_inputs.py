"""Checks of what users pass the predictors: a string is one input, anything else that
is not text is a TypeError naming its index and type, and inputs cut to the model's
positions are counted in one warning. Raw text is cut into CoNLL-like words here too (:data:`WORD_RE`).

Pure Python: no torch, no fairseq.
"""

import contextlib
import contextvars
import warnings

import regex

from span_plugin.formats.unicode_text import is_blank


class InputCutWarning(UserWarning):
    """Inputs longer than the model's positions were cut (as the checkpoint records)."""


def check_batch_size(batch_size):
    """``batch_size`` (examples per forward pass) as given, when it is a positive
    integer; else a ValueError saying what it must be."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size {batch_size!r}: expected a positive integer (examples "
                         f"per forward pass)")
    return batch_size


def _kind(value):
    return type(value).__name__


def _not_text(value, what):
    if isinstance(value, (bytes, bytearray)):
        return TypeError(f"{what} is {_kind(value)}, expected str: decode it first "
                         f"(e.g. value.decode('utf-8'))")
    return TypeError(f"{what} is {_kind(value)} ({repr(value)[:40]}), expected str")


def check_text(value, what):
    """``value`` when it is a str of valid Unicode, else a TypeError naming ``what`` and
    its type, or a ValueError naming ``what`` and the place of a lone surrogate (which
    no tokenizer can encode: text decoded with ``errors="surrogateescape"``, or cut
    inside a UTF-16 pair) or of a NUL character (binary data, not text)."""
    if not isinstance(value, str):
        raise _not_text(value, what)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{what} holds a lone surrogate U+{ord(value[err.start]):04X} at "
                         f"character {err.start}, which is not text: expected a string that "
                         f"encodes as UTF-8") from None
    if "\0" in value:  # binary data read as text: a model would answer with NULs
        raise ValueError(f"{what} holds a NUL character (U+0000) at character "
                         f"{value.index(chr(0))}, which is not text: expected text")
    return value


def as_list(items, what, expected):
    """The items of a call as a list; a str is one item. Bytes, and anything that is
    not a list, tuple or other sequence of items, are a TypeError naming ``what`` and
    what was ``expected``."""
    if isinstance(items, str):
        return [items]
    if isinstance(items, (bytes, bytearray)) or not hasattr(items, "__iter__") \
            or isinstance(items, dict):
        raise TypeError(f"{what} is {_kind(items)}, expected {expected}")
    return list(items)


def text_examples(examples):
    """Sentence inputs -> a list of tuples of str (1: a sentence, 2: a pair).

    examples: a str (one sentence), or a list of str / (str, str) pairs. Raises
    TypeError naming the index and type of the first item that is not text, and
    ValueError for a tuple of another width.
    """
    expected = "a string, or a list of strings or (string, string) pairs"
    out = []
    for i, e in enumerate(as_list(examples, "examples", expected)):
        if isinstance(e, str):
            out.append((check_text(e, f"example {i}"),))
            continue
        if not isinstance(e, (tuple, list)):
            raise _not_text(e, f"example {i}") if isinstance(e, (bytes, bytearray)) else \
                TypeError(f"example {i} is {_kind(e)} ({repr(e)[:40]}), expected a string "
                          f"or a (string, string) pair")
        if len(e) not in (1, 2):
            raise ValueError(f"example {i} has {len(e)} texts: expected one sentence or a pair")
        out.append(tuple(check_text(t, f"example {i}, text {k}") for k, t in enumerate(e)))
    return out


INPUT_KINDS = {1: "single sentences (one string each)", 2: "sentence pairs ((a, b) tuples)"}


def example_width(examples, trained=None):
    """How many texts each of ``examples`` (:func:`text_examples`' list, not empty) holds:
    1 or 2, the same for every example and, where ``trained`` (the number of inputs the
    model was trained on) is given, equal to it; else a ValueError saying what it takes."""
    widths = {len(e) for e in examples}
    if len(widths) != 1:
        raise ValueError("mix of single sentences and pairs in one call")
    width = widths.pop()
    if trained and width != trained:
        raise ValueError(f"this model was trained on {INPUT_KINDS[trained]}; got "
                         f"{INPUT_KINDS[width]}: give it what it was trained on")
    return width


def question_pairs(pairs):
    """QA inputs -> ``[(question, context)]``; a question or context that is empty
    (white space only) is a ValueError, as ``span-preprocess qa`` refuses it."""
    out = []
    for i, pair in enumerate(as_list(pairs, "pairs", "a list of (question, context) pairs")):
        if isinstance(pair, (str, bytes, bytearray)) or not isinstance(pair, (tuple, list)) \
                or len(pair) != 2:
            raise TypeError(f"pair {i} is {_kind(pair)} ({repr(pair)[:40]}), expected a "
                            f"(question, context) pair of strings")
        question = check_text(pair[0], f"pair {i}: the question")
        context = check_text(pair[1], f"pair {i}: the context")
        if is_blank(question):  # as span-preprocess qa: invisible characters are nothing
            raise ValueError(f"pair {i}: empty question, expected the question's text")
        if is_blank(context):
            raise ValueError(f"pair {i}: empty context, expected the passage's text")
        out.append((question, context))
    return out


_TALLY = contextvars.ContextVar("cut_tally", default=None)


def warn_cut(full_lengths, limit, how):
    """One warning when any of ``full_lengths`` (tokens of each input before
    shortening) is over ``limit``: how many inputs, how many tokens in all, and
    ``how`` they were cut. Inside :func:`one_cut_warning` the counts are added up
    instead, for its one warning. Returns ``(inputs cut, tokens cut)``."""
    over = [n - limit for n in full_lengths if n > limit]
    tally = _TALLY.get()
    if tally is not None:
        tally["inputs"] += len(full_lengths)
        if over:
            tally.update(cut=tally["cut"] + len(over), tokens=tally["tokens"] + sum(over),
                         limit=limit, how=how)
    elif over:
        warnings.warn(_cut_message(len(over), len(full_lengths), limit, sum(over), how),
                      InputCutWarning, stacklevel=3)
    return len(over), sum(over)


def _cut_message(cut, inputs, limit, tokens, how):
    return (f"{cut} of {inputs} inputs are longer than the model's {limit} positions: "
            f"{tokens} tokens cut ({how})")


@contextlib.contextmanager
def one_cut_warning():
    """``with one_cut_warning():`` the inputs that predictions made in chunks (a file
    read a few thousand rows at a time) cut are counted in one warning at the end, as
    one call over the whole file counts them, not one warning per chunk."""
    tally = {"inputs": 0, "cut": 0, "tokens": 0, "limit": None, "how": None}
    token = _TALLY.set(tally)
    try:
        yield tally
    finally:
        _TALLY.reset(token)
    if tally["cut"]:
        warnings.warn(_cut_message(tally["cut"], tally["inputs"], tally["limit"],
                                   tally["tokens"], tally["how"]), InputCutWarning, stacklevel=3)


# Raw text -> CoNLL-like words: runs of letters and digits joined by ``-``, ``.`` or
# ``,``, abbreviations such as ``U.S.``, a clitic such as ``'s``, every other character alone.
WORD_RE = regex.compile(
    r"(?:\p{L}\.){2,}|[\p{L}\p{N}]+(?:[-.,][\p{L}\p{N}]+)*|'\p{L}+|\S")


def word_lists(sentences):
    """``sentences`` as a list of word lists, each word a str; a str (raw text, or one
    sentence given as text) is a TypeError naming what to call instead."""
    if isinstance(sentences, (str, bytes, bytearray)):
        raise TypeError(f"sentences is {type(sentences).__name__}, expected a list of word "
                        f"lists; predict_entities(text) reads raw text")
    out = []
    for i, words in enumerate(sentences):
        if isinstance(words, (str, bytes, bytearray)) or not isinstance(words, (list, tuple)):
            raise TypeError(f"sentence {i} is {type(words).__name__} ({repr(words)[:40]}), "
                            f"expected a list of words (str)")
        out.append([check_text(w, f"sentence {i}, word {k}") for k, w in enumerate(words)])
    return out


def words_of(text):
    """``[(word, start, end)]`` of raw text, character offsets, end exclusive."""
    return [(m.group(), m.start(), m.end()) for m in WORD_RE.finditer(text)]
