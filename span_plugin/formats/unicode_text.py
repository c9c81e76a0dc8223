"""What shows in users' text: class labels as they are compared, text that is empty
to the eye, and the edges of an answer.

- A class label is compared after Unicode NFC and stripping surrounding white space,
  so ``café`` typed with a combining accent and ``'pos '`` are ``café`` and ``pos``
  (the readers count each label so merged); a label holding a character that shows
  nothing (a zero-width space, a bidi mark, a control) is refused: two labels that
  look the same would be two classes.
- Text made only of white space and such characters is empty wherever empty text is
  refused (a question, a context).
- An answer cut from a context never begins or ends with them.
"""

import unicodedata

# Categories of characters that show nothing: controls, format characters (zero-width
# space and joiners, the BOM, bidi marks, the soft hyphen), surrogates, private use and
# unassigned code points.
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def shows_nothing(char):
    return char.isspace() or unicodedata.category(char) in INVISIBLE_CATEGORIES


def is_blank(text):
    """True when ``text`` holds no character that shows (``"\\u200b \\u2060"``)."""
    return all(shows_nothing(c) for c in text)


def describe_char(char):
    """``U+200B ZERO WIDTH SPACE``."""
    return f"U+{ord(char):04X} {unicodedata.name(char, '(no name)')}"


def class_label(raw):
    """``raw`` as class labels are compared: NFC, surrounding white space stripped."""
    return unicodedata.normalize("NFC", raw).strip()


def label_problem(label):
    """Why ``label`` (as :func:`class_label` returns it) cannot be a class label, or
    None: it is empty, holds white space (a label is one token of label/dict.txt), or
    holds a character that shows nothing."""
    if not label:
        return "is empty"
    if any(c.isspace() for c in label):
        return "holds whitespace; class labels are single tokens"
    hidden = next((c for c in label if shows_nothing(c)), None)
    if hidden is not None:
        return (f"holds {describe_char(hidden)}, a character that shows nothing: two labels "
                f"that look the same would be two classes; remove it")
    return None


def trim_invisible(text, start, end):
    """``(start, end)`` of ``text[start:end]`` without white space and characters that
    show nothing at either edge (the span unchanged when nothing else is left)."""
    a, b = start, end
    while a < b and shows_nothing(text[a]):
        a += 1
    while b > a and shows_nothing(text[b - 1]):
        b -= 1
    return (a, b) if a < b else (start, end)
