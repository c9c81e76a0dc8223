"""Fuzz harness: malformed variants of real rows through every reader
of users' files, with fixed seeds, on every run of the suite.

Inputs are real rows of ../shared/data: GLUE MRPC, STS-B and CoLA (``span-preprocess
glue``), the same rows as TSV, CSV and JSON Lines tables (``table``), CoNLL-2003
(``conll``), SQuAD v1.1 dev as SQuAD JSON and as MRQA JSON Lines, plain and gzip
(``qa``), MRPC pairs with phrase pairs (``pairs``), and a tiny checkpoint trained here
(``span-predict``, ``python -m span_plugin.runtime.checkpoints resume``). Each case
applies one mutation (truncation, byte flips, invalid UTF-8, dropped, duplicated or
reordered fields, shifted offsets, a huge line, an empty file) and runs the command.
Five more classes run at the end: injected I/O faults (ENOSPC, EROFS, EACCES, SIGINT)
into builders, span-convert and span-predict; real SIGINT and SIGTERM; Unicode labels;
flag values; Hugging Face folders (each case: exit 0, or one line naming the cause).
What must hold:

- it exits 0 or 2 and prints no traceback;
- on exit 0 the folder reconciles with the input: every row of the input is a kept row
  or a row of ``dropped_rows.tsv`` (rows read = rows kept + rows dropped), each kept
  row holds what that input row holds (nothing shifted or merged), the labels are the
  training split's (each label item that label), and ``span-preprocess check`` passes;
  a damaged checkpoint that still loads holds the intact one's tensors and predicts
  what it predicts, and resume leaves a checkpoint_last.pt that loads.

Mutations beside the issue's list: odd whitespace (a carriage return, NEL, U+2028 ...
inside a field) and JSON nested deeper than Python's recursion limit; a field of
another JSON type. Problems of checkpoint loading are reported to its owner (``KNOWN`` and
``KNOWN_TRACEBACKS`` count them as "known"); those found so far are fixed and tested
at the end.

Most cases call the command's ``main()`` in this process (the same argument parsing and
exit codes, without an interpreter start-up each); every format also sends cases
through the real console script. A failure names the case: format, mutation, flags and
the mutated file (kept under pytest's tmp folder) with its first bytes.
``FUZZ_TABLE=PATH`` writes the table of outcomes (docs/RELIABILITY.md, "Fuzz harness").
"""

import contextlib
import csv
import errno
import gzip
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
import traceback
import unicodedata
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pytest

from conftest import BIN, DATA, GLUE, GPT2_BPE, USER_DIR
from script_runner import exit_status

TRACEBACK = "Traceback (most recent call last)"
BOM = b"\xef\xbb\xbf"
# GPT-2 BPE; the ``work`` fixture adds --srcdict: the 3,000 most frequent symbols of
# GPT-2's fairseq dictionary. Loading and writing the whole 50k-symbol dict.txt would
# take most of each case's time, and the readers under test do not depend on it
# (other symbols become <unk>).
ENC = ["--gpt2-encoder-json", str(GPT2_BPE / "encoder.json"), "--gpt2-vocab-bpe",
       str(GPT2_BPE / "vocab.bpe"), "--workers", "1"]
CLI_EVERY = 8  # every 8th case of a format goes through the real console script
OUTCOMES = defaultdict(Counter)  # format -> Counter of "exit 0" / "exit 2" / problems
CASES = []  # (format, mutation, flags, exit status, the output's last line), in run order


# ---------------------------------------------------------------------------------
# Running a command: its console script, or its main() in this process


def _mains():
    from span_plugin.cli.convert import main as convert
    from span_plugin.cli.predict import main as predict
    from span_plugin.cli.preprocess import main as preprocess
    from span_plugin.runtime.checkpoints import main as checkpoints

    return {"span-preprocess": ([str(BIN / "span-preprocess")], preprocess),
            "span-predict": ([str(BIN / "span-predict")], predict),
            "span-convert": ([str(BIN / "span-convert")], convert),
            "checkpoints": ([sys.executable, "-m", "span_plugin.runtime.checkpoints"],
                            checkpoints)}


def run(command, argv, cli):
    """``(exit status, stdout + stderr)`` of ``command argv``."""
    script, main = _mains()[command]
    argv = [str(a) for a in argv]
    if cli:
        proc = subprocess.run(script + argv, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=300, env=dict(os.environ, LOGLEVEL="WARNING"))
        return proc.returncode, proc.stdout + proc.stderr
    out = io.StringIO()
    # The levels the commands set for their own output are put back after each test
    # (conftest.py), so the tests after these keep fairseq's logs.
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv) or 0
        except SystemExit as stop:  # what the interpreter would make of it
            code = exit_status(stop)
        except Exception:  # noqa: BLE001 -- the interpreter would print it: a traceback
            out.write(traceback.format_exc())
            code = 1
    return code, out.getvalue()


# ---------------------------------------------------------------------------------
# Mutations: bytes -> bytes, or a parsed structure changed before it is written

BAD_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80", b"\x80"]
ODD_VALUES = [None, 0, 1.5, True, "", [], {}, "x", -1, 10 ** 9]


def m_empty(rng, data):
    return b""


def m_truncate(rng, data):
    return data[:rng.randrange(1, len(data))] if len(data) > 1 else b""


def m_byte_flips(rng, data):
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def m_invalid_utf8(rng, data):
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.choice(BAD_UTF8) + data[at:]


# Whitespace other than a space: a carriage return, a vertical tab, a form feed, and
# characters that Python's str.split() and str.splitlines() break at (U+001C..U+001F,
# NEL, no-break space, the line and paragraph separators, the ideographic space).
ODD_WHITESPACE = ["\r", "\x0b", "\x0c", "\x1c", "\x1e", "\x85", "\xa0", "\u2028",
                  "\u2029", "\u3000"]


def m_odd_whitespace(rng, data):
    """An odd whitespace character inside one field or word (a run of the file between
    tabs, commas, spaces, quotes and JSON punctuation), so that one-character fields
    such as labels get it as often as sentences: ``1`` becomes ``1<ws>1``."""
    runs = list(re.finditer(rb'[^\t ,"{}\[\]:\n]+', data))
    if not runs:
        return data + rng.choice(ODD_WHITESPACE).encode("utf-8")
    run = rng.choice(runs)
    text = run.group().decode("utf-8", "replace")
    ws = rng.choice(ODD_WHITESPACE)
    if len(text) > 1:
        at = rng.randrange(1, len(text))
        text = text[:at] + ws + text[at:]
    else:
        text = text + ws + text
    return data[:run.start()] + text.encode("utf-8") + data[run.end():]


def _lines(data):
    return data.split(b"\n")


