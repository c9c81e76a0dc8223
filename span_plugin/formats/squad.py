"""Extractive question answering files: SQuAD v1.1 / v2.0 JSON and MRQA JSON Lines, read
into :class:`QAExample` (:func:`read_qa`), and SQuAD files split by article
(:func:`split_squad_articles`) or sampled by question or article (:func:`sample_squad`).
How each format is told apart and read, and what is an error or a note: docs/QA.md,
section "Module notes"."""

import gzip
import hashlib
import json
import os
import random
import zlib
from dataclasses import dataclass, field

from span_plugin.files.atomic import atomic_write
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import (BOM, MAX_JSON_BYTES, MAX_LINE, TOO_DEEP, bounded_lines,
                                       open_bytes)
from span_plugin.formats.unicode_text import is_blank

ON_BAD = ("error", "skip")


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list  # [(text, char_start)]: text == context[char_start:char_start + len(text)]
    impossible: bool  # SQuAD v2.0 is_impossible (then answers == []); False otherwise
    where: str  # "FILE: article 3 (title), paragraph 2, question 5" / "FILE:LINE, question 2"
    title: str = ""  # article title (SQuAD) or "" (MRQA)
    accepted: list = field(default_factory=list)  # MRQA "answers" (scored against); SQuAD: []
    labelled: bool = True  # False: read without gold (require_answers=False), nothing to score
    unplaced: list = field(default_factory=list)  # [(text, start or None)]: gold answers
    # whose offsets place nothing: scored against (the official scripts read only texts),
    # never trained on


NOTE_KINDS = ("duplicate id", "unplaced answer", "mrqa text", "is_impossible")


@dataclass
class QANote:
    """Something a reader reports about a question without refusing it."""

    kind: str  # one of NOTE_KINDS
    where: str
    id: str  # the question id (None when it has none)
    message: str


@dataclass
class QASplit:
    examples: list  # QAExample in file order; the questions of one context are consecutive
    dropped: list  # [(where, id, reason)]: questions left out under on_bad="skip"
    version: str  # "1.1", "2.0" or "mrqa"
    notes: list = field(default_factory=list)  # QANote, in file order

    def note_counts(self):
        """``{kind: number of notes}`` of every kind in :data:`NOTE_KINDS`."""
        return {kind: sum(n.kind == kind for n in self.notes) for kind in NOTE_KINDS}


class _Bad(Exception):
    """A problem of one question; the message says what was expected."""


# ---------------------------------------------------------------- bytes and JSON


# What reading a broken gzip stream raises: BadGzipFile (an OSError: bad header, CRC),
# EOFError (cut short) and zlib.error (a damaged deflate stream, e.g. one flipped byte).
GZIP_ERRORS = (OSError, EOFError, zlib.error)


def _open(path):
    """``path`` opened for reading bytes, through gzip when it starts with gzip's magic."""
    f = open_bytes(path)
    if f.read(2) == b"\x1f\x8b":
        f.seek(0)
        return gzip.GzipFile(fileobj=f, mode="rb")
    f.seek(0)
    return f


def _lines(path):
    """(line number, bytes) of each line, BOM dropped; a broken gzip stream an error."""
    with _open(path) as f:
        lineno = 0
        try:
            for lineno, raw in enumerate(bounded_lines(f, path), 1):
                yield lineno, raw[len(BOM):] if lineno == 1 and raw.startswith(BOM) else raw
        except GZIP_ERRORS as err:
            raise BadInputError(f"{path}:{lineno + 1}: not a readable gzip file "
                                f"({err})") from None


def _read_bytes(path, first_line=False):
    """The file's bytes (only its first line with ``first_line``, no more than
    :data:`MAX_LINE` of it: enough to tell MRQA from SQuAD), BOM dropped. A file of
    more than :data:`MAX_JSON_BYTES` is refused before it fills the memory."""
    with _open(path) as f:
        try:
            data = f.readline(MAX_LINE + 1) if first_line else f.read(MAX_JSON_BYTES + 1)
        except GZIP_ERRORS as err:
            raise BadInputError(f"{path}: not a readable gzip file ({err})") from None
    if not first_line and len(data) > MAX_JSON_BYTES:
        raise BadInputError(f"{path}: more than {MAX_JSON_BYTES:,} bytes of JSON (after "
                            f"gzip): not a SQuAD file, which is read whole (MRQA files, "
                            f".jsonl, are read a line at a time)")
    return data[len(BOM):] if data.startswith(BOM) else data


