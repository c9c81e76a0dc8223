"""The rows of one split of a user's file, as the readers return them, and the one
reading of numbers (regression labels) the readers share."""

import re
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class SplitRows:
    """The fields of one split: ``inputs[k][i]`` is input k of row i, ``lines[i]`` the
    1-based line of the file it was read from."""

    inputs: list  # [num_inputs][num_rows] strings
    labels: list = None  # [num_rows] strings, or None (unlabelled split)
    dropped: list = field(default_factory=list)  # (line, reason)
    rows: int = 0
    lines: list = field(default_factory=list)  # [num_rows] source line of each row
    extra: tuple = ()  # names of further per-row lists a reader attached (pairs: phrases)
    replacements: int = 0  # invalid UTF-8 sequences read as U+FFFD (bad_utf8="replace")
    # (label as written, label as read) -> rows: class labels that NFC and stripping
    # white space changed (formats.unicode_text.class_label), for the summary and record
    label_variants: Counter = field(default_factory=Counter)

    def add_label(self, raw, label):
        """Append the class ``label`` read from ``raw``, counting it when they differ."""
        if raw != label:
            self.label_variants[(raw, label)] += 1
        self.labels.append(label)

    def leave_out(self, reasons):
        """Remove the rows ``{row index: reason}`` from every input, the labels, the
        lines and the ``extra`` lists, and list them in ``dropped`` (file order)."""
        if not reasons:
            return
        keep = [i for i in range(self.rows) if i not in reasons]

        def kept(values):
            return [values[i] for i in keep]

        self.inputs = [kept(col) for col in self.inputs]
        if self.labels is not None:
            self.labels = kept(self.labels)
        self.dropped = sorted(self.dropped + [(self.lines[i], why) for i, why in reasons.items()],
                              key=lambda d: d[0])
        self.lines = kept(self.lines)
        for name in self.extra:
            setattr(self, name, kept(getattr(self, name)))
        self.rows = len(keep)


# ASCII decimal notation only: Python's float() also reads "1_000", "nan", "inf" and
# Arabic-Indic or full-width digits, none of which a score file means.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


# Labels are trained on as float32: a larger value becomes inf there, and the loss NaN.
FLOAT32_MAX = 3.4028234663852886e38


def read_decimal(text):
    """The number ``text`` writes in ASCII decimal notation (``3``, ``-0.25``,
    ``2.5e-3``), finite in float32, or None when it is anything else."""
    if not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if abs(value) <= FLOAT32_MAX else None  # "1e999" is inf, "1e308" inf in float32
