"""argparse ``type=`` helpers: the one place the commands' numeric and character flags
are checked. A value outside its range is refused while the command line is parsed
(argparse prints the usage, ``argument --FLAG: ...`` with the range, and exits 2),
before it can reach a reader, a loop or torch (``--batch-size -1``, ``--n-best 0``,
``--ngrams-top-k -3``, a two-character ``--delimiter``)."""

import argparse
import math


def whole_number(low, high=None):
    """A type that takes an integer in ``[low, high]`` (``high`` None: no upper bound)."""
    where = f"from {low} to {high}" if high is not None else f"{low} or more"

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number; expected {where}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is out of range; expected {where}")
        return value

    return parse


positive = whole_number(1)  # counts of things that must exist: a batch, workers, answers
count = whole_number(0)  # counts that may be zero: top-k entries, held-out rows


def finite(text):
    """A finite float (not nan, inf or text)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def at_least_zero(text):
    """A finite float, 0 or more (a ratio, a threshold on probabilities)."""
    value = finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value:g} is out of range; expected 0 or more")
    return value


def number_or(*words):
    """A type that takes a finite float or one of ``words`` (kept as the word)."""
    def parse(text):
        if text in words:
            return text
        try:
            return finite(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither a finite number nor {' nor '.join(map(repr, words))}") from None

    return parse


TAB_NAMES = ("\\t", "tab", "TAB")


def one_character(text):
    """One character; ``\\t``, ``tab`` and ``TAB`` stand for a tab (hard to type)."""
    if text in TAB_NAMES:
        return "\t"
    if len(text) != 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is {len(text)} characters; expected exactly one (or \\t / tab for a tab)")
    return text