def _decode(path, data, lineno=None):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        if lineno is None:
            lineno = data.count(b"\n", 0, err.start) + 1
            at = f"byte {err.start} of the file"
        else:
            at = f"byte {err.start} of the line"
        raise BadInputError(f"{path}:{lineno}: invalid UTF-8 at {at} ({err.reason}); "
                            f"expected UTF-8 text") from None


def _is_mrqa(path):
    name = os.fspath(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith((".jsonl", ".ndjson")):
        return True
    first = _read_bytes(path, first_line=True).strip()
    if not first.startswith(b"{"):
        return False
    try:
        obj = json.loads(first.decode("utf-8"))
    except (ValueError, RecursionError):  # read again, as SQuAD JSON, to say why
        return False
    return isinstance(obj, dict) and ("header" in obj or "qas" in obj)


# ---------------------------------------------------------------- checks


def _get(obj, key, kind, what):
    """``obj[key]``, checked to be of type ``kind`` (str, int, list or dict)."""
    if not isinstance(obj, dict):
        raise _Bad(f"{what} is a JSON {type(obj).__name__}, expected an object")
    if key not in obj:
        raise _Bad(f"{what} has no {key!r} (keys: {sorted(obj)})")
    v = obj[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind is int:
        names = {str: "a string", int: "an integer", list: "a list", dict: "an object"}
        raise _Bad(f"{what} {key!r} is {json.dumps(v)[:60]}, expected {names[kind]}")
    if kind is str and "\0" in v:  # a binary blob in a JSON string; answers of NULs else
        raise _Bad(f"{what} {key!r} holds a NUL character (U+0000) at character "
                   f"{v.index(chr(0))}, which is not text: expected text")
    return v


def _occurrences(context, text, limit=3):
    found, i = [], context.find(text)
    while i >= 0 and len(found) < limit:
        found.append(i)
        i = context.find(text, i + 1)
    return found


def _check_answer(context, text, start, end, label):
    """Check that ``context[start:end] == text`` (end exclusive)."""
    if text == "":
        raise _Bad(f"{label} has an empty text, expected the answer's words")
    if start < 0 or end > len(context) or end <= start:
        raise _Bad(f"{label} {text!r} at [{start}, {end}) lies outside the context "
                   f"(length {len(context)})")
    if context[start:end] != text:
        seen = _occurrences(context, text)
        hint = (f"; the text occurs at offsets {seen}" if seen else
                "; the text does not occur in the context")
        raise _Bad(f"{label} text {text!r} at offset {start} does not match the context, "
                   f"which reads {context[start:end]!r} there{hint}")


def _question(qa):
    question = _get(qa, "question", str, "the question")
    if is_blank(question):  # white space, zero-width and other invisible characters only
        raise _Bad("empty question, expected the question's text")
    return question


@dataclass
class _Gold:
    """What one question's gold says: ``placed`` [(text, start)] answers at their
    offsets, ``unplaced`` [(text, start or None, why)] answers whose position places
    nothing, ``impossible``, MRQA's ``accepted`` texts, and ``notes`` [(kind, message)]
    that are not problems of the position (MRQA text disagreements, is_impossible)."""

    placed: list = field(default_factory=list)
    unplaced: list = field(default_factory=list)
    impossible: bool = False
    accepted: list = field(default_factory=list)
    notes: list = field(default_factory=list)


class _Reading:
    """How one file is read: ``on_bad``, ``require_answers`` and ``official`` (see
    :func:`read_qa`); collects the examples, dropped questions and notes."""

    def __init__(self, on_bad, require_answers, official):
        self.on_bad, self.require_answers, self.official = on_bad, require_answers, official
        self.examples, self.dropped, self.notes, self.first_seen = [], [], [], {}

    def note(self, kind, where, qid, message):
        self.notes.append(QANote(kind, where, qid, message))

    def bad(self, where, qid, reason):
        if self.on_bad == "skip":
            self.dropped.append((where, qid, reason))
            return
        named = "" if qid is None else f"question {qid!r}: "
        raise BadInputError(f"{where}: {named}{reason}")

    def question(self, here, qa, id_key, context, passage, gold_of, title="",
                 unlabelled=lambda qa: False):
        """Read one question of ``context`` (either format). gold_of(qa, context) ->
        :class:`_Gold`; unlabelled(qa): True when the question is read without gold."""
        qid = qa.get(id_key) if isinstance(qa, dict) else None
        if isinstance(qid, str):
            if qid in self.first_seen:  # the official scripts score each occurrence by id
                self.note("duplicate id", here, qid, f"question id {qid!r} is used again "
                          f"(first at {self.first_seen[qid]})")
            else:
                self.first_seen[qid] = here
        try:
            qid = _get(qa, id_key, str, "the question")
            if is_blank(context):
                raise _Bad(f"empty context, expected the {passage}'s text")
            question = _question(qa)
            if unlabelled(qa):
                self.examples.append(QAExample(qid, question, context, [], False, here,
                                               title, labelled=False))
                return
            gold = gold_of(qa, context)
            if gold.unplaced and not self.official:
                if self.on_bad != "skip":
                    raise _Bad(gold.unplaced[0][2])
                if not gold.placed and not gold.impossible:
                    raise _Bad(f"no answer can be placed ({gold.unplaced[0][2]})")
            if not (gold.impossible or gold.placed or gold.unplaced or gold.accepted):
                raise _Bad("an answerable question with no answer, expected at least one")
        except _Bad as bad:
            self.bad(here, qid, str(bad))
            return
        for kind, message in gold.notes:  # notes of the questions kept only
            self.note(kind, here, qid, message)
        for _, _, why in gold.unplaced:
            self.note("unplaced answer", here, qid, why + (
                "; scored by its text, as the official evaluation reads it"
                if self.official else "; left out of training, kept for scoring"))
        self.examples.append(QAExample(
            qid, question, context, gold.placed, gold.impossible, here, title,
            gold.accepted, unplaced=[(text, start) for text, start, _ in gold.unplaced]))


# ---------------------------------------------------------------- SQuAD JSON


def _squad_answer(ans, j, context):
    """``(text, start, None)`` of a placed answer or ``(text, start or None, why)``;
    a problem of the text itself (what the official scripts read) raises."""
    label = f"answer {j}"
    text = _get(ans, "text", str, label)
    try:
        start = None
        start = _get(ans, "answer_start", int, label)
        _check_answer(context, text, start, start + len(text), label)
    except _Bad as bad:
        return text, start, str(bad)
    return text, start, None


def _squad_gold(qa, context, v2, official):
    answers = _get(qa, "answers", list, "the question")
    gold = _Gold()
    for j, ans in enumerate(answers, 1):
        text, start, why = _squad_answer(ans, j, context)
        if why is not None:
            gold.unplaced.append((text, start, why))
        elif (text, start) not in gold.placed:
            gold.placed.append((text, start))
    if not v2:
        if not answers:
            raise _Bad("an answerable question with no answer, expected at least one")
        return gold
    imp = qa.get("is_impossible", not answers)
    if official:  # the v2.0 script reads a question as answerable when it has answers
        gold.impossible = not answers
        if imp is not gold.impossible:
            gold.notes.append(("is_impossible", f"'is_impossible' is {json.dumps(imp)[:40]} "
                               f"but the question has {len(answers)} answers; read as "
                               f"{'impossible' if not answers else 'answerable'}, as the "
                               f"official v2.0 evaluation reads it (from 'answers' only)"))
        return gold
    if not isinstance(imp, bool):
        raise _Bad(f"'is_impossible' is {json.dumps(imp)[:40]}, expected true or false")
    if imp and answers:
        raise _Bad(f"an impossible question (is_impossible true) with {len(answers)} answers, "
                   f"expected none (plausible answers belong in 'plausible_answers')")
    if not imp and not answers:
        raise _Bad("an answerable question with no answer, expected at least one "
                   "(or is_impossible true)")
    gold.impossible = imp
    return gold


def _load_squad(path, data):
    text = _decode(path, data)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise BadInputError(f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg}); "
                            f"expected one SQuAD JSON object") from None
    except RecursionError:
        raise BadInputError(f"{path}: {TOO_DEEP}; expected one SQuAD JSON object") from None
    try:
        articles = _get(obj, "data", list, "the file")
    except _Bad as bad:
        raise BadInputError(f"{path}: {bad}; expected SQuAD JSON "
                            f"{{\"version\", \"data\": [articles]}}") from None
    return obj, articles


