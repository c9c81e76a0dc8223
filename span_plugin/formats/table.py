"""Users' own tables: TSV, CSV or JSON Lines with named columns, read into rows
(:func:`read_table`; :mod:`span_plugin.preprocess.folders.table` writes the task
folder): one or two text columns, one label column (classes as written, or regression
numbers). The formats, the label rules and bad rows: docs/PREPROCESS.md, section
"Module notes"."""

import csv
import io
import json
import os
from dataclasses import dataclass

from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import TOO_DEEP, read_file_lines
from span_plugin.formats.rows import SplitRows, read_decimal
from span_plugin.formats.unicode_text import class_label, label_problem
from span_plugin.formats.tsv import split_rows

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


def _unique_header(path, header):
    """A header whose names are unique; a name given twice would hide a column."""
    seen = {}
    for k, name in enumerate(header, 1):
        if name in seen:
            raise BadInputError(f"{path}:1: column name {name!r} is given twice in the header "
                                f"(columns {seen[name]} and {k}); rename one, so that which "
                                f"column is read is not a guess (columns: {header})")
        seen[name] = k
    return header


def _delimited_rows(path, lines, fmt, delimiter):
    """(line number, {column: value}) per data row; a row that does not fit the header
    is (line number, _BadRow)."""
    if not lines:
        raise BadInputError(f"{path}:1: expected a header line, the file is empty")
    if fmt == "tsv":
        header = lines[0].split("\t")

        def records():
            for lineno, fields, problem in split_rows(lines, 1, len(header)):
                if fields is not None:
                    yield lineno, fields
                    continue
                kind, reason = problem
                if kind == "quoted":
                    reason += ("; if the file is quoted TSV (pandas, Python's csv), read it "
                               "with --format csv --delimiter '\\t'")
                else:
                    reason += " (the header's)"
                yield lineno, _BadRow(reason)
    else:
        reader = csv.reader(io.StringIO("".join(line + "\n" for line in lines)),
                            delimiter=delimiter, strict=True)

        def csv_records():
            start = 1
            try:
                for fields in reader:
                    yield start, fields
                    start = reader.line_num + 1
            except csv.Error as err:
                raise BadInputError(f"{path}:{start}: not valid CSV ({err})") from None

        parsed = csv_records()
        _, header = next(parsed)

        def records():
            for lineno, fields in parsed:
                if len(fields) != len(header):
                    yield lineno, _BadRow(f"{len(fields)} CSV fields, expected {len(header)} "
                                          f"(the header's)")
                else:
                    yield lineno, fields
    header = _unique_header(path, [h.strip() for h in header])
    for lineno, fields in records():
        yield lineno, fields if isinstance(fields, _BadRow) else dict(zip(header, fields))
    yield 0, header  # the columns, for messages


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs):
    """``object_pairs_hook`` of :func:`json.loads`: a key given twice is refused (JSON
    readers keep the last one, silently)."""
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def load_json_object(line):
    """The JSON value of ``line``; raises :class:`_BadRow` saying why it is not one."""
    try:
        return json.loads(line, object_pairs_hook=_unique_keys)
    except _DuplicateKey as dup:
        raise _BadRow(f"key {dup.args[0]!r} is given twice in the object; remove one, so "
                      f"that which value is read is not a guess") from None
    except ValueError as err:
        raise _BadRow(f"not valid JSON ({err})" if line.strip() else "blank line") from None
    except RecursionError:  # json's decoder recurses once per level of nesting
        raise _BadRow(TOO_DEEP) from None


def _jsonl_rows(path, lines):
    keys = set()
    for i, line in enumerate(lines, 1):
        try:
            obj = load_json_object(line)
        except _BadRow as bad:
            yield i, bad
            continue
        if not isinstance(obj, dict):
            yield i, _BadRow(f"a JSON {type(obj).__name__}, expected an object")
            continue
        keys.update(obj)
        yield i, obj
    yield 0, sorted(keys)


