"""Lines of users' text files: UTF-8 with a BOM and CRLF line ends handled, invalid
UTF-8 an error that names the file and the line, byte ranges that start at line
starts (one per worker).

Lines are split on ``\\n`` only; a ``\\r`` before it is dropped (CRLF files), a UTF-8
BOM at the start of the file is dropped. Invalid UTF-8 raises :class:`BadInputError`
naming the file and the 1-based line, unless ``bad_utf8="replace"`` (then U+FFFD stands
for each bad byte sequence, and the returned :class:`Lines` count them, for the record).
"""

import contextlib
import gzip
import io
import itertools
import os
import re
import stat

from span_plugin.files.atomic import atomic_file
from span_plugin.files.errors import BadInputError, NotAFileError

BOM = b"\xef\xbb\xbf"


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"))


def file_kind(mode):
    """What a file of ``os.stat`` mode ``mode`` is, in words: "a folder", "a character
    device", "a FIFO (named pipe)", ...; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def regular_file(path, what=None, max_bytes=None):
    """Raise :class:`NotAFileError` naming ``path`` and what it is when it is not a
    regular file (links followed): a device (``/dev/zero`` reads for ever), a FIFO (a
    read blocks until a writer comes), a socket or a folder. Told from ``stat`` alone,
    never by opening it. A missing path raises stat's FileNotFoundError. ``what``: how
    the user gave it (``--train``), for the message; ``max_bytes``: the most a file of
    its kind holds (a file read whole), more a :class:`BadInputError`. Returns the
    ``os.stat`` result."""
    st = os.stat(path)
    given = f" ({what})" if what else ""
    kind = file_kind(st.st_mode)
    if kind:
        raise NotAFileError(f"{path}{given}: {kind}, not a regular file; give a file of "
                            f"this format")
    if max_bytes is not None and st.st_size > max_bytes:
        raise BadInputError(f"{path}{given}: {st.st_size:,} bytes, more than a file of this "
                            f"kind holds ({max_bytes:,}): not the file expected")
    return st


def open_bytes(path):
    """``open(path, "rb")`` of a regular file only (:func:`regular_file`)."""
    regular_file(path)
    return open(path, "rb")


def open_text(path, mode, errors="strict"):
    """A UTF-8 text file, gzip-compressed when the name ends in ``.gz``; read only from
    a regular file (:func:`regular_file`)."""
    if "r" in mode:
        regular_file(path)
    if str(path).endswith(".gz"):
        # mtime=0: the same content gives the same bytes (reproducible resources).
        raw = gzip.GzipFile(path, mode + "b", mtime=0) if mode == "w" else gzip.open(path, "rb")
        return io.TextIOWrapper(raw, encoding="utf-8", errors=errors, newline="\n")
    return open(path, mode, encoding="utf-8", errors=errors, newline="\n")


@contextlib.contextmanager
def write_text(path):
    """A UTF-8 text file, gzip-compressed when the name ends in ``.gz`` (the same bytes as
    :func:`open_text` writes), written whole or not at all (:func:`atomic_file`)."""
    with atomic_file(path) as raw:
        gz = str(path).endswith(".gz")
        stream = gzip.GzipFile(filename=str(path), mode="wb", fileobj=raw, mtime=0) if gz else raw
        f = io.TextIOWrapper(stream, encoding="utf-8", newline="\n")
        yield f
        f.flush()
        f.detach()
        if gz:
            stream.close()  # writes the gzip trailer; the file itself stays open


# No tokenizer file (encoder.json, vocab.bpe, vocab.txt, tokenizer.json, a sentencepiece
# model) comes near this; these are read whole.
MAX_TOKENIZER_BYTES = 1 << 30
# A SQuAD JSON file is read whole (after gzip): SQuAD 2.0's training file is 40 MB.
MAX_JSON_BYTES = 1 << 31

# No line of the users' formats comes near this (a JSON Lines row holds one passage);
# a longer one is a binary file or a device (/dev/zero), read no further.
MAX_LINE = 1 << 26
BLOCK = 1 << 24  # bytes read at a time


def too_long(path, line):
    return BadInputError(f"{path}:{line}: a line longer than {MAX_LINE:,} bytes (no line end "
                         f"within it): not a text file of this format (a binary file, a "
                         f"device such as /dev/zero?)")


def bounded_lines(f, path):
    """The lines of the open text file ``f`` (with their line ends), each read no further
    than :data:`MAX_LINE` characters: a longer one raises :func:`too_long`."""
    for lineno in itertools.count(1):
        line = f.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE:
            raise too_long(path, lineno)
        yield line


def _read_range(path, start, end, first_line):
    """Bytes ``[start, end)`` of ``path``, read in blocks; a line longer than
    :data:`MAX_LINE` raises :func:`too_long` once it is seen, before the rest is read."""
    blocks, run, newlines = [], 0, 0  # run: bytes since the last line end
    with open_bytes(path) as f:
        f.seek(start)
        left = end - start
        while left > 0:
            block = f.read(min(left, BLOCK))
            if not block:
                break
            left -= len(block)
            at, last = 0, block.rfind(b"\n")
            while at <= last:  # the last line end within MAX_LINE of each line start
                nl = block.rfind(b"\n", at, at + max(MAX_LINE - run, 0) + 1)
                if nl < 0:
                    break
                newlines += block.count(b"\n", at, nl + 1)
                run, at = 0, nl + 1
            run += len(block) - at
            if run > MAX_LINE:
                line = first_line if first_line is not None else count_lines(path, start) + 1
                raise too_long(path, line + newlines)
            blocks.append(block)
    return b"".join(blocks)


# The JSON readers' message for JSON nested deeper than Python's recursion limit (about
# 1000 levels): json.loads raises RecursionError there, which is no ValueError. No file
# of these formats nests like that.
TOO_DEEP = "JSON nested too deeply to read (more levels than Python's recursion limit)"


class Lines(list):
    """Decoded lines, with ``replacements``: how many invalid UTF-8 sequences became
    U+FFFD (``bad_utf8="replace"``; 0 otherwise), so a folder's record can say so."""

    replacements = 0