def _squad_paragraphs(path, articles):
    """(where-prefix, title, context, qas) per paragraph; structure errors raised."""
    for i, article in enumerate(articles, 1):
        try:
            paragraphs = _get(article, "paragraphs", list, "the article")
            title = article.get("title", "")
            if not isinstance(title, str):
                title = json.dumps(title)
            for j, par in enumerate(paragraphs, 1):
                where = f"{path}: article {i} ({title}), paragraph {j}"
                try:
                    context = _get(par, "context", str, "the paragraph")
                    qas = _get(par, "qas", list, "the paragraph")
                except _Bad as bad:
                    raise BadInputError(f"{where}: {bad}") from None
                yield where, title, context, qas
        except _Bad as bad:
            raise BadInputError(f"{path}: article {i}: {bad}") from None


def _read_squad(path, reading):
    obj, articles = _load_squad(path, _read_bytes(path))
    version = str(obj.get("version", "1.1"))
    paragraphs = list(_squad_paragraphs(path, articles))
    v2 = version.lstrip("v") == "2.0" or any(
        isinstance(qa, dict) and "is_impossible" in qa for *_, qas in paragraphs for qa in qas)

    def unlabelled(qa):  # v2.0: an empty list is an impossible question, not a missing gold
        return not reading.require_answers and (
            "answers" not in qa or qa["answers"] == [] and not v2)

    def gold_of(qa, context):
        return _squad_gold(qa, context, v2, reading.official)

    for where, title, context, qas in paragraphs:
        for k, qa in enumerate(qas, 1):
            reading.question(f"{where}, question {k}", qa, "id", context, "paragraph",
                             gold_of, title, unlabelled)
    return "2.0" if v2 else "1.1"