def json_kind(value):
    """The JSON type of a scalar as a reader of the file sees it."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "non-integer number"
    return "string"


class LabelKinds:
    """The JSON type of a file's class labels: the first label's, and every other must
    have it (``1``, ``1.0``, ``"1"`` and ``true`` are written differently, so they
    would be different classes, or the same class by accident)."""

    def __init__(self, path):
        self.path, self.first = path, None

    def check(self, lineno, row, column):
        value = row.get(column) if isinstance(row, dict) else None
        if value is None or isinstance(value, (list, dict)):
            return  # missing or not a scalar: the row's own error says so
        kind = json_kind(value)
        if self.first is None:
            self.first = (lineno, kind, value)
        elif kind != self.first[1]:
            line, first_kind, first_value = self.first
            raise BadInputError(
                f"{self.path}:{lineno}: label {json.dumps(value)} is a JSON {kind}, but the "
                f"label on line {line} ({json.dumps(first_value)}) is a JSON {first_kind}: "
                f"the class labels of a file must all be of one JSON type (1, 1.0, \"1\" "
                f"and true would be different classes); write them alike")


def _value(row, column, what, columns):
    if column not in row:
        raise _BadRow(f"no {what} column {column!r} (columns: {list(columns)})")
    v = row[column]
    if isinstance(v, str):
        return v
    if v is None or isinstance(v, (list, dict)):
        raise _BadRow(f"{what} column {column!r} holds {json.dumps(v)[:40]}, expected text")
    return json.dumps(v)  # JSON numbers and booleans as written: 1 -> "1", true -> "true"


def check_columns(text_columns, label_column):
    """A ValueError when a text column is named twice or is the label column: the model
    would read one field as two inputs, or read the label as input."""
    twice = next((c for i, c in enumerate(text_columns) if c in text_columns[:i]), None)
    if twice is not None:
        raise ValueError(f"--text-columns names {twice!r} twice ({list(text_columns)}): "
                         f"expected one or two different columns")
    if label_column is not None and label_column in text_columns:
        raise ValueError(f"--label-column {label_column!r} is also one of --text-columns "
                         f"{list(text_columns)}: the model would read its label as input")


@dataclass(frozen=True)
class TableReading:
    """How :func:`read_table` reads a file (module docstring): ``fmt`` ("auto": by
    the file name), the CSV ``delimiter``, ``regression`` (numeric labels), the labels
    whose rows are left out (``drop_labels``) and what a bad row does (``bad_rows``:
    "error" or "skip")."""

    fmt: str = "auto"
    delimiter: str = ","
    regression: bool = False
    drop_labels: tuple = ()
    bad_rows: str = "error"

    def __post_init__(self):
        object.__setattr__(self, "drop_labels", tuple(self.drop_labels))


def read_table(path, text_columns, label_column=None, reading=TableReading(),
               bad_utf8="error"):
    """Read one file into :class:`SplitRows` as ``reading`` (:class:`TableReading`)
    says; ``label_column=None`` reads no labels."""
    check_columns(text_columns, label_column)
    fmt = detect_format(path, reading.fmt)
    regression, drop_labels = reading.regression, reading.drop_labels
    lines = read_file_lines(path, bad_utf8)
    rows = (_jsonl_rows(path, lines) if fmt == "jsonl"
            else _delimited_rows(path, lines, fmt, reading.delimiter))
    out = SplitRows(inputs=[[] for _ in text_columns],
                    labels=[] if label_column is not None else None,
                    replacements=lines.replacements)
    kinds = LabelKinds(path) if fmt == "jsonl" and label_column is not None and not regression \
        else None
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
        if kinds is not None:
            kinds.check(lineno, row, label_column)
        try:
            if isinstance(row, _BadRow):
                raise row
            texts = [_value(row, c, "text", row) for c in text_columns]
            label = None
            if label_column is not None:
                raw = _value(row, label_column, "label", row)
                label = raw.strip() if regression else class_label(raw)
                if label in drop_labels:
                    out.dropped.append((lineno, f"label {label!r}"))
                    continue
                label = _check_label(label, label_column, regression)
        except _BadRow as bad:
            if reading.bad_rows == "skip":
                out.dropped.append((lineno, str(bad)))
                continue
            raise BadInputError(f"{path}:{lineno}: {bad}; fix the row or pass --bad-rows "
                                f"skip to leave such rows out") from None
        for k, text in enumerate(texts):
            out.inputs[k].append(text.replace("\r", " ").replace("\n", " ").strip())
        if label is not None and regression:
            out.labels.append(label)
        elif label is not None:
            out.add_label(raw, label)
        out.lines.append(lineno)
        out.rows += 1
    return out


def _check_label(label, column, regression):
    if not regression:
        if not label:
            raise _BadRow(f"empty label in column {column!r}")
        if label_problem(label):
            raise _BadRow(f"label {label!r} {label_problem(label)}")
        return label
    value = read_decimal(label)
    if value is None:
        raise _BadRow(f"label {label!r} is not a number (regression): a number in ASCII "
                      f"decimal notation, finite in float32 (|x| <= 3.4e38), is expected "
                      f"(3, -0.25, 2.5e-3)")
    return format(value, ".9g")
