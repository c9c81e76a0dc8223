"""Sentence pairs with aligned phrase pairs (JSON Lines), read into rows
(:func:`read_pair_rows`): two text keys, an optional sentence label and ``phrases``, a
list of ``{"source": [start, end), "target": [start, end), "label"}`` character ranges.
Every row that does not fit is an error ``FILE:LINE: why``. The keys in full:
docs/SPAN_PAIRS.md, section "Module notes"."""

import json
from dataclasses import dataclass

from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_file_lines
from span_plugin.formats.table import (LabelKinds, _BadRow, _check_label, _jsonl_rows, _value,
                                       check_columns)
from span_plugin.formats.unicode_text import class_label

DEFAULT_PHRASE_LABELS = ("paraphrase", "random", "in-paraphrase")


@dataclass
class PairRow:
    line: int  # 1-based line of the file
    texts: list  # the two texts, line breaks as spaces, stripped
    label: str  # the sentence label, or None
    # (source [start, end], target [start, end], phrase label id): character ranges of
    # the stripped texts (integer ranges shifted by the whitespace stripped in front;
    # anything else as written, for the range check to name)
    phrases: list


def _phrase(j, pair, label_id, shift):
    if not isinstance(pair, dict):
        raise _BadRow(f"phrase pair {j} is {json.dumps(pair)[:40]}, expected an "
                      f"object with source, target and label")
    for key in ("source", "target", "label"):
        if key not in pair:
            raise _BadRow(f"phrase pair {j} has no {key!r}")
    if not isinstance(pair["label"], str) or pair["label"] not in label_id:  # [] is unhashable
        raise _BadRow(f"phrase pair {j}: label {json.dumps(pair['label'])[:40]} is not one of "
                      f"the declared phrase labels {list(label_id)}")
    ranges = []
    for side, key in enumerate(("source", "target")):
        rng = pair[key]
        if not (isinstance(rng, list) and len(rng) == 2):
            raise _BadRow(f"phrase pair {j} {key} {json.dumps(rng)[:40]}: expected "
                          f"[start, end]")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in rng):
            rng = [v - shift[side] for v in rng]
        ranges.append(rng)
    return ranges[0], ranges[1], label_id[pair["label"]]


class PairRows(list):
    """The :class:`PairRow` list of a file, with ``replacements``: invalid UTF-8
    sequences read as U+FFFD (``bad_utf8="replace"``)."""

    replacements = 0


def read_pair_rows(path, text_columns=("sentence1", "sentence2"), label_column=None,
                   phrases_key="phrases", phrase_labels=DEFAULT_PHRASE_LABELS,
                   bad_utf8="error"):
    """The :class:`PairRow` of each line of one JSON Lines file (whatever its name), as
    a :class:`PairRows` list."""
    if len(text_columns) != 2:
        raise ValueError(f"give two text columns, got {list(text_columns)}")
    check_columns(text_columns, label_column)
    label_id = {name: i for i, name in enumerate(phrase_labels)}
    lines = read_file_lines(path, bad_utf8)
    out = PairRows()
    out.replacements = lines.replacements
    items = list(_jsonl_rows(path, lines))
    items.pop()  # the key list
    kinds = LabelKinds(path) if label_column is not None else None
    for lineno, row in items:
        if kinds is not None:
            kinds.check(lineno, row, label_column)
        try:
            if isinstance(row, _BadRow):
                raise row
            raw = [_value(row, c, "text", row) for c in text_columns]
            label = None
            if label_column is not None:
                label = _check_label(class_label(_value(row, label_column, "label", row)),
                                     label_column, False)
            texts, shift = [], []
            for t in raw:
                t = t.replace("\r", " ").replace("\n", " ")  # same length: ranges keep
                texts.append(t.strip())
                shift.append(len(t) - len(t.lstrip()))
            if phrases_key not in row:
                raise _BadRow(f"no {phrases_key!r} key (keys: {sorted(row)}); every row needs "
                              f"its phrase pair list, [] when it has none (--phrases-key names "
                              f"another key)")
            pairs = row[phrases_key]
            if not isinstance(pairs, list):
                raise _BadRow(f"{phrases_key!r} holds {json.dumps(pairs)[:40]}, expected a list")
            phrases = [_phrase(j, pair, label_id, shift) for j, pair in enumerate(pairs)]
        except _BadRow as bad:
            raise BadInputError(f"{path}:{lineno}: {bad}") from None
        out.append(PairRow(lineno, texts, label, phrases))
    return out