# ---------------------------------------------------------------- MRQA JSON Lines


def _int_pair(span):
    return (isinstance(span, list) and len(span) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in span))


def _mrqa_spans(det, label, tokens):
    """The inclusive ``[start, end]`` character spans of a detected answer:
    ``char_spans``, else its ``token_spans`` through the line's ``context_tokens``
    (``[token, char offset]`` each). A malformed span raises."""
    if "char_spans" in det or "token_spans" not in det:
        spans = _get(det, "char_spans", list, label)
        for span in spans:
            if not _int_pair(span):
                raise _Bad(f"{label} char_span {json.dumps(span)[:40]}: expected "
                           f"[start, end] (end inclusive)")
        return [tuple(span) for span in spans]
    out = []
    for span in _get(det, "token_spans", list, label):
        ok = _int_pair(span) and isinstance(tokens, list) and 0 <= span[0] <= span[1] < len(tokens)
        first, last = (tokens[span[0]], tokens[span[1]]) if ok else (None, None)
        if not (ok and all(isinstance(t, list) and len(t) == 2 and isinstance(t[0], str)
                           and isinstance(t[1], int) for t in (first, last))):
            raise _Bad(f"{label} token_span {json.dumps(span)[:40]}: expected [first, last] "
                       f"token indices of the line's context_tokens ([token, offset] each)")
        out.append((first[1], last[1] + len(last[0]) - 1))
    return out


