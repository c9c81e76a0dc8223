"""Tab-separated rows as the GLUE tooling reads them: one row a line, fields split on
tabs, quotes are text (``csv`` with ``quoting=QUOTE_NONE``).

Quotes stay text because the published GLUE files need it: MRPC, QNLI and STS-B hold
sentences that open a quotation they never close, and a few rows whose first sentence
opens a quote that the second one closes (MRPC dev line 365); read with quoting, such
rows merge fields or lines. The one thing plain splitting gets wrong is a file written
with CSV quoting (pandas ``to_csv(sep="\\t")``, Python's ``csv``): a quoted field that
holds a tab or a line break. Split on tabs it becomes extra fields or extra rows, and a
field holding both can give rows of the right width that are fragments (a row of a
5-row file read as two, one of them a fragment with the row's label). Such a field is
named, never read as something else (:func:`split_rows`): the caller stops, naming the
line and the fix, or leaves the whole record out. So is a field that is quoted whole
with a doubled quote inside (``"a ""b"" c"``): CSV's escaping, which no GLUE file holds,
and read as text it would keep the doubled quotes.

A field counts as CSV-quoted only where both readings can be told apart: it starts
with ``"``, its quote closes (inner quotes doubled) right before a tab or a line end
on a later line or past a tab, the CSV reading of those lines is one row of the
header's width, and the plain reading is not (a line break inside, or a field count
other than the header's). No row of the GLUE files here is such a field (tested).
"""

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