REPLACEMENT_BYTES = "\ufffd".encode("utf-8")


def line_offsets(path, parts):
    """Up to ``parts`` byte ranges of ``path``, each starting at a line start."""
    size = regular_file(path).st_size
    bounds = [0]
    with open(path, "rb") as f:
        for k in range(1, parts):
            pos = size * k // parts
            if pos <= bounds[-1]:
                continue
            f.seek(pos - 1)
            f.readline()  # the line that holds byte pos-1 ends the previous range
            pos = f.tell()
            if bounds[-1] < pos < size:
                bounds.append(pos)
    bounds.append(size)
    return list(zip(bounds[:-1], bounds[1:]))


def read_lines(path, start, end, bad_utf8="error", first_line=None):
    """Decoded lines of bytes ``[start, end)`` of ``path`` (``\\r\\n`` and BOM handled).

    first_line: 1-based number of the range's first line, for error messages (None:
    counted on demand, only when an error is raised).
    """
    data = _read_range(path, start, end, first_line)
    if start == 0 and data.startswith(BOM):
        data = data[len(BOM):]
    _refuse_lone_cr_line_ends(path, start, data, first_line)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line starts no new line
    out = Lines()
    for i, raw in enumerate(lines):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            if bad_utf8 == "replace":
                text = raw.decode("utf-8", errors="replace")
                # U+FFFD already in the text (valid UTF-8) is not a replacement.
                out.replacements += text.count("\ufffd") - raw.count(REPLACEMENT_BYTES)
                out.append(text)
                continue
            if first_line is None:
                first_line = count_lines(path, start) + 1
            raise BadInputError(
                f"{path}:{first_line + i}: invalid UTF-8 at byte {err.start} of the line "
                f"({err.reason}); fix the file or pass --bad-utf8 replace"
            ) from None
    return out


def _refuse_lone_cr_line_ends(path, start, data, first_line):
    """A file whose lines end in a lone CR (classic Mac OS) reads as one long line, whose
    errors would name a missing column or an empty split: name the line ends instead.
    A CR or two inside fields of an LF file are left to the readers (odd whitespace)."""
    lone = data.count(b"\r") - data.count(b"\r\n")
    if not lone or lone < data.count(b"\n"):
        return
    at = re.search(rb"\r(?!\n)", data).start()
    line = (first_line if first_line is not None else count_lines(path, start) + 1)
    line += data.count(b"\n", 0, at)
    lf = data.count(b"\n")
    raise BadInputError(
        f"{path}:{line}: lines end in a lone carriage return (CR without LF, classic Mac OS "
        f"line ends: {lone} of them, {lf} LF line ends); convert the file to LF line ends, "
        f"e.g. tr '\\r' '\\n' < FILE > NEW")


def read_file_lines(path, bad_utf8="error"):
    """Every decoded line of ``path`` (as :func:`read_lines`)."""
    return read_lines(path, 0, regular_file(path).st_size, bad_utf8, first_line=1)


def stream_file_lines(path, block=BLOCK):
    """The decoded lines of ``path`` one at a time (as :func:`read_file_lines` gives
    them), read about ``block`` bytes at a time (ranges that start at line starts), so a
    file of any number of lines is read in bounded memory."""
    first_line = 1
    for start, end in line_offsets(path, max(1, regular_file(path).st_size // block)):
        lines = read_lines(path, start, end, first_line=first_line)
        first_line += len(lines)
        yield from lines


def count_lines(path, end=None):
    """Newlines in the first ``end`` bytes of ``path`` (all of it when None)."""
    n = 0
    with open_bytes(path) as f:
        left = end if end is not None else float("inf")
        while left > 0:
            block = f.read(int(min(left, 1 << 24)))
            if not block:
                break
            n += block.count(b"\n")
            left -= len(block)
    return n