def _mrqa_gold(qa, context, tokens=None):
    accepted = _get(qa, "answers", list, "the question")
    for a in accepted:
        if not isinstance(a, str):
            raise _Bad(f"'answers' holds {json.dumps(a)[:40]}, expected answer texts")
    detected = _get(qa, "detected_answers", list, "the question")
    gold = _Gold(accepted=list(accepted))
    for j, det in enumerate(detected, 1):
        label = f"detected answer {j}"
        text = _get(det, "text", str, label)
        for start, end in _mrqa_spans(det, label, tokens):
            where = f"{label} (char_span [{start}, {end}], end inclusive)"
            if start < 0 or end >= len(context) or end < start:
                gold.unplaced.append((text, start, f"{where} {text!r} lies outside the "
                                      f"context (length {len(context)})"))
                continue
            read = context[start:end + 1]  # the format places the answer by its span
            if read != text:
                gold.notes.append(("mrqa text", f"{where}: text {text!r} differs from what "
                                   f"the span reads, {read!r}; the span is the answer"))
            if (read, start) not in gold.placed:
                gold.placed.append((read, start))
    imp = qa.get("is_impossible", False)
    if not isinstance(imp, bool):
        raise _Bad(f"'is_impossible' is {json.dumps(imp)[:40]}, expected true or false")
    if imp and (gold.placed or gold.unplaced):
        raise _Bad(f"an impossible question (is_impossible true) with "
                   f"{len(gold.placed) + len(gold.unplaced)} detected answers, expected none")
    if not imp and not (gold.placed or gold.unplaced):
        raise _Bad("an answerable question with no detected answer, expected at least "
                   "one char_span")
    gold.impossible = imp
    return gold


def _read_mrqa(path, reading):
    header = False
    for lineno, raw in _lines(path):
        if not raw.strip():
            continue  # blank lines (the final newline, CRLF ends) carry nothing
        text = _decode(path, raw, lineno)
        try:
            obj = json.loads(text)
        except ValueError as err:
            raise BadInputError(f"{path}:{lineno}: not valid JSON ({err}); expected one "
                                f"MRQA object per line") from None
        except RecursionError:
            raise BadInputError(f"{path}:{lineno}: {TOO_DEEP}; expected one MRQA object "
                                f"per line") from None
        if not header:
            if not (isinstance(obj, dict) and isinstance(obj.get("header"), dict)):
                raise BadInputError(f"{path}:{lineno}: expected the MRQA header line "
                                    f"{{\"header\": {{\"dataset\": ..., \"split\": ...}}}}")
            header = True
            continue
        try:
            context = _get(obj, "context", str, "the line")
            qas = _get(obj, "qas", list, "the line")
        except _Bad as bad:
            raise BadInputError(f"{path}:{lineno}: {bad}; expected an MRQA context "
                                f"object") from None
        tokens = obj.get("context_tokens")
        for k, qa in enumerate(qas, 1):
            reading.question(f"{path}:{lineno}, question {k}", qa, "qid", context, "passage",
                             lambda q, c: _mrqa_gold(q, c, tokens), unlabelled=lambda qa: not (
                                 reading.require_answers or "detected_answers" in qa))
    if not header:
        raise BadInputError(f"{path}: empty, expected the MRQA header line and contexts")
    return "mrqa"


# ---------------------------------------------------------------- the reader


def read_qa(path, on_bad="error", require_answers=True, official=False):
    """The :class:`QASplit` of a SQuAD JSON or MRQA JSON Lines file (``.gz`` too).

    on_bad: "error" (a bad question or an answer its offsets do not place raises) or
    "skip" (the question is left out, the answer is left out of ``answers`` and kept in
    ``unplaced``; each listed). require_answers=False reads questions without gold
    (files to predict). official=True reads the gold as the official evaluation
    scripts read it (files to predict and score): answer offsets are never an error
    (an answer they do not place is noted and kept in ``unplaced``), and a v2.0
    question is answerable when it has answers. Reused ids are noted, never an error.
    """
    if on_bad not in ON_BAD:
        raise ValueError(f"on_bad={on_bad!r}: expected one of {ON_BAD}")
    path = os.fspath(path)
    reading = _Reading(on_bad, require_answers, official)
    read = _read_mrqa if _is_mrqa(path) else _read_squad
    version = read(path, reading)
    return QASplit(reading.examples, reading.dropped, version, reading.notes)