def m_huge_line(rng, data):
    """One line made ~60 KB long by repeating the file's own words at one of its spaces
    (the line keeps its fields: only one field grows)."""
    lines = _lines(data)
    k = rng.randrange(len(lines))
    words = re.findall(rb"[A-Za-z]{2,}", data)[:40] or [b"word"]
    blob = b" ".join(words)
    blob = b" " + (blob + b" ") * (60_000 // len(blob) + 1)
    spaces = [m.start() for m in re.finditer(rb" ", lines[k])]
    at = rng.choice(spaces) if spaces else len(lines[k])
    lines[k] = lines[k][:at] + blob.rstrip() + lines[k][at:]
    return b"\n".join(lines)


def _line_op(op):
    def mutate(rng, data):
        lines = _lines(data)
        body = len(lines) - (lines[-1] == b"")  # the last newline starts no line
        if body < 2:
            return data + data
        i, j = rng.sample(range(body), 2)
        if op == "drop":
            del lines[i]
        elif op == "duplicate":
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    return mutate


def _field_op(op, sep):
    """Drop, duplicate or swap fields of one line (split on ``sep``; None: whitespace)."""
    def mutate(rng, data):
        lines = _lines(data)
        candidates = [k for k, line in enumerate(lines) if len(line.split(sep)) > 1]
        if not candidates:
            return data[::-1]
        k = rng.choice(candidates)
        fields = lines[k].split(sep)
        i, j = rng.sample(range(len(fields)), 2)
        if op == "drop":
            del fields[i]
        elif op == "duplicate":
            fields.insert(j, fields[i])
        else:
            fields[i], fields[j] = fields[j], fields[i]
        lines[k] = (sep or b" ").join(fields)
        return b"\n".join(lines)
    return mutate


BYTE_MUTATIONS = {"empty file": m_empty, "truncation": m_truncate, "byte flips": m_byte_flips,
                  "invalid UTF-8": m_invalid_utf8, "huge line": m_huge_line,
                  "odd whitespace": m_odd_whitespace}
LINE_MUTATIONS = {"dropped line": _line_op("drop"), "duplicated line": _line_op("duplicate"),
                  "reordered lines": _line_op("swap")}


def field_mutations(sep):
    return {"dropped field": _field_op("drop", sep),
            "duplicated field": _field_op("duplicate", sep),
            "reordered fields": _field_op("swap", sep)}


class Raw(str):
    """JSON text written as it is (too deep for json.dumps)."""


DEEP = Raw("[" * 100_000 + "]" * 100_000)  # deeper than Python's recursion limit


class Dup(dict):
    """A JSON object written with one of its keys twice (``dup``: the key and the
    second value)."""

    dup = None


def dumps(obj):
    """JSON text of ``obj``, :class:`Dup` objects with their key given twice."""
    if isinstance(obj, Raw):
        return str(obj)
    if isinstance(obj, dict):
        items = list(obj.items())
        if isinstance(obj, Dup) and obj.dup is not None:
            items.append(obj.dup)
        return "{" + ", ".join(f"{json.dumps(k)}: {dumps(v)}" for k, v in items) + "}"
    if isinstance(obj, list):
        return "[" + ", ".join(dumps(v) for v in obj) + "]"
    return json.dumps(obj, ensure_ascii=False)


def _containers(obj, path=()):
    """Paths of every object and list inside ``obj`` (itself included)."""
    if isinstance(obj, (dict, list)):
        yield path
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for k, v in items:
            yield from _containers(v, path + (k,))


def _at(obj, path):
    for k in path:
        obj = obj[k]
    return obj


def _set(obj, path, value):
    if not path:
        return value
    _at(obj, path[:-1])[path[-1]] = value
    return obj


OFFSET_KEYS = ("answer_start", "char_spans", "source", "target")


def json_mutation(op, rng, obj):
    """``obj`` (parsed JSON) with one of its fields dropped, given twice, swapped with
    another's value, given another JSON type, its keys reordered, an offset shifted,
    or a string made huge; returns the changed object (the input is not changed)."""
    obj = json.loads(json.dumps(obj))
    # A field chosen among all fields (not an object among all objects), so that the
    # many small objects deep inside (answers, phrase pairs) come up as often as they hold
    # fields.
    fields = [(p, k) for p in _containers(obj) if isinstance(_at(obj, p), dict)
              for k in _at(obj, p)]
    path, key = rng.choice(fields)
    node = _at(obj, path)
    keys = [key] + [k for k in node if k != key]
    if op == "dropped field":
        del node[key]
    elif op == "duplicated field":
        dup = Dup(node)
        other = node[rng.choice(keys)]
        dup.dup = (key, rng.choice([node[key], other]))  # the same value or another
        obj = _set(obj, path, dup)
    elif op == "reordered fields":
        rng.shuffle(keys)
        obj = _set(obj, path, {k: node[k] for k in keys})
    elif op == "swapped values":
        if len(keys) > 1:
            other = rng.choice(keys[1:])
            node[key], node[other] = node[other], node[key]
    elif op == "another JSON type":
        node[key] = rng.choice(ODD_VALUES)
    elif op == "deep nesting":
        node[key] = DEEP
    elif op == "shifted offsets":
        found = [(p, k) for p in _containers(obj) if isinstance(_at(obj, p), dict)
                 for k in _at(obj, p) if k in OFFSET_KEYS]
        if found:
            p, k = rng.choice(found)
            delta = rng.choice([-3, -1, 1, 2, 50, 10 ** 6])
            _at(obj, p)[k] = _shift(_at(obj, p)[k], delta, rng)
    elif op == "huge field":
        strings = [(p, k) for p in _containers(obj) if isinstance(_at(obj, p), dict)
                   for k, v in _at(obj, p).items() if isinstance(v, str) and " " in v]
        if strings:
            p, k = rng.choice(strings)
            text = _at(obj, p)[k]
            _at(obj, p)[k] = (text + " ") * (60_000 // len(text) + 1)
    return obj


def _shift(value, delta, rng):
    if isinstance(value, int):
        return value + delta
    if isinstance(value, list) and value:
        value = list(value)
        i = rng.randrange(len(value))
        value[i] = _shift(value[i], delta, rng)
    return value


JSON_OPS = ("dropped field", "duplicated field", "reordered fields", "swapped values",
            "another JSON type", "deep nesting", "shifted offsets", "huge field")


def jsonl_mutation(op, rng, data):
    """A JSON-tree mutation of one line of a JSON Lines file."""
    lines = _lines(data)
    k = rng.choice([i for i, line in enumerate(lines) if line.strip()])
    lines[k] = dumps(json_mutation(op, rng, json.loads(lines[k]))).encode("utf-8")
    return b"\n".join(lines)


# ---------------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    fmt: str
    mutation: str
    files: dict  # split -> path of the file the command reads
    flags: list
    cli: bool
    mutated: str  # the split whose file was mutated
    extra: dict = field(default_factory=dict)

    def describe(self):
        path = self.files[self.mutated]
        data = open(path, "rb").read() if os.path.isfile(path) else b""
        return (f"{self.fmt}: {self.mutation} of the {self.mutated} file, flags {self.flags}, "
                f"{'console script' if self.cli else 'main() in process'}\n  input {path} "
                f"({len(data)} bytes): {data[:1500]!r}")


def record_outcome(case, code, output, problem, known=False):
    """Count the case's outcome; return the failure text, or None. ``known``: the
    problem is a reported one (counted as such, not a failure)."""
    if TRACEBACK in output:
        problem = "a traceback:\n" + output[-4000:]
    elif code not in (0, 2):
        problem = f"exit {code}:\n{output[-3000:]}"
    known = bool(problem) and known
    if known:
        OUTCOMES[case.fmt]["known"] += 1
        problem = None
    last = (output.strip().splitlines() or [""])[-1]
    CASES.append((case.fmt, case.mutation, " ".join(case.flags), code,
                  "PROBLEM" if problem else "known" if known else "", last[:200]))
    OUTCOMES[case.fmt][f"exit {code}"] += 1
    OUTCOMES[case.fmt]["cases"] += 1
    OUTCOMES[case.fmt][case.mutation] += 1
    OUTCOMES[case.fmt]["cli" if case.cli else "in process"] += 1
    if problem:
        OUTCOMES[case.fmt]["problems"] += 1
        return f"{case.describe()}\n  problem: {problem}"
    return None


def fail_on(failures):
    assert not failures, f"{len(failures)} failing cases:\n\n" + "\n\n".join(failures)


# ---------------------------------------------------------------------------------
# What an exit-0 folder must hold


def read_record(out):
    with open(os.path.join(out, "provenance.json"), encoding="utf-8") as f:
        return json.load(f)


def dropped_rows(out):
    """``{split: {line: reason}}`` of dropped_rows.tsv (every builder's list)."""
    dropped = defaultdict(dict)
    with open(os.path.join(out, "dropped_rows.tsv"), encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")[1:]
    for line in lines:
        if line:
            split, _file, where, reason = line.split("\t", 3)
            key = int(where) if where.isdigit() else where
            if key in dropped[split]:
                raise AssertionError(f"dropped_rows.tsv lists {split} {where} twice")
            dropped[split][key] = reason
    return dropped


def raw_lines(path):
    """The rows of a folder file written one a line (only ``\\n`` ends a line)."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    return text.split("\n")[:-1] if text else []


def source_lines(data, bad_utf8):
    """The decoded lines of an input file as the line readers split them, and whether
    every line was valid UTF-8."""
    if data.startswith(BOM):
        data = data[len(BOM):]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    valid = True
    out = []
    for line in lines:
        line = line[:-1] if line.endswith(b"\r") else line
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            valid = False
            out.append(line.decode("utf-8", "replace"))
    return out, valid


def reconcile(records, dropped, kept, expect, recorded):
    """:func:`walk_rows`, then the record's row count (``recorded``) against the rows
    the folder kept. Returns a problem, or None."""
    return walk_rows(records, dropped, kept, expect) or (
        None if recorded == len(kept) else f"record rows {recorded}, {len(kept)} rows in raw/")


def walk_rows(records, dropped, kept, expect):
    """Rows read = rows kept + rows dropped, and every kept row is its input row.

    records: ``[(line number, record)]`` of the input in order; dropped: ``{line:
    reason}`` (a quoted field's reason names the line it ends on: the lines up to it
    are one record); kept: the folder's rows in order; expect(record) -> what the
    folder must hold for it. Returns a problem, or None."""
    k, skip_to = 0, 0
    for line, record in records:
        if line <= skip_to:
            continue
        if line in dropped:
            end = re.search(r"it ends on line (\d+)", dropped[line])
            skip_to = int(end.group(1)) if end else line
            continue
        try:
            want = expect(record)
        except (KeyError, TypeError, ValueError, IndexError):  # not a row of the format
            want = NEVER_KEPT
        if k >= len(kept):
            return f"input line {line} is neither kept nor listed as dropped"
        if kept[k] != want:
            return f"input line {line} is kept as {kept[k]!r:.300}, the line holds {want!r:.300}"
        k += 1
    if k != len(kept):
        return f"{len(kept)} rows kept, {k} input rows to keep"
    listed = set(dropped) - {line for line, _ in records}
    if listed:
        return f"dropped_rows.tsv lists lines {sorted(listed)[:5]} the input does not have"
    return None


def check_classes(out, record, splits):
    """The label names are the training split's labels, every other split's labels are
    among them, and each label item is that label."""
    from span_plugin.preprocess.binary.indexed import IndexedReader

    names = record["labels"]["names"]
    train = raw_lines(os.path.join(out, "raw", "train.label"))
    if train is not None and sorted(set(train)) != sorted(names):
        return f"label names {names} but the training split's labels are {sorted(set(train))}"
    with open(os.path.join(out, "label", "dict.txt"), encoding="utf-8") as f:
        entries = [line.rsplit(" ", 1)[0] for line in f]
    for split in splits:
        labels = raw_lines(os.path.join(out, "raw", f"{split}.label"))
        if labels is None:
            continue
        if set(labels) - set(names):
            return f"{split} labels {sorted(set(labels) - set(names))} are not train's {names}"
        items = IndexedReader(os.path.join(out, "label", split))
        for i, (item, label) in enumerate(zip(items, labels)):
            if len(item) != 2 or entries[int(item[0]) - 4] != label:  # 4 specials first
                return f"label item {i} of {split} is {item.tolist()}, not the label {label!r}"
        if len(items) != len(labels):
            return f"{len(items)} label items for {len(labels)} {split} rows"
    return None


def check_folder_passes(out):
    from span_plugin.preprocess.folders.check import check_folder

    try:
        check_folder(out)
    except Exception as err:  # noqa: BLE001 -- any refusal of a folder just written
        return f"span-preprocess check refuses the folder: {type(err).__name__}: {err}"
    return None


def decimal(text):
    """The number ``text`` writes in ASCII decimal notation (what a score file means),
    else None."""
    if re.fullmatch(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", text):
        value = float(text)
        if abs(value) != float("inf"):
            return value
    return None


NEVER_KEPT = ("a row that is not to be kept",)  # equals no row of a folder


def first_problem(*checks):
    for check in checks:
        problem = check()
        if problem:
            return problem
    return None


# ---------------------------------------------------------------------------------
# Real rows


def real_lines(path, first, n):
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    return b"\n".join(lines[first:first + n]) + b"\n"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The module's folder, with ``dict.txt``: GPT-2's first 3,000 symbols; every
    command of the module gets it as --srcdict."""
    root = tmp_path_factory.mktemp("fuzz")
    with open(GPT2_BPE / "dict.txt", encoding="utf-8") as f:
        head = [next(f) for _ in range(3000)]
    (root / "dict.txt").write_text("".join(head), encoding="utf-8")
    ENC[len(ENC):] = ["--srcdict", str(root / "dict.txt")]
    return root


def schedule(rng, combinations, n):
    """``n`` cases that go through every combination (format, mutation, ...) in a
    shuffled order before any comes again."""
    order = sorted(combinations)
    rng.shuffle(order)
    return [order[i % len(order)] for i in range(n)]


# ---------------------------------------------------------------------------------
# GLUE TSV (span-preprocess glue)

# task: (header lines, 1-based input columns, label column, regression)
GLUE_TASKS = {"MRPC": (1, (4, 5), 1, False), "STS-B": (1, (8, 9), 10, True),
              "CoLA": (0, (4,), 2, False)}


def glue_expect(cols, label_col, regression, width):
    def expect(line):
        fields = line.split("\t")
        if len(fields) != width:
            return NEVER_KEPT
        label = fields[label_col - 1].strip()
        if regression:
            if decimal(label) is None:
                return NEVER_KEPT
            label = "%.6g" % (decimal(label) / 5.0)
        return tuple(fields[c - 1].replace("\r", " ").strip() for c in cols) + (label,)
    return expect


def kept_rows(out, split, n_inputs, regression):
    cols = [raw_lines(os.path.join(out, "raw", f"{split}.input{k}")) for k in range(n_inputs)]
    label_file = (os.path.join(out, "label", f"{split}.label") if regression
                  else os.path.join(out, "raw", f"{split}.label"))
    labels = raw_lines(label_file)
    return [tuple(r) for r in zip(*cols, labels)] if labels is not None else \
        [tuple(r) for r in zip(*cols)]


def check_glue(case, out):
    task = case.extra["task"]
    header, cols, label_col, regression = GLUE_TASKS[task]
    record = read_record(out)
    dropped = dropped_rows(out)
    bad_utf8 = "replace" if "replace" in case.flags else "error"
    for split, path in case.files.items():
        lines, valid = source_lines(open(path, "rb").read(), bad_utf8)
        if not valid and bad_utf8 == "error":
            return f"{path}: invalid UTF-8 read without --bad-utf8 replace"
        width = len(lines[0].split("\t")) if header else 4
        records = [(i + 1, line) for i, line in enumerate(lines) if i >= header]
        kept = kept_rows(out, split, len(cols), regression)
        expect = glue_expect(cols, label_col, regression, width)
        problem = reconcile(records, dropped.get(split, {}), kept, expect, record["rows"][split])
        if problem:
            return f"{split}: {problem}"
    return first_problem(
        lambda: None if regression else check_classes(out, record, case.files),
        lambda: check_folder_passes(out))


def write_splits(rng, folder, sources, mutate, which):
    """Write each split's bytes, ``sources = {split: (file name, data)}``, into
    ``folder``, the split ``which`` mutated; returns ``{split: path}``."""
    files = {}
    for split, (name, data) in sources.items():
        path = folder / name
        path.write_bytes(mutate(rng, data) if split == which else data)
        files[split] = str(path)
    return files


def glue_cases(rng, work, n):
    sources = {}
    for task, (header, *_rest) in GLUE_TASKS.items():
        sources[task] = {"train": real_lines(GLUE / task / "train.tsv", 0, header + 8),
                         "dev": real_lines(GLUE / task / "dev.tsv", 0, header + 4)}
    table = {**BYTE_MUTATIONS, **LINE_MUTATIONS, **field_mutations(b"\t")}
    flag_sets = [[], ["--bad-rows", "skip"],
                 ["--bad-rows", "skip", "--unknown-labels", "skip", "--bad-utf8", "replace"]]
    for i, name in enumerate(schedule(rng, table, n)):
        mutate = table[name]
        task = rng.choice(sorted(GLUE_TASKS))
        which = rng.choice(["train", "train", "valid"])
        folder = work / f"glue{i}"
        (folder / task).mkdir(parents=True)
        files = write_splits(rng, folder, {"train": (f"{task}/train.tsv", sources[task]["train"]),
                                           "valid": (f"{task}/dev.tsv", sources[task]["dev"])},
                             mutate, which)
        yield Case("GLUE TSV", name, files, rng.choice(flag_sets), i % CLI_EVERY == 0,
                   which, {"task": task, "dir": folder})


def run_glue(case, out):
    return run("span-preprocess", ["glue", "--task", case.extra["task"], "--glue-dir",
                                   case.extra["dir"], "--out", out, *ENC, *case.flags], case.cli)


# ---------------------------------------------------------------------------------
# Tables: TSV, CSV, JSON Lines (span-preprocess table)

TABLE_COLUMNS = ("label", "sentence1", "sentence2")


def table_rows(task, first, n):
    """Real rows as (label, sentence1, sentence2): MRPC classes, STS-B scores."""
    header, cols, label_col, _ = GLUE_TASKS[task]
    split = "train" if first == 0 else "dev"
    lines = (GLUE / task / f"{split}.tsv").read_text(encoding="utf-8-sig").splitlines()
    rows = [line.split("\t") for line in lines[header:header + n]]
    return [(r[label_col - 1], r[cols[0] - 1], r[cols[1] - 1]) for r in rows]


def write_table(fmt, rows):
    if fmt == "tsv":
        return "".join("\t".join(r) + "\n" for r in [TABLE_COLUMNS, *rows]).encode()
    if fmt == "csv":
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([TABLE_COLUMNS, *rows])
        return buf.getvalue().encode()
    return "".join(json.dumps({"sentence1": a, "sentence2": b,
                               "label": int(y) if y.isdigit() else y}) + "\n"
                   for y, a, b in rows).encode()


def table_records(fmt, lines):
    """``[(line, record)]`` of a table's data rows and the header (None: JSON Lines)."""
    if fmt == "tsv":
        return [(i + 1, line) for i, line in enumerate(lines) if i >= 1], lines[0].split("\t")
    if fmt == "csv":
        reader = csv.reader(io.StringIO("".join(line + "\n" for line in lines)), strict=True)
        out, start = [], 1
        for fields in reader:
            out.append((start, fields))
            start = reader.line_num + 1
        header = [h.strip() for h in out[0][1]]
        return out[1:], header
    return [(i + 1, line) for i, line in enumerate(lines)], None


def table_expect(fmt, header, regression):
    def label_of(value):
        value = value.strip()
        if regression:
            return None if decimal(value) is None else format(decimal(value), ".9g")
        return value

    def clean(text):
        return text.replace("\r", " ").replace("\n", " ").strip()

    def expect(record):
        if fmt == "jsonl":
            obj = json.loads(record)
            values = [v if isinstance(v, str) else json.dumps(v)
                      for v in (obj["sentence1"], obj["sentence2"], obj["label"])]
        else:
            fields = record.split("\t") if fmt == "tsv" else record
            if len(fields) != len(header):
                return NEVER_KEPT
            row = dict(zip([h.strip() for h in header], fields))
            values = [row["sentence1"], row["sentence2"], row["label"]]
        label = label_of(values[2])
        return NEVER_KEPT if label is None else (clean(values[0]), clean(values[1]), label)
    return expect


def check_table(case, out):
    record = read_record(out)
    dropped = dropped_rows(out)
    regression = "--regression" in case.flags
    bad_utf8 = "replace" if "replace" in case.flags else "error"
    for split, path in case.files.items():
        lines, valid = source_lines(open(path, "rb").read(), bad_utf8)
        if not valid and bad_utf8 == "error":
            return f"{path}: invalid UTF-8 read without --bad-utf8 replace"
        fmt = case.extra["fmt"]
        records, header = table_records(fmt, lines)
        kept = kept_rows(out, split, 2, regression)
        expect = table_expect(fmt, header, regression)
        problem = reconcile(records, dropped.get(split, {}), kept, expect, record["rows"][split])
        if problem:
            return f"{split}: {problem}"
    return first_problem(
        lambda: None if regression else check_classes(out, record, case.files),
        lambda: check_folder_passes(out))


def table_cases(rng, work, n):
    sources = {task: (table_rows(task, 0, 8), table_rows(task, 1, 4)) for task in ("MRPC", "STS-B")}
    flag_sets = [[], ["--bad-rows", "skip"],
                 ["--bad-rows", "skip", "--unknown-labels", "skip", "--bad-utf8", "replace"]]
    tables = {fmt: {**BYTE_MUTATIONS, **LINE_MUTATIONS} for fmt in ("tsv", "csv", "jsonl")}
    tables["tsv"].update(field_mutations(b"\t"))
    tables["csv"].update(field_mutations(b","))
    tables["jsonl"].update({op: (lambda op: lambda r, d: jsonl_mutation(op, r, d))(op)
                            for op in JSON_OPS if op != "shifted offsets"})
    combinations = [(fmt, name) for fmt, table in tables.items() for name in table]
    for i, (fmt, name) in enumerate(schedule(rng, combinations, n)):
        mutate = tables[fmt][name]
        task = rng.choice(["MRPC", "MRPC", "STS-B"])
        which = rng.choice(["train", "train", "valid"])
        folder = work / f"table{i}"
        folder.mkdir()
        files = write_splits(rng, folder, {split: (f"{split}.{fmt}", write_table(fmt, rows))
                                           for split, rows in zip(("train", "valid"), sources[task])},
                             mutate, which)
        flags = list(rng.choice(flag_sets)) + (["--regression"] if task == "STS-B" else [])
        yield Case(f"table {fmt.upper() if fmt != 'jsonl' else 'JSONL'}", name, files, flags,
                   i % CLI_EVERY == 0, which, {"fmt": fmt})


def run_table(case, out):
    files = [a for split, path in case.files.items() for a in (f"--{split}", path)]
    return run("span-preprocess", ["table", "--out", out, *files, "--text-columns", "sentence1",
                                   "sentence2", "--label-column", "label", *ENC, *case.flags],
               case.cli)


# ---------------------------------------------------------------------------------
# CoNLL (span-preprocess conll)


def conll_sentences(lines):
    """``[(first line, [(word, tag, line)])]``: runs of word lines, as CoNLL defines
    sentences (blank and -DOCSTART- lines end them)."""
    out, words = [], []
    for n, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                out.append((words[0][2], words))
            words = []
            continue
        words.append((fields[0], fields[-1], n))
    if words:
        out.append((words[0][2], words))
    return out


def tag_type(tag):
    return None if tag == "O" else tag.partition("-")[2]


def check_conll(case, out):
    from span_plugin.formats.tags import tag_names

    record = read_record(out)
    labels = record["labels"]
    dropped = dropped_rows(out)
    bad_utf8 = "replace" if "replace" in case.flags else "error"
    read = {}
    for split, path in case.files.items():
        lines, valid = source_lines(open(path, "rb").read(), bad_utf8)
        if not valid and bad_utf8 == "error":
            return f"{path}: invalid UTF-8 read without --bad-utf8 replace"
        read[split] = conll_sentences(lines)
    train_types = {tag_type(t) for _, words in read["train"] for _, t, _ in words} - {None}
    if labels["names"] != tag_names(train_types):
        return f"tags {labels['names']}, but the training split's types are {sorted(train_types)}"
    for split, sentences in read.items():
        stats = labels["stats"][split]
        items = raw_lines(os.path.join(out, "raw", f"{split}.input0"))
        tags = raw_lines(os.path.join(out, "raw", f"{split}.label"))
        starts = raw_lines(os.path.join(out, "raw", f"{split}.source"))
        left = dropped.get(split, {})
        kept = [words for first, words in sentences if first not in left]
        if len(kept) + len(left) != len(sentences) or stats["sentences"] != len(sentences):
            return (f"{split}: {len(sentences)} sentences read, {len(kept)} kept + {len(left)} "
                    f"dropped (record: {stats['sentences']} sentences)")
        if stats["items"] != len(items) or len(items) != len(kept) + stats["split_sentences"]:
            return f"{split}: {len(items)} items for {len(kept)} sentences kept ({stats})"
        words = [w for ws in kept for w in ws]
        got = [(w, t) for item, item_tags in zip(items, tags)
               for w, t in zip(item.split(" "), item_tags.split(" "))]
        if [w for w, _ in got] != [w for w, _, _ in words]:
            return f"{split}: the folder's words are not the input's words"
        for (word, tag), (_, source_tag, line) in zip(got, words):
            wanted = tag_type(source_tag)
            if tag not in labels["names"] or (tag_type(tag) not in (wanted, None)) or (
                    tag_type(tag) is None and wanted in train_types):
                return f"{split}: line {line} word {word!r} tagged {source_tag}, stored {tag}"
        item_lines = [int(s.split(" ")[0]) for s in starts]
        firsts = []
        position = 0
        for item in items:
            firsts.append(words[position][2])
            position += len(item.split(" "))
        if item_lines != firsts:
            return (f"{split}: raw/{split}.source gives lines {item_lines}, the items' first "
                    f"words are on lines {firsts}")
    return check_folder_passes(out)


def conll_cases(rng, work, n):
    sources = {"train": real_lines(DATA / "conll2003" / "train.txt", 0, 60),
               "valid": real_lines(DATA / "conll2003" / "valid.txt", 0, 30)}
    table = {**BYTE_MUTATIONS, **LINE_MUTATIONS, **field_mutations(None),
             "tag changed": conll_tag_change}
    flag_sets = [[], ["--unknown-labels", "skip"], ["--bad-utf8", "replace"],
                 ["--tag-scheme", "iob1", "--bad-tags", "error"], ["--max-tokens", "40"]]
    for i, name in enumerate(schedule(rng, table, n)):
        mutate = table[name]
        which = rng.choice(["train", "train", "valid"])
        folder = work / f"conll{i}"
        folder.mkdir()
        files = write_splits(rng, folder, {split: (f"{split}.txt", data) for split, data in sources.items()},
                             mutate, which)
        yield Case("CoNLL", name, files, rng.choice(flag_sets), i % CLI_EVERY == 0, which)


def conll_tag_change(rng, data):
    """One word's tag changed: another prefix (I- after O, S-, a bare type) or type."""
    lines = _lines(data)
    k = rng.choice([i for i, line in enumerate(lines) if len(line.split()) == 4
                    and not line.startswith(b"-DOCSTART-")])
    fields = lines[k].split()
    fields[-1] = rng.choice([b"I-PER", b"B-XYZ", b"S-ORG", b"PER", b"B-", b"O-MISC", b"i-loc"])
    lines[k] = b" ".join(fields)
    return b"\n".join(lines)


def run_conll(case, out):
    files = [a for split, path in case.files.items() for a in (f"--{split}", path)]
    return run("span-preprocess", ["conll", "--out", out, *files, *ENC, *case.flags], case.cli)


# ---------------------------------------------------------------------------------
# SQuAD JSON and MRQA JSON Lines, plain and gzip (span-preprocess qa)

QA_FLAGS = ["--max-positions", "128", "--doc-stride", "32"]


def squad_sources():
    """Real SQuAD v1.1 dev questions: train 4 questions of each of 3 paragraphs, valid 3
    questions of another (article Super_Bowl_50)."""
    with open(DATA / "squad" / "dev-v1.1.json", encoding="utf-8") as f:
        article = json.load(f)["data"][0]

    def piece(paragraphs, n):
        return {"version": "1.1", "data": [{"title": article["title"], "paragraphs": [
            dict(p, qas=p["qas"][:n]) for p in paragraphs]}]}

    return {"train": piece(article["paragraphs"][1:4], 4),
            "valid": piece(article["paragraphs"][4:5], 3)}


def as_mrqa(squad):
    """The same questions in MRQA's layout: a header line, one context a line,
    detected answers with inclusive char_spans."""
    lines = [json.dumps({"header": {"dataset": "SQuAD", "split": "dev"}})]
    for p in squad["data"][0]["paragraphs"]:
        qas = []
        for qa in p["qas"]:
            spans = defaultdict(list)
            for a in qa["answers"]:
                span = [a["answer_start"], a["answer_start"] + len(a["text"]) - 1]
                if span not in spans[a["text"]]:
                    spans[a["text"]].append(span)
            qas.append({"qid": qa["id"], "question": qa["question"],
                        "answers": [a["text"] for a in qa["answers"]],
                        "detected_answers": [{"text": t, "char_spans": s}
                                             for t, s in spans.items()]})
        lines.append(json.dumps({"context": p["context"], "qas": qas}))
    return ("\n".join(lines) + "\n").encode()


def listed(obj, key):
    value = obj.get(key)
    return value if isinstance(value, list) else []


def qa_questions(data, mrqa):
    """``[(id, question, context, {(answer text, start)})]`` of every question of a QA
    file (whatever each question holds), in file order."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    data = data[len(BOM):] if data.startswith(BOM) else data
    out = []

    def question(qa, context, answers):
        if not isinstance(qa, dict):
            return (None, None, context, set())
        return (qa.get("qid" if mrqa else "id"), qa.get("question"), context, answers(qa))

    if not mrqa:
        for article in json.loads(data.decode("utf-8"))["data"]:
            for p in article["paragraphs"]:
                for qa in p["qas"]:
                    out.append(question(qa, p["context"], lambda qa: {
                        (a.get("text"), a.get("answer_start")) for a in listed(qa, "answers")
                        if isinstance(a, dict) and isinstance(a.get("answer_start"), int)}))
        return out
    lines = [json.loads(line) for line in data.decode("utf-8").split("\n") if line.strip()]
    for obj in lines[1:]:
        context = obj["context"]
        for qa in obj["qas"]:
            out.append(question(qa, context, lambda qa: {
                (context[s:e + 1], s) for d in listed(qa, "detected_answers")
                if isinstance(d, dict) for span in listed(d, "char_spans")
                if isinstance(span, list) and len(span) == 2
                for s, e in [span] if isinstance(s, int) and isinstance(e, int)}))
    return out


def check_qa(case, out):
    record = read_record(out)
    with open(os.path.join(out, "dropped_rows.tsv"), encoding="utf-8", newline="") as f:
        dropped = Counter(line.split("\t", 1)[0] for line in f.read().split("\n")[1:] if line)
    for split, path in case.files.items():
        questions = qa_questions(open(path, "rb").read(), case.extra["mrqa"])
        kept = [json.loads(line) for line in raw_lines(os.path.join(out, "raw", f"{split}.jsonl"))]
        if record["rows"][split] != len(kept) or len(kept) + dropped[split] != len(questions):
            return (f"{split}: {len(questions)} questions read, {len(kept)} kept (record: "
                    f"{record['rows'][split]}) + {dropped[split]} dropped")
        position = 0
        for r in kept:  # the kept questions are the input's, in order, answers unshifted
            while position < len(questions) and questions[position][:3] != (
                    r["id"], r["question"], r["context"]):
                position += 1
            if position == len(questions):
                return f"{split}: kept question {r['id']!r} is no question of the input, in order"
            for text, start in r["answers"]:
                where = f"{split}: {r['id']!r}: answer {text!r} at {start}"
                if r["context"][start:start + len(text)] != text:
                    return f"{where} does not read its text"
                if (text, start) not in questions[position][3]:
                    return f"{where} is not an answer of the input"
            position += 1
    return check_folder_passes(out)


def qa_cases(rng, work, n):
    squad = squad_sources()
    texts = {split: json.dumps(obj).encode() for split, obj in squad.items()}
    mrqa = {split: as_mrqa(obj) for split, obj in squad.items()}
    json_ops = {op: op for op in JSON_OPS}
    tables = {"squad": {**BYTE_MUTATIONS, **json_ops},
              "mrqa": {**BYTE_MUTATIONS, **LINE_MUTATIONS, **json_ops},
              # gzip: the compressed bytes cut or flipped, and a few mutations of the text
              "mrqa.gz": {"gzip: truncation": "gz truncation", "gzip: byte flips": "gz flips",
                          **{k: BYTE_MUTATIONS[k] for k in ("empty file", "truncation",
                                                            "invalid UTF-8")},
                          "shifted offsets": "shifted offsets"}}
    combinations = [(layout, name) for layout, table in tables.items() for name in table]
    for i, (layout, name) in enumerate(schedule(rng, combinations, n)):
        how = tables[layout][name]
        which = rng.choice(["train", "train", "valid"])
        folder = work / f"qa{i}"
        folder.mkdir()
        files = {}
        for split in ("train", "valid"):
            data = texts[split] if layout == "squad" else mrqa[split]
            if split == which and not isinstance(how, str):
                data = how(rng, data)
            elif split == which and how in JSON_OPS:
                data = (dumps(json_mutation(how, rng, squad[split])).encode() if layout == "squad"
                        else jsonl_mutation(how, rng, data))
            if layout == "mrqa.gz":
                data = gzip.compress(data, mtime=0)
                if split == which and how == "gz truncation":
                    data = m_truncate(rng, data)
                elif split == which and how == "gz flips":
                    data = m_byte_flips(rng, data)
            suffix = {"squad": "json", "mrqa": "jsonl", "mrqa.gz": "jsonl.gz"}[layout]
            path = folder / f"{split}.{suffix}"
            path.write_bytes(data)
            files[split] = str(path)
        fmt = {"squad": "SQuAD JSON", "mrqa": "MRQA JSONL", "mrqa.gz": "MRQA JSONL gzip"}[layout]
        yield Case(fmt, name, files, rng.choice([[], ["--on-bad", "error"]]),
                   i % CLI_EVERY == 0, which, {"mrqa": layout != "squad"})


def run_qa(case, out):
    files = [a for split, path in case.files.items() for a in (f"--{split}", path)]
    return run("span-preprocess", ["qa", "--out", out, *files, *ENC, *QA_FLAGS, *case.flags],
               case.cli)


# ---------------------------------------------------------------------------------
# Phrase pairs (span-preprocess pairs)

PHRASE_LABELS = ("paraphrase", "random", "in-paraphrase")


def pair_source(rng, rows):
    """Real MRPC pairs with phrase pairs of 1-3 whole words on each side (MRPC is
    tokenized with spaces: every word is a token boundary)."""
    lines = []
    for label, a, b in rows:
        wa, wb = ([m.span() for m in re.finditer(r"\S+", t)] for t in (a, b))
        phrases = []
        for _ in range(rng.randint(0, 3)):
            ranges = []
            for words in (wa, wb):
                i = rng.randrange(len(words))
                j = min(len(words), i + rng.randint(1, 3))
                ranges.append([words[i][0], words[j - 1][1]])
            phrases.append({"source": ranges[0], "target": ranges[1],
                            "label": rng.choice(PHRASE_LABELS)})
        lines.append(json.dumps({"sentence1": a, "sentence2": b, "label": label,
                                 "phrases": phrases}))
    return ("\n".join(lines) + "\n").encode()


def check_pairs(case, out):
    from span_plugin.preprocess.binary.indexed import IndexedReader

    record = read_record(out)
    dropped = dropped_rows(out)
    labelled = "--label-column" in case.flags
    bad_utf8 = "replace" if "replace" in case.flags else "error"

    def clean(v):
        text = v if isinstance(v, str) else json.dumps(v)
        return text.replace("\r", " ").replace("\n", " ").strip()

    def expect(line):
        obj = json.loads(line)
        row = (clean(obj["sentence1"]), clean(obj["sentence2"]))
        row += (clean(obj["label"]),) if labelled else ()
        return row + (tuple(PHRASE_LABELS.index(p["label"]) for p in obj["phrases"]),)

    for split, path in case.files.items():
        lines, valid = source_lines(open(path, "rb").read(), bad_utf8)
        if not valid and bad_utf8 == "error":
            return f"{path}: invalid UTF-8 read without --bad-utf8 replace"
        phrase_labels = [tuple(x.tolist()) for x in IndexedReader(
            os.path.join(out, "phrase_label", split))]
        kept = [row + (p,) for row, p in zip(kept_rows(out, split, 2, False), phrase_labels)]
        problem = reconcile([(i + 1, line) for i, line in enumerate(lines)],
                            dropped.get(split, {}), kept, expect, record["rows"][split])
        if problem:
            return f"{split}: {problem}"
    return first_problem(lambda: check_classes(out, record, case.files) if labelled else None,
                         lambda: check_folder_passes(out))


def pairs_cases(rng, work, n):
    sources = {"train": pair_source(rng, table_rows("MRPC", 0, 8)),
               "valid": pair_source(rng, table_rows("MRPC", 1, 4))}
    table = {**BYTE_MUTATIONS, **LINE_MUTATIONS,
             **{op: (lambda op: lambda r, d: jsonl_mutation(op, r, d))(op) for op in JSON_OPS}}
    flag_sets = [[], ["--label-column", "label"],
                 ["--label-column", "label", "--unknown-labels", "skip"],
                 ["--label-column", "label", "--bad-utf8", "replace"]]
    for i, name in enumerate(schedule(rng, table, n)):
        mutate = table[name]
        which = rng.choice(["train", "train", "valid"])
        folder = work / f"pairs{i}"
        folder.mkdir()
        files = write_splits(rng, folder, {split: (f"{split}.jsonl", data) for split, data in sources.items()},
                             mutate, which)
        yield Case("phrase pairs JSONL", name, files, rng.choice(flag_sets),
                   i % CLI_EVERY == 0, which)


def run_pairs(case, out):
    files = [a for split, path in case.files.items() for a in (f"--{split}", path)]
    return run("span-preprocess", ["pairs", "--out", out, *files, *ENC, *case.flags], case.cli)


# ---------------------------------------------------------------------------------
# The readers of users' files

# format: (cases, command, check of an exit-0 folder, number of cases)
FORMATS = {
    "glue": (glue_cases, run_glue, check_glue, 24),  # 12 mutations x 2 (MRPC, STS-B, CoLA)
    "table": (table_cases, run_table, check_table, 40),  # every (layout, mutation) once
    "conll": (conll_cases, run_conll, check_conll, 26),  # 13 mutations x 2
    "qa": (qa_cases, run_qa, check_qa, 37),  # every (layout, mutation) once
    "pairs": (pairs_cases, run_pairs, check_pairs, 24),  # 17 mutations, 7 twice
}


@pytest.fixture(scope="module", autouse=True)
def outcome_table():
    """Write the table of outcomes when FUZZ_TABLE names a file (and every case, one
    a line, to FUZZ_TABLE.cases.tsv)."""
    yield
    path = os.environ.get("FUZZ_TABLE")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(markdown_table())
        with open(path + ".cases.tsv", "w", encoding="utf-8") as f:
            f.writelines("\t".join(map(str, c)).replace("\n", " ") + "\n" for c in CASES)


def markdown_table():
    rows = ["| format | cases (console script) | mutations | exit 0 | exit 2 | other exit "
            "| known, reported | problems |", "|---|---|---|---|---|---|---|---|"]
    for fmt, c in sorted(OUTCOMES.items()):
        mutations = ", ".join(f"{m} {n}" for m, n in sorted(c.items()) if m not in {
            "cases", "cli", "in process", "problems", "known"} and not m.startswith("exit"))
        other = c["cases"] - c["exit 0"] - c["exit 2"]
        rows.append(f"| {fmt} | {c['cases']} ({c['cli']}) | {mutations} | {c['exit 0']} | "
                    f"{c['exit 2']} | {other} | {c['known']} | {c['problems']} |")
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_malformed_input_exits_0_or_2_and_reconciles(fmt, work):
    make, run_case, check, n = FORMATS[fmt]
    rng = random.Random(f"issue 39 fuzz {fmt}")  # fixed: the same cases every run
    root = work / fmt
    root.mkdir()
    failures = []
    for i, case in enumerate(make(rng, root, n)):
        out = root / f"out{i}"
        code, output = run_case(case, out)
        problem = None
        if code == 0 and TRACEBACK not in output:
            try:
                problem = check(case, out)
            except Exception:  # noqa: BLE001 -- a folder the check cannot read
                problem = "the folder does not read back:\n" + traceback.format_exc()
        elif code == 2 and (out.exists() or list(root.glob(f"out{i}.partial-*"))):
            problem = "exit 2, but a folder was left (a folder is whole or absent)"
        failure = record_outcome(case, code, output, problem)
        if failure:
            failures.append(failure)
        shutil.rmtree(out, ignore_errors=True)
    fail_on(failures)


# ---------------------------------------------------------------------------------
# What the harness found in the readers, fixed there: each was a traceback or a
# silent change, and stays tested here on real rows.


def test_json_nested_deeper_than_the_recursion_limit_is_bad_input(tmp_path):
    """Was: RecursionError out of json.loads, a traceback, in every JSON reader."""
    from span_plugin.files.errors import BadInputError
    from span_plugin.formats.pairs import read_pair_rows
    from span_plugin.formats.squad import read_qa
    from span_plugin.formats.table import TableReading, read_table

    (label, a, b), = table_rows("MRPC", 0, 1)
    good = dumps({"sentence1": a, "sentence2": b, "label": label, "phrases": []})
    deep = dumps({"sentence1": a, "sentence2": DEEP, "label": label, "phrases": []})
    path = tmp_path / "rows.jsonl"
    path.write_text(good + "\n" + deep + "\n", encoding="utf-8")
    with pytest.raises(BadInputError, match=rf"{path}:2: JSON nested too deeply"):
        read_table(path, ["sentence1"], "label")
    skipped = read_table(path, ["sentence1"], "label", TableReading(bad_rows="skip"))
    assert skipped.dropped[0][0] == 2
    with pytest.raises(BadInputError, match=rf"{path}:2: JSON nested too deeply"):
        read_pair_rows(path)
    squad = tmp_path / "squad.json"
    squad.write_text(dumps(dict(squad_sources()["valid"], data=DEEP)), encoding="utf-8")
    with pytest.raises(BadInputError, match=rf"{squad}: JSON nested too deeply"):
        read_qa(squad)
    mrqa = tmp_path / "mrqa.jsonl"
    header, *contexts = as_mrqa(squad_sources()["valid"]).decode().splitlines()
    mrqa.write_text("\n".join([header, contexts[0], DEEP]) + "\n", encoding="utf-8")
    with pytest.raises(BadInputError, match=rf"{mrqa}:3: JSON nested too deeply"):
        read_qa(mrqa)


def test_a_damaged_deflate_stream_is_an_unreadable_gzip_file(tmp_path):
    """Was: zlib.error (neither OSError nor EOFError), a traceback: one flipped bit in
    the deflate stream of an MRQA .jsonl.gz (here: its first block's type made 3,
    which deflate reserves)."""
    from span_plugin.files.errors import BadInputError
    from span_plugin.formats.squad import read_qa

    data = bytearray(gzip.compress(as_mrqa(squad_sources()["valid"]), mtime=0))
    data[10] |= 0b110  # the first byte after gzip's 10-byte header: BFINAL, BTYPE
    path = tmp_path / "valid.jsonl.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(BadInputError, match=rf"{path}:1: not a readable gzip file "
                       r"\(Error -3 .*invalid block type\)"):
        read_qa(path)


def test_a_phrase_label_that_is_not_a_string_is_named(tmp_path):
    """Was: TypeError 'unhashable type: list' (a traceback) for "label": []."""
    from span_plugin.files.errors import BadInputError
    from span_plugin.formats.pairs import read_pair_rows

    lines = pair_source(random.Random(1), table_rows("MRPC", 0, 4)).decode().splitlines()
    objs = [json.loads(line) for line in lines]
    k = next(i for i, o in enumerate(objs) if o["phrases"])
    for value in ([], {}, 1, None):
        objs[k]["phrases"][0]["label"] = value
        path = tmp_path / "pairs.jsonl"
        path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
        with pytest.raises(BadInputError, match=rf"{path}:{k + 1}: phrase pair 0: label "
                           rf"{re.escape(json.dumps(value))} is not one of the declared"):
            read_pair_rows(path)


def test_o_with_a_type_is_outside_every_tag_scheme(tmp_path):
    """Was: ``O-MISC`` read as O (a silent change: the tag's type gone)."""
    from span_plugin.formats.conll import read_conll
    from span_plugin.files.errors import BadInputError

    lines = real_lines(DATA / "conll2003" / "train.txt", 0, 12).decode().split("\n")
    assert lines[4] == "German JJ B-NP B-MISC"
    lines[4] = "German JJ B-NP O-MISC"
    path = tmp_path / "train.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    for scheme in ("iob1", "iob2", "bioes"):
        with pytest.raises(BadInputError, match=rf"{path}:5: tag 'O-MISC' is not in the "
                           rf"{scheme} scheme"):
            read_conll(path, scheme)


@pytest.mark.parametrize("label", ["0\r1", "1\xa00", "1\u20280", "0\x0b1"])
def test_a_glue_class_label_holding_whitespace_is_refused(tmp_path, label):
    """Was: exit 0 with '1\\xa00' stored as two labels of one row, and '0\\r1' splitting
    label/train.label into one row more than the inputs (read with universal newlines),
    so every later label shifted; span-preprocess check failed on the folder."""
    from span_plugin.formats.glue import TASKS, read_split
    from span_plugin.files.errors import BadInputError

    lines = real_lines(GLUE / "MRPC" / "train.tsv", 0, 6).split(b"\n")
    fields = lines[2].split(b"\t")
    fields[0] = label.encode("utf-8")
    lines[2] = b"\t".join(fields)
    path = tmp_path / "train.tsv"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(BadInputError, match=rf"{path}:3: label {re.escape(repr(label.strip()))} "
                       r"in column 1 holds whitespace"):
        read_split(TASKS["MRPC"], path, "train", bad_rows="skip")


# ---------------------------------------------------------------------------------
# Checkpoints (span-predict; python -m span_plugin.runtime.checkpoints resume)

# Byte-level damage: a file that still loads must hold the intact checkpoint's tensors
# (structural changes below are files saved that way on purpose, not damage).
BYTE_LEVEL = ("empty file", "truncation", "byte flips", "byte flips in data.pkl",
              "byte flips in tensor data", "trailing junk (4 MB)", "text", "random bytes",
              "reordered zip entries", "duplicated zip entry")
# Problems of checkpoint loading once reported here and fixed since:
# torch.load verifies no CRC-32, so a flipped byte in a tensor's data loaded as a changed
# weight (the safe loader now checks the zip's CRCs), and span-predict printed a
# traceback for a checkpoint saved with a field dropped or of another type, a model
# tensor missing or unexpected, or ``model`` a list (now exit 2: the loader's
# structural check, the hub's weights_mismatch). None is left: the harness counts a
# case as "known" only while one of these names a problem still open.
KNOWN = None
KNOWN_TRACEBACKS = ()


class Payload:
    """Creates ``marker`` when unpickled: what a planted checkpoint would run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def train_tiny(data, save, *extra, max_update=1):
    """fairseq-train's entry point in this process: 1 update (``max_update``) of a
    1-layer model, with the ``extra`` arguments."""
    import fairseq_cli.train

    argv = ["fairseq-train", str(data), "--user-dir", str(USER_DIR), "--task",
            "span_classification", "--criterion", "span_classification", "--arch",
            "roberta_span_base", "--encoder-layers", "1", "--encoder-embed-dim", "16",
            "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
            "--max-positions", "128", "--num-classes", "2", "--init-token", "0",
            "--separator-token", "2", "--shorten-method", "truncate", "--max-spans", "64",
            "--max-span-tokens", "16", "--optimizer", "adam", "--lr", "1e-3",
            "--batch-size", "8", "--max-update", str(max_update), "--save-dir", str(save),
            "--cpu", "--seed", "1", "--num-workers", "0", "--no-progress-bar",
            "--disable-validation", "--no-epoch-checkpoints", *extra]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", argv)
        fairseq_cli.train.cli_main()
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def trained(work):
    """A checkpoint trained here (real MRPC rows), its data folder and what span-predict
    writes with it."""
    root = work / "checkpoint"
    root.mkdir()
    for split, rows in (("train", table_rows("MRPC", 0, 8)), ("valid", table_rows("MRPC", 1, 4))):
        (root / f"{split}.tsv").write_bytes(write_table("tsv", rows))
    data = root / "data"
    code, output = run("span-preprocess", [
        "table", "--out", data, "--train", root / "train.tsv", "--valid", root / "valid.tsv",
        "--text-columns", "sentence1", "sentence2", "--label-column", "label", *ENC], cli=False)
    assert code == 0, output
    intact = train_tiny(data, root / "save")
    code, output = predict(intact, data, root / "intact.tsv", cli=False)
    assert code == 0, output
    return {"checkpoint": intact, "data": data, "predicted": (root / "intact.tsv").read_bytes()}


def predict(checkpoint, data, out, cli):
    return run("span-predict", ["--checkpoint", checkpoint, "--data", data, "--split", "valid",
                                "--output", out], cli)


def _zip_entries(data):
    """``{name: (start, end)}``: where each entry's bytes lie in a (stored) zip."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        out = {}
        for info in z.infolist():
            # the local header: 30 bytes, then the name and extra field of its own lengths
            lengths = data[info.header_offset + 26:info.header_offset + 30]
            start = (info.header_offset + 30 + int.from_bytes(lengths[:2], "little")
                     + int.from_bytes(lengths[2:], "little"))
            out[info.filename] = (start, start + info.compress_size)
    return out


def _flip_inside(rng, data, span):
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        out[rng.randrange(*span)] ^= 1 << rng.randrange(8)
    return bytes(out)


def _rezip(data, order=None, extra=None):
    """The zip's entries written again (stored), in ``order`` (a function of the name
    list), with ``extra`` (name, bytes) added after them."""
    src = zipfile.ZipFile(io.BytesIO(data))
    names = src.namelist()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name in (order(names) if order else names):
            z.writestr(name, src.read(name))
        if extra:
            with pytest.warns(UserWarning, match="Duplicate name"):
                z.writestr(*extra)
    return buf.getvalue()


def _saved(state):
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def checkpoint_mutations(rng, intact, marker):
    """``[(mutation, bytes)]`` of the checkpoint: damage to its bytes, states saved with
    fields dropped, of another type, tensors dropped, added, reshaped or cast, and one
    with a planted payload that would create ``marker``."""
    import torch

    from span_plugin.convert.safe_load import load_checkpoint

    data = intact.read_bytes()
    entries = _zip_entries(data)
    pickle_at = next(span for name, span in entries.items() if name.endswith("/data.pkl"))
    tensor_at = max((span for name, span in entries.items() if "/data/" in name),
                    key=lambda s: s[1] - s[0])
    state = load_checkpoint(intact)
    out = [("empty file", b""), ("text", b"epoch 1 | loss 0.7 | a training log\n" * 50),
           ("random bytes", bytes(rng.randrange(256) for _ in range(5000))),
           ("trailing junk (4 MB)", data + bytes(4 << 20))]
    for lo, hi in ((1, 100), (100, len(data) // 2), (len(data) // 2, len(data) - 1)):
        out.append(("truncation", data[:rng.randrange(lo, hi)]))
    out += [("byte flips", m_byte_flips(rng, data)) for _ in range(2)]
    out += [("byte flips in data.pkl", _flip_inside(rng, data, pickle_at)) for _ in range(2)]
    out.append(("byte flips in tensor data", _flip_inside(rng, data, tensor_at)))
    out.append(("reordered zip entries", _rezip(data, order=lambda names: names[::-1])))
    doubled = {**state["model"]}
    key = rng.choice(sorted(doubled))
    doubled[key] = doubled[key] * 2
    other_pickle = zipfile.ZipFile(io.BytesIO(_saved(dict(state, model=doubled)))).read(
        next(n for n in zipfile.ZipFile(io.BytesIO(data)).namelist() if n.endswith("data.pkl")))
    name = next(n for n in entries if n.endswith("/data.pkl"))
    out.append(("duplicated zip entry", _rezip(data, extra=(name, other_pickle))))

    def changed(change):
        copy = dict(state, model=dict(state["model"]))
        change(copy)
        return _saved(copy)

    top = sorted(state)
    for key in rng.sample(top, 2):
        out.append(("dropped field", changed(lambda s, key=key: s.pop(key))))
    for key in rng.sample(top, 2):
        value = rng.choice([None, [], "x", 3])
        out.append(("another type",
                    changed(lambda s, key=key, value=value: s.update({key: value}))))
    weights = sorted(k for k, v in state["model"].items() if v.dim() == 2)
    key = rng.choice(weights)
    tensor = state["model"][key]
    out += [
        ("dropped tensor", changed(lambda s: s["model"].pop(key))),
        ("extra tensor", changed(lambda s: s["model"].update({"extra.weight": torch.ones(3)}))),
        ("reshaped tensor", changed(lambda s: s["model"].update({key: tensor.t().contiguous()}))),
        ("tensor of another dtype", changed(lambda s: s["model"].update({key: tensor.long()}))),
        ("model not a dict", changed(lambda s: s.update(model=list(s["model"].values())))),
        ("not a dict", _saved([tensor])),
        ("planted payload", changed(lambda s: s.update(
            extra_state=dict(s["extra_state"], planted=Payload(marker))))),
    ]
    return out


def same_tensors(path, intact_state):
    """Whether ``path`` loads to the intact checkpoint's model tensors (None: it does
    not load)."""
    import torch

    from span_plugin.convert.safe_load import CheckpointFileError, load_checkpoint

    try:
        state = load_checkpoint(path)
    except CheckpointFileError:
        return None
    model = state.get("model")
    return isinstance(model, dict) and model.keys() == intact_state["model"].keys() and all(
        isinstance(v, torch.Tensor) and v.dtype == intact_state["model"][k].dtype
        and v.shape == intact_state["model"][k].shape and torch.equal(v, intact_state["model"][k])
        for k, v in model.items())


def checkpoint_problem(command, mutation, save, trained, intact_state):
    """What is wrong after ``command`` exited 0 on ``save/checkpoint_last.pt`` (mutated),
    or None. A damaged file (BYTE_LEVEL) that loads must load as the intact one; resume
    must leave a checkpoint_last.pt that loads."""
    loads = same_tensors(save / "checkpoint_last.pt", intact_state)
    damage = KNOWN if KNOWN and mutation.startswith("byte flips") else None
    if command == "span-predict":
        if mutation not in BYTE_LEVEL:
            return None  # a checkpoint saved that way on purpose
        if not loads:
            return damage or "predicted from a damaged file that loads to other tensors"
        if (save / "out.tsv").read_bytes() != trained["predicted"]:
            return "predictions differ from the intact checkpoint's"
        return None
    if loads is None:
        return "resume left a checkpoint_last.pt that does not load"
    from span_plugin.convert.safe_load import load_checkpoint, structure_problem

    if structure_problem(load_checkpoint(save / "checkpoint_last.pt")):
        return "resume left a checkpoint_last.pt that fairseq cannot resume from"
    if not loads and mutation in BYTE_LEVEL:
        return damage or "resume keeps a damaged checkpoint_last.pt that loads to other tensors"
    return None


def test_damaged_checkpoints_exit_0_or_2_and_load_as_saved(trained, work):
    """span-predict, then resume, on every mutated checkpoint_last.pt (an intact
    checkpoint_best.pt beside it): exit 0 or 2, no traceback, and
    :func:`checkpoint_problem` on exit 0."""
    from span_plugin.convert.safe_load import load_checkpoint

    intact = trained["checkpoint"]
    intact_state = load_checkpoint(intact)
    rng = random.Random("issue 39 fuzz checkpoints")
    root = work / "checkpoints"
    root.mkdir()
    marker = root / "code_ran"
    failures = []
    for i, (mutation, data) in enumerate(checkpoint_mutations(rng, intact, marker)):
        save = root / f"save{i}"
        save.mkdir()
        mutated = save / "checkpoint_last.pt"
        mutated.write_bytes(data)
        shutil.copy(intact, save / "checkpoint_best.pt")
        for command in ("span-predict", "resume"):
            # span-predict's console script takes ~5 s to start: once; resume twice
            cli = i in {"span-predict": (1,), "resume": (3, 13)}[command]
            case = Case(f"checkpoint ({command})", mutation, {"checkpoint": str(mutated)}, [],
                        cli, "checkpoint")
            if command == "span-predict":
                code, output = predict(mutated, trained["data"], save / "out.tsv", cli)
            else:
                code, output = run("checkpoints", ["resume", save], cli)
            problem = None
            if code == 0 and TRACEBACK not in output:
                problem = checkpoint_problem(command, mutation, save, trained, intact_state)
            if marker.exists():
                problem = "code planted in the checkpoint ran"
                marker.unlink()
            known = (KNOWN is not None and problem == KNOWN) or (
                command == "span-predict" and mutation in KNOWN_TRACEBACKS)
            failure = record_outcome(case, code, output, problem, known)
            if failure:
                failures.append(failure)
        shutil.rmtree(save, ignore_errors=True)
    fail_on(failures)


# ---------------------------------------------------------------------------------
# Problems of checkpoint loading reported by this harness, fixed since: each exits 2
# with one line naming the file and what is wrong.


def _state_changed(trained, change):
    from span_plugin.convert.safe_load import load_checkpoint

    state = load_checkpoint(trained["checkpoint"])
    state["model"] = dict(state["model"])
    change(state)
    return _saved(state)


EMBED = "encoder.sentence_encoder.embed_tokens.weight"
OTHER_FIELDS = {
    "optimizer_history dropped": lambda s: s.pop("optimizer_history"),
    "extra_state a list": lambda s: s.update(extra_state=[]),
    "a model tensor dropped": lambda s: s["model"].pop(EMBED),
    "an unexpected model tensor": lambda s: s["model"].update({"extra.weight": s["model"][EMBED]}),
    "model a list": lambda s: s.update(model=list(s["model"].values())),
    "cfg a string": lambda s: s.update(cfg="x"),
}


@pytest.mark.parametrize("name", sorted(OTHER_FIELDS))
def test_checkpoint_of_other_fields_exits_2_without_traceback(trained, tmp_path, name):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(_state_changed(trained, OTHER_FIELDS[name]))
    code, output = predict(path, trained["data"], tmp_path / "out.tsv", cli=False)
    assert code == 2 and TRACEBACK not in output, output[-3000:]
    assert str(path) in output and ("damaged" in output or "does not fit" in output), output
    if "tensor" in name:  # the key is named
        assert ("extra.weight" if "unexpected" in name else EMBED) in output, output


def test_a_flipped_byte_in_tensor_data_is_refused(trained, tmp_path):
    data = trained["checkpoint"].read_bytes()
    start, end = max((span for name, span in _zip_entries(data).items() if "/data/" in name),
                     key=lambda s: s[1] - s[0])
    flipped = bytearray(data)
    flipped[(start + end) // 2] ^= 0x40
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(bytes(flipped))
    code, output = predict(path, trained["data"], tmp_path / "out.tsv", cli=False)
    assert code == 2 and TRACEBACK not in output and "damaged" in output, output[-3000:]
    assert "CRC-32" in output, output


@pytest.mark.parametrize("name", ["optimizer_history dropped", "model a list"])
def test_resume_sets_aside_a_checkpoint_last_fairseq_cannot_use(trained, tmp_path, name):
    """A checkpoint_last.pt that loads but lacks what fairseq resumes from is moved
    aside as damaged; the intact checkpoint_best.pt takes its place."""
    from span_plugin.convert.safe_load import load_checkpoint, structure_problem

    save = tmp_path / "save"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(_state_changed(trained, OTHER_FIELDS[name]))
    shutil.copy(trained["checkpoint"], save / "checkpoint_best.pt")
    code, output = run("checkpoints", ["resume", save], cli=False)
    assert code == 0 and "damaged" in output, output
    assert (save / "checkpoint_last.pt.damaged").exists()
    assert structure_problem(load_checkpoint(save / "checkpoint_last.pt")) is None


# ---------------------------------------------------------------------------------
# Faults, signals, Unicode labels, flags and Hugging Face folders: each case must end
# with exit 0 or with one line naming the real cause (exit 2; 130 for SIGINT), never a
# traceback, a silent change, a misleading error or a lost or partial output.

CLASS_ROWS = []  # (class, case, code, verdict): "ok" or what went wrong


def record_class(cls, name, code, output, problem):
    """Count a case of a class (the table of docs/RELIABILITY.md); the failure text, or
    None. ``problem``: "silent", "misleading", "lost output", ... or None."""
    if TRACEBACK in output:
        problem = "traceback"
    OUTCOMES[cls]["cases"] += 1
    OUTCOMES[cls][f"exit {code}"] += 1
    OUTCOMES[cls]["in process"] += 1
    OUTCOMES[cls][problem or "ok"] += 1
    if problem:
        OUTCOMES[cls]["problems"] += 1
    last = (output.strip().splitlines() or [""])[-1]
    CASES.append((cls, name, "", code, problem or "", last[:200]))
    CLASS_ROWS.append((cls, name, code, problem or "ok"))
    return f"{cls}: {name}: {problem} (exit {code})\n{output[-3000:]}" if problem else None


def verdict(code, output, expected_code, cause):
    """What is wrong with an error exit: None, or "silent" (exit 0 where it must stop),
    "misleading" (the last line does not name ``cause``, a regex), "exit N"."""
    if code == 0 and expected_code != 0:
        return "silent"
    if code != expected_code:
        return f"exit {code}"
    last = (output.strip().splitlines() or [""])[-1]
    if expected_code and not re.search(cause, last):
        return "misleading"
    return None


def tree(path):
    """``{relative path: bytes}`` of a folder (or ``{"": bytes}`` of a file); {} when absent."""
    path = str(path)
    if os.path.isfile(path):
        return {"": open(path, "rb").read()}
    out = {}
    for folder, _, names in os.walk(path):
        for name in names:
            full = os.path.join(folder, name)
            out[os.path.relpath(full, path)] = open(full, "rb").read()
    return out


def restore(path, files):
    """Write back what :func:`tree` read."""
    for rel, data in files.items():
        target = os.path.join(path, rel) if rel else str(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)


LEFTOVER = re.compile(r"(\.tmp$|\.partial-\d+|\.old-\d+)")


def leftovers(root):
    return sorted(os.path.join(f, n) for f, dirs, files in os.walk(root)
                  for n in dirs + files if LEFTOVER.search(n))


# Injected faults: the at-th write (ENOSPC, or SIGINT as KeyboardInterrupt) or the
# at-th creation of a file or folder (EROFS, EACCES) under a folder fails, as a full
# disk, a read-only target or a permission would: a failed write names no file.
FAULTS = {"ENOSPC": (errno.ENOSPC, "write"), "EROFS": (errno.EROFS, "create"),
          "EACCES": (errno.EACCES, "create"), "SIGINT": (None, "write")}


class _FailingFile:
    """A file whose writes count and fail at the chosen one."""

    def __init__(self, inner, fault):
        self._inner, self._fault = inner, fault

    def write(self, data):
        self._fault.tick("write")
        return self._inner.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class Fault:
    """Within ``with Fault(root, kind, at)``, the ``at``-th write or creation under
    ``root`` fails (``kind`` None: nothing fails; ``counts`` are what happened)."""

    def __init__(self, root, kind=None, at=0):
        self.root, self.kind, self.at = os.path.abspath(root), kind, at
        self.counts = Counter()

    def tick(self, what):
        self.counts[what] += 1
        if self.kind is None or FAULTS[self.kind][1] != what or self.counts[what] != self.at:
            return
        if self.kind == "SIGINT":
            raise KeyboardInterrupt
        code = FAULTS[self.kind][0]
        raise OSError(code, os.strerror(code), *(() if what == "write" else (self.path,)))

    def _under(self, path):
        return isinstance(path, (str, os.PathLike)) and \
            os.path.abspath(os.fspath(path)).startswith(self.root + os.sep)

    def __enter__(self):
        import builtins

        real_open, real_mkdir = builtins.open, os.mkdir

        def fault_open(file, mode="r", *args, **kwargs):
            if self._under(file) and any(m in mode for m in "wax+"):
                self.path = os.fspath(file)
                self.tick("create")
                return _FailingFile(real_open(file, mode, *args, **kwargs), self)
            return real_open(file, mode, *args, **kwargs)

        def fault_mkdir(path, *args, **kwargs):
            if self._under(path):
                self.path = os.fspath(path)
                self.tick("create")
            return real_mkdir(path, *args, **kwargs)

        self._patch = pytest.MonkeyPatch()
        self._patch.setattr(builtins, "open", fault_open)
        self._patch.setattr(io, "open", fault_open)
        self._patch.setattr(os, "mkdir", fault_mkdir)
        return self

    def __exit__(self, *exc):
        self._patch.undo()


def fault_commands(work, trained):
    """``{name: (command, argv given the output's path)}``: a folder builder, two
    single-file outputs of span-preprocess, span-convert and span-predict, each on real
    inputs."""
    from test_convert import UNCASED, make_hf_folder

    src = work / "fault_inputs"
    src.mkdir()
    for split, rows in (("train", table_rows("MRPC", 0, 12)), ("valid", table_rows("MRPC", 1, 6))):
        (src / f"{split}.tsv").write_bytes(write_table("tsv", rows))
    make_hf_folder(src / "hf", UNCASED, head="pretraining")
    with gzip.open(DATA / "wikipedia" / "wiki.AA.txt.gz", "rt", encoding="utf-8") as f:
        (src / "wiki.txt").write_text("".join(next(f) for _ in range(200)), encoding="utf-8")
    mrpc = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines(True)[:41]
    (src / "mrpc.tsv").write_text("".join(mrpc), encoding="utf-8")
    return {
        "span-preprocess ngrams": ("span-preprocess", lambda out: [
            "ngrams", "--text", src / "wiki.txt", "--out", out, "--min-count", "2",
            "--workers", "1"]),
        "span-preprocess align-pairs": ("span-preprocess", lambda out: [
            "align-pairs", "--input", src / "mrpc.tsv", "--out", out]),
        "span-preprocess table": ("span-preprocess", lambda out: [
            "table", "--out", out, "--train", src / "train.tsv", "--valid", src / "valid.tsv",
            "--text-columns", "sentence1", "sentence2", "--label-column", "label", *ENC]),
        "span-convert bert": ("span-convert", lambda out: [
            "bert", "--hf-dir", src / "hf", "--out", out, "--force"]),
        "span-predict": ("span-predict", lambda out: [
            "--checkpoint", trained["checkpoint"], "--data", trained["data"], "--split", "valid",
            "--output", out]),
    }


def run_main(command, argv):
    """``run`` in this process; a KeyboardInterrupt the command let through (SIGINT
    injected) is its traceback."""
    try:
        return run(command, argv, cli=False)
    except KeyboardInterrupt:
        return 1, f"{TRACEBACK}\nKeyboardInterrupt"


def test_injected_io_faults_leave_no_partial_output(work, trained):
    """ENOSPC at a write, EROFS and EACCES at a creation, SIGINT at a write, into a new
    output or over an earlier one: one line naming the path and the cause (exit 2, 130
    for SIGINT), the earlier output as it was, nothing half-written left."""
    rng = random.Random("faults")
    failures = []
    for name, (command, argv) in fault_commands(work, trained).items():
        root = work / "faults" / name.replace(" ", "_")
        root.mkdir(parents=True)
        out = root / {"span-predict": "out.tsv", "span-preprocess ngrams": "out.txt.gz",
                      "span-preprocess align-pairs": "out.jsonl"}.get(name, "out")
        with Fault(root) as counted:  # a clean run: how many writes and creations
            code, output = run_main(command, argv(out))
        assert code == 0, output
        earlier = tree(out)
        for kind in FAULTS:
            over = rng.random() < 0.5  # over the earlier output, or into a new one
            if not over:
                shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink()
            at = rng.randint(1, counted.counts[FAULTS[kind][1]])
            with Fault(root, kind, at):
                code, output = run_main(command, argv(out))
            cause = "interrupted" if kind == "SIGINT" else \
                rf"{os.strerror(FAULTS[kind][0])}: '{re.escape(str(root))}"
            problem = verdict(code, output, 130 if kind == "SIGINT" else 2, cause)
            if problem is None and tree(out) != (earlier if over else {}):
                problem = "earlier output changed" if over else "partial output"
            if problem is None and leftovers(root):
                problem = f"left behind: {leftovers(root)}"
            failures.append(record_class("injected I/O faults", f"{name}: {kind} at "
                                         f"{FAULTS[kind][1]} {at}{', over' if over else ''}",
                                         code, output, problem))
            if not over:  # the next case starts from the earlier output again
                restore(out, earlier)
    fail_on([f for f in failures if f])


def test_sigint_and_sigterm_mid_build_leave_the_earlier_folder(work):
    """Real signals to the console script while it writes (a build of 20,000 real SST-2
    rows: seconds of encoding, so the signal lands mid-build on a fast machine too):
    exit 130 / 2, one line, no traceback, the earlier folder whole, no partial."""
    import signal

    root = work / "signals"
    root.mkdir()
    lines = (GLUE / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()[:20001]
    (root / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = root / "out"
    argv = ["table", "--out", out, "--train", root / "train.tsv", "--text-columns", "sentence",
            "--label-column", "label", *ENC]
    small = root / "small.tsv"
    small.write_text("\n".join(lines[:9]) + "\n", encoding="utf-8")
    code, output = run_main("span-preprocess", [a if a != root / "train.tsv" else small
                                                for a in argv])
    assert code == 0, output
    earlier = tree(out)
    failures = []
    for sig, expected in ((signal.SIGINT, 130), (signal.SIGTERM, 2)):
        # A test worker of pytest-xdist ignores SIGINT, and a child inherits an ignored
        # signal (Python then keeps it ignored, as a command started with nohup does):
        # the command is started as from a shell, SIGINT at its default.
        proc = subprocess.Popen([str(BIN / "span-preprocess"), *map(str, argv)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 120
        while not list(root.glob("out.partial-*")) and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)  # reading and encoding 20,000 rows takes seconds
        proc.send_signal(sig)
        output = proc.communicate(timeout=120)[0]
        problem = verdict(proc.returncode, output, expected,
                          "interrupted" if sig == signal.SIGINT else "stopped")
        if problem is None and tree(out) != earlier:
            problem = "earlier output changed"
        if problem is None and leftovers(root):
            problem = f"left behind: {leftovers(root)}"
        failures.append(record_class("signals", f"span-preprocess table: {sig.name} mid-build",
                                     proc.returncode, output, problem))
    fail_on([f for f in failures if f])


# Label variants: each row's label written another way; those that show the same
# after NFC and stripping white space are one class (counted), those holding a
# character that shows nothing are refused naming the line.
LABEL_NAMES = {"0": "caf\u00e9", "1": "th\u00e9"}
SAME = {"NFD": lambda s: unicodedata.normalize("NFD", s), "trailing space": lambda s: s + " ",
        "leading no-break space": lambda s: "\u00a0" + s, "NFD and an ideographic space":
        lambda s: unicodedata.normalize("NFD", s) + "\u3000"}
HIDDEN = {"zero-width space": "\u200b", "left-to-right mark": "\u200e", "BOM": "\ufeff",
          "word joiner": "\u2060", "a control": "\x07"}


def test_unicode_labels_are_one_class_or_refused(work):
    rng = random.Random("unicode labels")
    root = work / "labels"
    root.mkdir()
    rows = table_rows("MRPC", 0, 16)
    failures = []
    for i, kind in enumerate(schedule(rng, list(SAME) + list(HIDDEN), 14)):
        written = [LABEL_NAMES[y] for y, _, _ in rows]
        changed = rng.sample(range(len(rows)), 3)
        for k in changed:
            written[k] = (SAME[kind](written[k]) if kind in SAME else
                          written[k][:2] + HIDDEN[kind] + written[k][2:])
        path = root / f"train{i}.tsv"
        path.write_bytes("".join(f"{y}\t{a}\t{b}\n" for y, a, b in [
            TABLE_COLUMNS, *[(w, a, b) for w, (_, a, b) in zip(written, rows)]]).encode())
        out = root / f"out{i}"
        code, output = run_main("span-preprocess", [
            "table", "--out", out, "--train", path, "--text-columns", "sentence1", "sentence2",
            "--label-column", "label", *ENC])
        if kind in HIDDEN:
            line = min(changed) + 2
            problem = verdict(code, output, 2, rf"{re.escape(str(path))}:{line}: label .* holds "
                              rf"U\+{ord(HIDDEN[kind]):04X}")
            if problem is None and out.exists():
                problem = "partial output"
        else:
            problem = verdict(code, output, 0, "")
            if problem is None:
                record = read_record(out)
                items = (out / "raw" / "train.label").read_text(encoding="utf-8").split("\n")[:-1]
                merged = sum(m["rows"] for m in record["labels"].get("merged_variants", []))
                if sorted(record["labels"]["names"]) != sorted(set(LABEL_NAMES.values())) or \
                        items != [LABEL_NAMES[y] for y, _, _ in rows]:
                    problem = "silent: labels split or changed"
                elif merged != len(changed):
                    problem = f"silent: {merged} merged labels counted, {len(changed)} written"
        failures.append(record_class("Unicode labels", f"{kind} x3", code, output, problem))
    fail_on([f for f in failures if f])


# Flags: (command, argv before the flag, flag, the values it takes)
FLAG_RANGES = [
    ("span-preprocess", ["table", "--out", "o", "--train", "t", "--text-columns", "s",
                         "--label-column", "l"], "--ngrams-top-k", "count"),
    ("span-preprocess", ["table", "--out", "o", "--train", "t", "--text-columns", "s",
                         "--label-column", "l"], "--workers", "positive"),
    ("span-preprocess", ["table", "--out", "o", "--train", "t", "--text-columns", "s",
                         "--label-column", "l"], "--delimiter", "character"),
    ("span-preprocess", ["qa", "--out", "o", "--train", "t"], "--doc-stride", "stride"),
    ("span-preprocess", ["qa", "--out", "o", "--train", "t"], "--max-positions", "positions"),
    ("span-preprocess", ["conll", "--out", "o", "--train", "t"], "--max-tokens", "positive"),
    ("span-predict", ["--checkpoint", "c.pt", "--input", "i"], "--batch-size", "positive"),
    ("span-predict", ["--checkpoint", "c.pt", "--input", "i"], "--n-best", "positive"),
    ("span-predict", ["--checkpoint", "c.pt", "--input", "i"], "--null-threshold", "threshold"),
    ("span-predict", ["--checkpoint", "c.pt", "--input", "i"], "--ngrams-top-k", "count"),
]
FLAG_VALUES = ["-1", "0", "1", "3", "130", "500", "-0.5", "2.5", "nan", "inf", "abc", "",
               "ab", ",", "\\t", "tune", "1e3", str(2 ** 70)]


def flag_takes(kind, value):
    """Whether a flag of ``kind`` must take ``value`` (qa: with the other at its default)."""
    def whole(v):
        try:
            return int(v)
        except ValueError:
            return None

    n = whole(value)
    if kind == "count":
        return n is not None and n >= 0
    if kind == "positive":
        return n is not None and n >= 1
    if kind == "character":
        return len(value) == 1 or value == "\\t"
    if kind == "stride":  # --max-positions 384
        return n is not None and 1 <= n <= 378
    if kind == "positions":  # --doc-stride 128
        return n is not None and n >= 134
    if kind == "threshold":
        return value == "tune" or (value not in ("", "abc", "ab", ",", "\\t") and
                                   math.isfinite(float(value)))
    raise ValueError(kind)


def test_flag_values_are_taken_or_refused_at_parse_time():
    rng = random.Random("flags")
    failures = []
    from span_plugin.cli.predict import build_parser as predict_parser
    from span_plugin.cli.preprocess import build_parser as preprocess_parser

    parsers = {"span-preprocess": preprocess_parser, "span-predict": predict_parser}
    for command, argv, flag, kind in FLAG_RANGES:
        for value in rng.sample(FLAG_VALUES, 6):
            output = ""
            if flag_takes(kind, value):  # it parses (nothing is run)
                try:
                    parsers[command]().parse_args([*argv, f"{flag}={value}"])
                    code, problem = 0, None
                except SystemExit as stop:
                    code, problem = stop.code, "refused a value in range"
            else:
                code, output = run_main(command, [*argv, f"{flag}={value}"])
                problem = verdict(code, output, 2, rf"argument {flag}: ")
                if problem == "silent" or code not in (0, 2):
                    problem = problem or f"exit {code}"
            failures.append(record_class("flags", f"{command} {flag}={value!r}", code, output,
                                         problem))
    fail_on([f for f in failures if f])


# Hugging Face folders: a real tiny BERT (transformers) with one file changed
HF_MUTATIONS = {
    "tokenizer.json of a BPE model": ("tokenizer.json", lambda f: json.dumps(
        {"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}), r"tokenizer\.json: a BPE"),
    "tokenizer.json of a Unigram model": ("tokenizer.json", lambda f: json.dumps(
        {"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}), r"tokenizer\.json: a Unigram"),
    "unknown token not in vocab.txt": ("tokenizer.json", lambda f: json.dumps(
        {"model": {"type": "WordPiece", "unk_token": "<unk>"}}), r"unknown token '<unk>'"),
    "tokenizer.json not JSON": ("tokenizer.json", lambda f: "{\"model\": ",
                                r"tokenizer\.json: not a valid tokenizer\.json"),
    "vocab.txt empty": ("vocab.txt", lambda f: "", r"vocab\.txt has 0 tokens"),
    "vocab.txt a token twice": ("vocab.txt", lambda f: f.replace("cat\n", "dog\n"),
                                r"vocab\.txt: token 'dog' appears twice"),
    "config.json cut": ("config.json", lambda f: f[:len(f) // 2],
                        r"config\.json: not valid JSON"),
    "config.json a list": ("config.json", lambda f: "[]", r"config\.json: expected a JSON object"),
    "weights cut": ("model.safetensors", None, r"model\.safetensors"),
    "weights empty": ("model.safetensors", b"", r"model\.safetensors"),
}


def test_hugging_face_folders_are_checked_before_writing(work):
    from test_convert import UNCASED, make_hf_folder

    root = work / "hf_folders"
    good = root / "good"
    make_hf_folder(good, UNCASED, head="pretraining")
    failures = []
    for i, (name, (file, change, cause)) in enumerate(sorted(HF_MUTATIONS.items())):
        hf = root / f"hf{i}"
        shutil.copytree(good, hf)
        path = hf / file
        if change is None:
            path.write_bytes(path.read_bytes()[:path.stat().st_size // 3])
        elif isinstance(change, bytes):
            path.write_bytes(change)
        else:
            text = path.read_text(encoding="utf-8") if path.exists() else ""
            path.write_text(change(text), encoding="utf-8")
        out = root / f"out{i}"
        code, output = run_main("span-convert", ["bert", "--hf-dir", hf, "--out", out])
        problem = verdict(code, output, 2, cause)
        if problem is None and out.exists():
            problem = "partial output"
        failures.append(record_class("Hugging Face folders", name, code, output, problem))
    fail_on([f for f in failures if f])
