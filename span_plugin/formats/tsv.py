"""Tab-separated rows as the GLUE tooling reads them: one row a line, fields split on tabs,
quotes are text. A CSV-quoted field holding a tab or a line break (or quoted whole with
a doubled quote inside) is named, never read as something else (:func:`split_rows`).
Why quotes stay text and when a field counts as CSV-quoted: docs/GLUE.md, section
"Module notes"."""

import csv
import io
import re

QUOTE = '"'
MAX_QUOTED_LINES = 1000  # a quoted field is looked for over at most this many lines
# A whole field in quotes with a doubled quote inside: CSV's escaping, never GLUE text.
DOUBLED = re.compile(r'"(?:[^"]|"")*""(?:[^"]|"")*"')


def _closing_quote(text, start, end):
    """Index in ``text`` of the quote that closes the CSV-quoted field opened at
    ``start`` (looked for before ``end``), or None when it does not close as CSV
    requires (inner quotes doubled, the closing quote followed by a tab, a line end or
    the end of the text)."""
    p = start + 1
    while True:
        q = text.find(QUOTE, p, end)
        if q < 0:
            return None
        after = text[q + 1:q + 2]
        if after == QUOTE:
            p = q + 2  # a doubled quote inside the field
            continue
        return q if after in ("\t", "\n", "") else None


class _Text:
    """The lines joined once, so that a quote is searched for across lines cheaply."""

    def __init__(self, lines):
        self.lines = lines
        self.text = "\n".join(lines)
        self.starts, pos = [], 0
        for line in lines:
            self.starts.append(pos)
            pos += len(line) + 1

    def line_of(self, offset, hint):
        i = hint
        while i + 1 < len(self.starts) and self.starts[i + 1] <= offset:
            i += 1
        return i


def quoted_field(text, i, expected):
    """``(field number, last line index, "tab" | "line break" | "doubled quote")`` when
    line ``i`` holds a CSV-quoted field that plain splitting would cut, or whose text
    it would read with CSV's doubled quotes (module docstring), else None.
    text: a :class:`_Text` of the file's lines."""
    line = text.lines[i]
    if QUOTE not in line:
        return None
    plain = line.split("\t")
    offset = text.starts[i]
    last = min(i + MAX_QUOTED_LINES, len(text.lines) - 1)
    end = text.starts[last] + len(text.lines[last])
    for k, field in enumerate(plain):
        if DOUBLED.fullmatch(field):
            return k + 1, i, "doubled quote"
        if field.startswith(QUOTE):
            close = _closing_quote(text.text, offset, end)
            if close is not None and close > offset + len(field):
                j = text.line_of(close, i)
                if j > i or len(plain) != expected:
                    try:
                        rows = list(csv.reader(io.StringIO("\n".join(text.lines[i:j + 1])),
                                               delimiter="\t"))
                    except csv.Error:
                        rows = []
                    if len(rows) == 1 and len(rows[0]) == expected:
                        return k + 1, j, "line break" if j > i else "tab"
        offset += len(field) + 1
    return None


def split_rows(lines, first, expected):
    """``(line number, fields, problem)`` of each row from line index ``first`` on.

    fields: the row split on tabs, or None when the row does not fit; problem then says
    why: ``("fields", text)`` for another number of fields than ``expected``, or
    ``("quoted", text)`` for a CSV-quoted field holding a tab or a line break (the row is
    the whole quoted record: the lines it spans are not read again).
    """
    text = None
    i = first
    while i < len(lines):
        line = lines[i]
        if QUOTE in line:
            text = text or _Text(lines)
            found = quoted_field(text, i, expected)
            if found is not None:
                k, j, what = found
                ends = f" (it ends on line {j + 1})" if j > i else ""
                harm = ("its text would keep the quotes, doubled" if what == "doubled quote"
                        else "it would be cut into other fields and rows")
                yield i + 1, None, ("quoted", f"field {k} is a quoted field holding a "
                                    f"{what}{ends}, as CSV writers quote it; tab-separated "
                                    f"files are read without quoting (GLUE's rule), so {harm}")
                i = j + 1
                continue
        fields = line.split("\t")
        if len(fields) != expected:
            yield i + 1, None, ("fields", f"{len(fields)} tab-separated fields, "
                                f"expected {expected}")
        else:
            yield i + 1, fields, None
        i += 1