def split_squad_articles(path, first, out_first, out_rest):
    """Write the first ``first`` articles of a SQuAD JSON file to ``out_first`` and the
    rest to ``out_rest`` (every other key, such as ``version``, kept; each written
    atomically). The structure is checked as :func:`read_qa` reads it. Returns the number of
    questions in each part."""
    path = os.fspath(path)
    ins = {os.path.abspath(path)}
    outs = [os.path.abspath(os.fspath(p)) for p in (out_first, out_rest)]
    if outs[0] == outs[1] or ins & set(outs):
        raise ValueError(f"split {path} into {out_first} and {out_rest}: expected two "
                         f"outputs that differ from each other and from the input")
    if not isinstance(first, int) or first < 1:
        raise ValueError(f"first={first!r}: expected a positive number of articles")
    if _is_mrqa(path):
        raise BadInputError(f"{path}: an MRQA JSON Lines file, expected SQuAD JSON")
    obj, articles = _load_squad(path, _read_bytes(path))
    if len(articles) <= first:
        raise BadInputError(f"{path}: {len(articles)} articles, expected more than "
                            f"{first} to split off the first {first}")
    read_qa(path, on_bad="skip")  # the structure checked before anything is written
    counts = []
    for out, part in ((out_first, articles[:first]), (out_rest, articles[first:])):
        piece = dict(obj, data=part)
        blob = json.dumps(piece, ensure_ascii=False).encode("utf-8")
        atomic_write(out, lambda f, blob=blob: f.write(blob))
        counts.append(sum(len(p["qas"]) for a in part for p in a["paragraphs"]))
    return tuple(counts)


SAMPLE_UNITS = ("questions", "articles")
SAMPLE_KEY = "span_plugin_sample"  # what a sample file says it holds (read by no scorer)


def sample_squad(path, out, size, unit="questions", seed=1):
    """Write to ``out`` ``size`` questions or articles (``unit``) of the SQuAD JSON file
    ``path``, drawn without replacement by ``random.Random(seed)`` and kept in the
    file's order, with their articles and paragraphs (a paragraph or article left without
    a question is left out; every other key kept). A ``size`` at least the file's count
    takes it all. The written file says what it holds under :data:`SAMPLE_KEY` (source
    path and sha256, unit, size asked, questions and articles taken and of how many,
    seed), which the official scripts and :func:`read_qa` do not read. Written
    atomically; returns that record."""
    path = os.fspath(path)
    if os.path.abspath(os.fspath(out)) == os.path.abspath(path):
        raise ValueError(f"sample {path} into {out}: the output must differ from the input")
    if unit not in SAMPLE_UNITS:
        raise ValueError(f"unit {unit!r}: expected one of {SAMPLE_UNITS}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"size={size!r}: expected a positive number of {unit}")
    if _is_mrqa(path):
        raise BadInputError(f"{path}: an MRQA JSON Lines file; sampling reads SQuAD JSON")
    data = _read_bytes(path)
    obj, articles = _load_squad(path, data)
    read_qa(path, on_bad="skip")  # the structure checked before anything is written
    # every question as (article, paragraph, question) positions, in file order
    places = [(i, j, k) for i, a in enumerate(articles)
              for j, p in enumerate(a["paragraphs"]) for k in range(len(p["qas"]))]
    rng = random.Random(seed)
    if unit == "articles":
        keep = set(rng.sample(range(len(articles)), min(size, len(articles))))
        chosen = {q for q in places if q[0] in keep}
    else:
        chosen = set(rng.sample(places, min(size, len(places))))
    taken = []
    for i, article in enumerate(articles):
        paragraphs = []
        for j, par in enumerate(article["paragraphs"]):
            qas = [qa for k, qa in enumerate(par["qas"]) if (i, j, k) in chosen]
            if qas:
                paragraphs.append(dict(par, qas=qas))
        if paragraphs:
            taken.append(dict(article, paragraphs=paragraphs))
    with open_bytes(path) as f:  # the file as it is (gzip, BOM and all)
        digest = hashlib.sha256(f.read()).hexdigest()
    record = {"source": os.path.abspath(path), "sha256": digest,
              "unit": unit, "size": size, "seed": seed,
              "questions": len(chosen), "of_questions": len(places),
              "articles": len(taken), "of_articles": len(articles)}
    blob = json.dumps(dict(obj, data=taken, **{SAMPLE_KEY: record}),
                      ensure_ascii=False).encode("utf-8")
    atomic_write(out, lambda f: f.write(blob))
    return record
