"""Users' own tables: TSV, CSV or JSON Lines with named columns, read into rows
(:func:`read_table`; :mod:`span_plugin.preprocess.table` writes the task folder).

Formats (``fmt="auto"`` tells them by the file name):

- ``tsv`` (``.tsv``, ``.tab``): a header line, then one row per line, fields split on tabs,
  no quoting (the GLUE layout);
- ``csv`` (``.csv``): RFC 4180 as Python's ``csv`` reads it (quoted fields may hold the
  delimiter, quotes and line breaks), a header row first; ``delimiter`` sets the
  separator (``"\\t"`` for quoted TSV such as pandas writes);
- ``jsonl`` (``.jsonl``, ``.ndjson``, ``.json``): one JSON object per line, keyed by
  column name (the Hugging Face datasets ``to_json`` export).

One or two text columns (one input per column), one label column: class labels as
written (a JSON number ``1`` is the class ``"1"``), or numbers with ``regression``.
Test files need no label column; their labels are never read. Which labels a valid
file may hold (the train file's) is checked when the folder is written
(:func:`span_plugin.preprocess.folder.restrict_to_train_labels`).

Bad input is handled as in ``span-preprocess glue``: a row with another number of
fields than the header, a line that is not a JSON object, a missing column or key, a
null or non-scalar value, an empty class label or a regression label that is not a
finite number is an error ``FILE:LINE: why``, or with ``bad_rows="skip"`` the row is left
out of every input and the label and listed with its reason. Rows whose label
is one of ``drop_labels`` (SNLI's ``-``, or ``-1`` in Hugging Face exports) are left out
and listed. Invalid UTF-8, a BOM and CRLF line ends: as ``glue``. Line breaks inside a
text field (CSV, JSON) become spaces, so that each row stays one line of the folder.
"""

import csv
import io
import json
import math
import os

from span_plugin.formats.lines import BadInputError, read_file_lines
from span_plugin.formats.rows import SplitRows

FORMATS = ("tsv", "csv", "jsonl")
EXTENSIONS = {".tsv": "tsv", ".tab": "tsv", ".csv": "csv", ".jsonl": "jsonl",
              ".ndjson": "jsonl", ".json": "jsonl"}


class _BadRow(Exception):
    """A row that cannot be used; the message says why."""


def detect_format(path, fmt="auto"):
    if fmt != "auto":
        if fmt not in FORMATS:
            raise ValueError(f"format {fmt!r}: expected one of {FORMATS} or auto")
        return fmt
    ext = os.path.splitext(str(path))[1].lower()
    if ext not in EXTENSIONS:
        raise BadInputError(f"{path}: cannot tell the format from the name (expected "
                            f"{', '.join(EXTENSIONS)}); pass --format tsv|csv|jsonl")
    return EXTENSIONS[ext]


def _delimited_rows(path, lines, fmt, delimiter):
    """(line number, {column: value}) per data row; a row that does not fit the header
    is (line number, _BadRow)."""
    if not lines:
        raise BadInputError(f"{path}:1: expected a header line, the file is empty")
    if fmt == "tsv":
        header = lines[0].split("\t")
        parsed = ((i + 1, line.split("\t")) for i, line in enumerate(lines[1:], 1))
    else:
        reader = csv.reader(io.StringIO("".join(line + "\n" for line in lines)),
                            delimiter=delimiter, strict=True)

        def records():
            start = 1
            try:
                for fields in reader:
                    yield start, fields
                    start = reader.line_num + 1
            except csv.Error as err:
                raise BadInputError(f"{path}:{start}: not valid CSV ({err})") from None

        parsed = records()
        _, header = next(parsed)
    header = [h.strip() for h in header]
    kind = "tab-separated" if fmt == "tsv" else "CSV"
    for lineno, fields in parsed:
        if len(fields) != len(header):
            yield lineno, _BadRow(f"{len(fields)} {kind} fields, expected {len(header)} "
                                  f"(the header's)")
        else:
            yield lineno, dict(zip(header, fields))
    yield 0, header  # the columns, for messages


def _jsonl_rows(path, lines):
    keys = set()
    for i, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except ValueError as err:
            yield i, _BadRow(f"not valid JSON ({err})" if line.strip() else "blank line")
            continue
        if not isinstance(obj, dict):
            yield i, _BadRow(f"a JSON {type(obj).__name__}, expected an object")
            continue
        keys.update(obj)
        yield i, obj
    yield 0, sorted(keys)


def _value(row, column, what, columns):
    if column not in row:
        raise _BadRow(f"no {what} column {column!r} (columns: {list(columns)})")
    v = row[column]
    if isinstance(v, str):
        return v
    if v is None or isinstance(v, (list, dict)):
        raise _BadRow(f"{what} column {column!r} holds {json.dumps(v)[:40]}, expected text")
    return json.dumps(v)  # JSON numbers and booleans as written: 1 -> "1", true -> "true"


def read_table(path, text_columns, label_column=None, fmt="auto", delimiter=",",
               regression=False, drop_labels=(), bad_rows="error", bad_utf8="error"):
    """Read one file into :class:`SplitRows`; ``label_column=None`` reads no labels."""
    fmt = detect_format(path, fmt)
    lines = read_file_lines(path, bad_utf8)
    rows = _jsonl_rows(path, lines) if fmt == "jsonl" else _delimited_rows(path, lines, fmt, delimiter)
    out = SplitRows(inputs=[[] for _ in text_columns],
                    labels=[] if label_column is not None else None)
    items = list(rows)
    columns = items.pop()[1]
    if fmt != "jsonl":
        missing = [c for c in text_columns if c not in columns]
        if missing:
            raise BadInputError(f"{path}:1: no column {missing[0]!r} in the header "
                                f"(columns: {columns})")
        if label_column is not None and label_column not in columns:
            raise BadInputError(f"{path}:1: no label column {label_column!r} in the "
                                f"header (columns: {columns})")
    for lineno, row in items:
        try:
            if isinstance(row, _BadRow):
                raise row
            texts = [_value(row, c, "text", row) for c in text_columns]
            label = None
            if label_column is not None:
                label = _value(row, label_column, "label", row).strip()
                if label in drop_labels:
                    out.dropped.append((lineno, f"label {label!r}"))
                    continue
                label = _check_label(label, label_column, regression)
        except _BadRow as bad:
            if bad_rows == "skip":
                out.dropped.append((lineno, str(bad)))
                continue
            raise BadInputError(f"{path}:{lineno}: {bad}; fix the row or pass --bad-rows "
                                f"skip to leave such rows out") from None
        for k, text in enumerate(texts):
            out.inputs[k].append(text.replace("\r", " ").replace("\n", " ").strip())
        if label is not None:
            out.labels.append(label)
        out.lines.append(lineno)
        out.rows += 1
    return out


def _check_label(label, column, regression):
    if not regression:
        if not label:
            raise _BadRow(f"empty label in column {column!r}")
        if any(c.isspace() for c in label):
            raise _BadRow(f"label {label!r} holds whitespace; class labels are single tokens")
        return label
    try:
        value = float(label)
    except ValueError:
        raise _BadRow(f"label {label!r} is not a number (regression)") from None
    if not math.isfinite(value):
        raise _BadRow(f"label {label!r} is not a finite number (regression)")
    return format(value, ".9g")
