"""Extractive QA files (formats/squad.py): the real SQuAD v1.1 dev file, SQuAD v2.0 and
MRQA fixtures written from their published layouts, every bad input as an error naming
file and question id or, with on_bad="skip", a dropped question; splitting by article;
samples by question or article fixed by a seed."""

import copy
import dataclasses
import gzip
import hashlib
import json
import re

import pytest

from conftest import DATA

from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import BOM
from span_plugin.formats.squad import SAMPLE_KEY, read_qa, sample_squad, split_squad_articles
from span_plugin.formats.squad_metrics import squad_scores

DEV = DATA / "squad" / "dev-v1.1.json"

# ---------------------------------------------------------------- the real dev file


@pytest.fixture(scope="module")
def dev():
    return read_qa(DEV)


def test_dev_v11_counts_and_offsets(dev):
    raw = json.loads(DEV.read_text(encoding="utf-8"))
    assert dev.version == "1.1" and dev.dropped == []
    assert len(raw["data"]) == 48 and len(dev.examples) == 10570
    assert len({ex.id for ex in dev.examples}) == 10570
    # every answer as written in the file reads the same in its context (none shifted)
    n_written = 0
    for article in raw["data"]:
        for par in article["paragraphs"]:
            for qa in par["qas"]:
                for a in qa["answers"]:
                    n_written += 1
                    s = a["answer_start"]
                    assert par["context"][s:s + len(a["text"])] == a["text"], qa["id"]
    assert n_written == 34726
    kept = 0
    for ex in dev.examples:
        assert not ex.impossible and ex.answers and ex.title
        assert len(set(ex.answers)) == len(ex.answers)  # identical answers kept once
        for text, start in ex.answers:
            assert ex.context[start:start + len(text)] == text
        kept += len(ex.answers)
    assert kept < n_written  # most questions repeat an answer of the same text and start
    first = dev.examples[0]
    assert first.answers == [("Denver Broncos", 177)]
    assert first.where.endswith("article 1 (Super_Bowl_50), paragraph 1, question 1")


def test_dev_v11_split_38_10(dev, tmp_path):
    a, b = tmp_path / "train.json", tmp_path / "eval.json"
    n_a, n_b = split_squad_articles(DEV, 38, a, b)
    assert n_a + n_b == 10570 and (n_a, n_b) == (8582, 1988)
    for path, n_articles, n in ((a, 38, n_a), (b, 10, n_b)):
        obj = json.loads(path.read_text(encoding="utf-8"))
        assert obj["version"] == "1.1" and len(obj["data"]) == n_articles
        part = read_qa(path)
        assert part.version == "1.1" and len(part.examples) == n
    ids = [ex.id for ex in read_qa(a).examples] + [ex.id for ex in read_qa(b).examples]
    assert ids == [ex.id for ex in dev.examples]
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(BadInputError, match="48 articles, expected more than 48"):
        split_squad_articles(DEV, 48, a, b)
    with pytest.raises(ValueError, match="differ"):
        split_squad_articles(DEV, 38, a, a)


def test_dev_v11_first_gold_scores_100(dev):
    preds = {ex.id: ex.answers[0][0] for ex in dev.examples}
    assert squad_scores(preds, dev.examples) == {
        "exact_match": 100.0, "f1": 100.0, "total": 10570, "missing": 0}


# ---------------------------------------------------------------- SQuAD v2.0

CONTEXT = "The Normans gave their name to Normandy, a region in France. Normandy is in France."


def squad_v2():
    """The v2.0 layout: is_impossible on every question, plausible_answers on the
    impossible ones."""
    c = CONTEXT
    return {"version": "v2.0", "data": [
        {"title": "Normans", "paragraphs": [
            {"context": c, "qas": [
                {"id": "q1", "question": "In what country is Normandy?",
                 "answers": [{"text": "France", "answer_start": c.index("France")},
                             {"text": "France", "answer_start": c.index("France")},
                             {"text": "France", "answer_start": c.rindex("France")}],
                 "is_impossible": False},
                {"id": "q2", "question": "Who gave their name to France?",
                 "answers": [], "is_impossible": True,
                 "plausible_answers": [{"text": "Normans", "answer_start": 4}]}]},
            {"context": "Rollo was a Viking leader.", "qas": [
                {"id": "q3", "question": "Who was Rollo?",
                 "answers": [{"text": "a Viking leader", "answer_start": 10}],
                 "is_impossible": False}]}]},
        {"title": "Tesla", "paragraphs": [
            {"context": "Tesla was born in Smiljan.", "qas": [
                {"id": "q4", "question": "When did Tesla die?", "answers": [],
                 "is_impossible": True,
                 "plausible_answers": [{"text": "Smiljan", "answer_start": 18}]}]}]}]}


def write_json(path, obj):
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def test_squad_v2(tmp_path):
    split = read_qa(write_json(tmp_path / "dev-v2.0.json", squad_v2()))
    assert split.version == "2.0" and split.dropped == []
    q1, q2, q3, q4 = split.examples
    assert [ex.id for ex in split.examples] == ["q1", "q2", "q3", "q4"]
    assert q1.answers == [("France", 53), ("France", 76)] and not q1.impossible
    assert q2.answers == [] and q2.impossible and q4.impossible
    assert q3.title == "Normans" and q4.title == "Tesla"
    assert q3.where.endswith("dev-v2.0.json: article 1 (Normans), paragraph 2, question 1")
    # an is_impossible key makes it v2.0 whatever the version says; gzip is read too
    obj = squad_v2()
    obj["version"] = "1.1"
    gz = tmp_path / "v2.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(obj).encode()))
    assert read_qa(gz).version == "2.0"
    # v1.1: no is_impossible anywhere
    obj = squad_v2()
    obj["data"] = obj["data"][:1]
    obj["data"][0]["paragraphs"][0]["qas"].pop(1)
    for par in obj["data"][0]["paragraphs"]:
        for qa in par["qas"]:
            del qa["is_impossible"]
    obj["version"] = "1.1"
    v1 = read_qa(write_json(tmp_path / "v1.json", obj))
    assert v1.version == "1.1" and len(v1.examples) == 2


def bad_case(name):
    """A v2.0 file with one problem in question q1 (or its paragraph)."""
    obj = squad_v2()
    par = obj["data"][0]["paragraphs"][0]
    qa = par["qas"][0]
    if name == "no question":
        del qa["question"]
    elif name == "no answers":
        del qa["answers"]
    elif name == "empty question":
        qa["question"] = "  "
    elif name == "empty context":
        par["context"] = ""
        qa["answers"] = []
        qa["is_impossible"] = True
    elif name == "answerable without answer":
        qa["answers"] = []
    elif name == "outside":
        qa["answers"][2]["answer_start"] = len(CONTEXT) - 3
    elif name == "negative":
        qa["answers"][0]["answer_start"] = -1
    elif name == "mismatch":
        qa["answers"][0]["answer_start"] += 1
    elif name == "impossible with answers":
        qa["is_impossible"] = True
    elif name == "start not int":
        qa["answers"][0]["answer_start"] = "53"
    return obj


EXPECT = {
    "no question": "has no 'question'",
    "no answers": "has no 'answers'",
    "empty question": "empty question",
    "empty context": "empty context",
    "answerable without answer": "answerable question with no answer",
    "outside": "lies outside the context",
    "negative": "lies outside the context",
    "mismatch": "answer 1 text 'France' at offset 54 does not match the context, which "
                "reads 'rance.' there; the text occurs at offsets [53, 76]",
    "impossible with answers": "impossible question (is_impossible true) with 3 answers",
    "start not int": "'answer_start' is \"53\", expected an integer",
}


# answers whose offsets do not place them: an error for training, or with on_bad="skip"
# the answer is left out of training (q1 keeps its other answers) and noted
UNPLACED = {"outside", "negative", "mismatch", "start not int"}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_squad_bad_question(tmp_path, name):
    path = write_json(tmp_path / "bad.json", bad_case(name))
    with pytest.raises(BadInputError) as err:
        read_qa(path)
    msg = str(err.value)
    assert str(path) in msg and "'q1'" in msg and EXPECT[name] in msg, msg
    assert "article 1 (Normans), paragraph 1, question 1" in msg
    skipped = read_qa(path, on_bad="skip")
    if name in UNPLACED:
        assert [ex.id for ex in skipped.examples] == ["q1", "q2", "q3", "q4"]
        assert skipped.dropped == []
        [note] = skipped.notes
        assert (note.kind, note.id) == ("unplaced answer", "q1") and EXPECT[name] in note.message
        assert note.where == msg.split(": question ")[0]
        q1 = skipped.examples[0]
        assert q1.answers and len(q1.unplaced) == 1 and q1.unplaced[0][0] == "France"
        return
    out = ["q1", "q2"] if name == "empty context" else ["q1"]  # every question of it
    assert [ex.id for ex in skipped.examples] == [q for q in ("q1", "q2", "q3", "q4")
                                                  if q not in out]
    assert [qid for _, qid, _ in skipped.dropped] == out
    where, _, reason = skipped.dropped[0]
    assert EXPECT[name] in reason and where == msg.split(": question ")[0]


def test_squad_unplaceable_question_is_dropped_when_skipping(tmp_path):
    obj = squad_v2()
    obj["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] = 11
    split = read_qa(write_json(tmp_path / "bad.json", obj), on_bad="skip")
    assert [ex.id for ex in split.examples] == ["q1", "q2", "q4"]
    [(where, qid, reason)] = split.dropped
    assert qid == "q3" and reason.startswith("no answer can be placed (answer 1 text "
                                             "'a Viking leader' at offset 11 does not match")
    assert split.notes == []


def test_squad_duplicate_ids_are_noted_and_every_occurrence_read(tmp_path):
    obj = squad_v2()
    obj["data"][1]["paragraphs"][0]["qas"][0]["id"] = "q1"
    path = write_json(tmp_path / "dup.json", obj)
    for on_bad in ("error", "skip"):
        split = read_qa(path, on_bad=on_bad)
        assert [ex.id for ex in split.examples] == ["q1", "q2", "q3", "q1"]
        [note] = split.notes
        assert (note.kind, note.id) == ("duplicate id", "q1")
        assert note.where.endswith("article 2 (Tesla), paragraph 1, question 1")  # the reuse
        assert "first at" in note.message
        assert "article 1 (Normans), paragraph 1, question 1" in note.message
        assert split.note_counts()["duplicate id"] == 1


def test_official_reading_never_refuses_offsets(tmp_path):
    """As the official v2.0 script reads a file: texts only, answerable = has answers."""
    obj = squad_v2()
    qas = obj["data"][0]["paragraphs"][0]["qas"]
    qas[0]["answers"][0]["answer_start"] += 1             # mismatch
    del qas[0]["answers"][1]["answer_start"]              # no offset at all
    qas[1]["is_impossible"] = False                       # no answers: impossible anyway
    obj["data"][0]["paragraphs"][1]["qas"][0]["is_impossible"] = True  # has answers
    path = write_json(tmp_path / "user.json", obj)
    with pytest.raises(BadInputError):
        read_qa(path, require_answers=False)
    split = read_qa(path, require_answers=False, official=True)
    q1, q2, q3, q4 = split.examples
    assert q1.answers == [("France", 76)] and not q1.impossible
    assert q1.unplaced == [("France", 54), ("France", None)]
    assert q2.impossible and not q3.impossible and q3.answers == [("a Viking leader", 10)]
    assert split.note_counts() == {"duplicate id": 0, "unplaced answer": 2, "mrqa text": 0,
                                   "is_impossible": 2}
    assert [(n.id, n.kind) for n in split.notes] == [
        ("q1", "unplaced answer"), ("q1", "unplaced answer"), ("q2", "is_impossible"),
        ("q3", "is_impossible")]
    assert "scored by its text" in split.notes[0].message
    assert "has no 'answer_start'" in split.notes[1].message


def test_squad_malformed_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "1.1",\n "data": [}\n', encoding="utf-8")
    with pytest.raises(BadInputError, match=r"bad\.json:2:\d+: not valid JSON"):
        read_qa(bad, on_bad="skip")
    write_json(bad, {"version": "1.1", "articles": []})
    with pytest.raises(BadInputError, match="the file has no 'data'"):
        read_qa(bad, on_bad="skip")
    obj = squad_v2()
    del obj["data"][1]["paragraphs"][0]["context"]
    write_json(bad, obj)
    with pytest.raises(BadInputError, match=r"article 2 \(Tesla\), paragraph 1: the "
                                            r"paragraph has no 'context'"):
        read_qa(bad, on_bad="skip")
    text = json.dumps(squad_v2(), indent=1).encode("utf-8")
    bad.write_bytes(text.replace(b"Rollo was", b"Roll\xf6 was"))
    line = text[:text.index(b"Rollo")].count(b"\n") + 1
    with pytest.raises(BadInputError, match=rf"bad\.json:{line}: invalid UTF-8 at byte \d+ "
                                            rf"of the file"):
        read_qa(bad)
    with pytest.raises(ValueError, match="on_bad='drop'"):
        read_qa(write_json(bad, squad_v2()), on_bad="drop")


# ---------------------------------------------------------------- MRQA

MRQA_CONTEXT = "[PAR] [TLE] Nikola Tesla [SEP] Tesla moved to New York in 1884. New York was"


def mrqa_lines():
    """The MRQA shared-task layout: a header line, then one object per context with
    inclusive char_spans (New York occurs twice)."""
    c = MRQA_CONTEXT
    ny = [c.index("New York"), c.rindex("New York")]
    return [
        {"header": {"dataset": "SQuAD", "split": "dev"}},
        {"id": "ctx1", "context": c,
         "context_tokens": [["[PAR]", 0], ["[TLE]", 6]],
         "qas": [
             {"qid": "m1", "question": "Where did Tesla move?",
              "question_tokens": [["Where", 0]], "answers": ["New York", "New York City"],
              "detected_answers": [{"text": "New York",
                                    "char_spans": [[s, s + 7] for s in ny] + [[ny[0], ny[0] + 7]],
                                    "token_spans": [[8, 9], [13, 14]]}]},
             {"qid": "m2", "question": "When did Tesla move?", "answers": ["1884"],
              "detected_answers": [{"text": "1884", "char_spans": [[c.index("1884"),
                                                                    c.index("1884") + 3]],
                                    "token_spans": [[11, 11]]}]}]},
        {"id": "ctx2", "context": "Warsaw is the capital of Poland.",
         "qas": [{"qid": "m3", "question": "What is the capital of Poland?",
                  "answers": ["Warsaw"],
                  "detected_answers": [{"text": "Warsaw", "char_spans": [[0, 5]],
                                        "token_spans": [[0, 0]]}]}]},
    ]


def write_jsonl(path, rows):
    data = "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("name", ["SQuAD.jsonl", "SQuAD.jsonl.gz"])
def test_mrqa(tmp_path, name):
    split = read_qa(write_jsonl(tmp_path / name, mrqa_lines()))
    assert split.version == "mrqa" and split.dropped == []
    m1, m2, m3 = split.examples
    c = MRQA_CONTEXT
    assert m1.answers == [("New York", c.index("New York")), ("New York", c.rindex("New York"))]
    assert m1.accepted == ["New York", "New York City"] and not m1.impossible
    assert m2.answers == [("1884", c.index("1884"))]
    assert m3.answers == [("Warsaw", 0)] and m3.context.startswith("Warsaw")
    assert m1.where == f"{tmp_path / name}:2, question 1"
    assert m3.where == f"{tmp_path / name}:3, question 1" and m3.title == ""
    # a BOM and CRLF line ends read the same
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(BOM + "".join(json.dumps(r) + "\r\n" for r in mrqa_lines()).encode())
    assert read_qa(crlf).examples == [dataclasses.replace(e, where=e.where.replace(
        str(tmp_path / name), str(crlf))) for e in split.examples]


def mrqa_bad(name):
    rows = mrqa_lines()
    qa = rows[1]["qas"][1]  # m2, line 2
    det = qa["detected_answers"][0]
    if name == "exclusive end":
        det["char_spans"][0][1] += 1
    elif name == "outside":
        det["char_spans"][0] = [len(MRQA_CONTEXT) - 2, len(MRQA_CONTEXT) + 1]
    elif name == "no detected answer":
        qa["detected_answers"] = []
    elif name == "no qid":
        del qa["qid"]
    elif name == "empty question":
        qa["question"] = ""
    elif name == "bad span":
        det["char_spans"][0] = [3]
    return rows


MRQA_EXPECT = {
    "outside": "lies outside the context",
    "no detected answer": "answerable question with no detected answer",
    "no qid": "has no 'qid'",
    "empty question": "empty question",
    "bad span": "expected [start, end] (end inclusive)",
}


@pytest.mark.parametrize("name", sorted(MRQA_EXPECT))
def test_mrqa_bad_question(tmp_path, name):
    path = write_jsonl(tmp_path / "bad.jsonl.gz", mrqa_bad(name))
    with pytest.raises(BadInputError) as err:
        read_qa(path)
    msg = str(err.value)
    assert f"{path}:2, question 2" in msg and MRQA_EXPECT[name] in msg, msg
    if name != "no qid":
        assert "'m2'" in msg
    skipped = read_qa(path, on_bad="skip")
    assert [ex.id for ex in skipped.examples] == ["m1", "m3"]
    [(where, qid, reason)] = skipped.dropped
    assert where == f"{path}:2, question 2" and MRQA_EXPECT[name] in reason
    assert qid == (None if name == "no qid" else "m2")


def test_mrqa_positions_are_the_spans_and_text_disagreements_are_noted(tmp_path):
    """As in MRQA's own files ('The Broncos' at a span reading 'Broncos'): the span is
    the answer, the text disagreement a note; token_spans place an answer without
    char_spans."""
    rows = mrqa_lines()
    c = MRQA_CONTEXT
    det = rows[1]["qas"][1]["detected_answers"][0]
    det["char_spans"][0][1] += 1  # reads '1884.'
    rows[2]["context_tokens"] = [["Warsaw", 0], ["is", 7], ["the", 10], ["capital", 14]]
    rows[2]["qas"][0]["detected_answers"][0] = {"text": "Warsaw", "token_spans": [[0, 0]]}
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    for kw in ({}, {"official": True, "require_answers": False}):
        split = read_qa(path, **kw)
        m1, m2, m3 = split.examples
        assert m2.answers == [("1884.", c.index("1884"))] and m3.answers == [("Warsaw", 0)]
        [note] = split.notes
        assert (note.kind, note.id, note.where) == ("mrqa text", "m2", f"{path}:2, question 2")
        assert "text '1884' differs from what the span reads, '1884.'" in note.message
    rows[2]["qas"][0]["detected_answers"][0]["token_spans"] = [[0, 9]]
    with pytest.raises(BadInputError, match=r"m\.jsonl:3, question 1: question 'm3': "
                                            r"detected answer 1 token_span \[0, 9\]"):
        read_qa(write_jsonl(path, rows))


def test_mrqa_malformed_files(tmp_path):
    path = tmp_path / "bad.jsonl"
    rows = mrqa_lines()
    write_jsonl(path, rows[1:])
    with pytest.raises(BadInputError, match=r"bad\.jsonl:1: expected the MRQA header"):
        read_qa(path, on_bad="skip")
    data = write_jsonl(path, rows).read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(data[:2]) + b'{"context": "x", "qas": [\n')
    with pytest.raises(BadInputError, match=r"bad\.jsonl:3: not valid JSON"):
        read_qa(path, on_bad="skip")
    path.write_bytes(b"".join(data[:2]) + data[2].replace(b"Poland", b"Pol\xe9nd"))
    with pytest.raises(BadInputError, match=r"bad\.jsonl:3: invalid UTF-8 at byte \d+ of the line"):
        read_qa(path)
    gz = write_jsonl(tmp_path / "cut.jsonl.gz", rows)
    gz.write_bytes(gz.read_bytes()[:-20])
    with pytest.raises(BadInputError, match=r"cut\.jsonl\.gz:\d+: not a readable gzip file"):
        read_qa(gz, on_bad="skip")
    dup = copy.deepcopy(rows)
    dup[2]["qas"][0]["qid"] = "m1"
    write_jsonl(path, dup)
    split = read_qa(path)
    assert [ex.id for ex in split.examples] == ["m1", "m2", "m1"]
    [note] = split.notes
    assert note.kind == "duplicate id" and note.where == f"{path}:3, question 1"
    assert re.search(r"question id 'm1' is used again \(first at .*bad\.jsonl:2, question 1\)",
                     note.message)
    with pytest.raises(BadInputError, match="an MRQA JSON Lines file, expected SQuAD JSON"):
        write_jsonl(path, rows)
        split_squad_articles(path, 1, tmp_path / "a.json", tmp_path / "b.json")


# ---------------------------------------------------------------- files to predict


def test_questions_without_answers_are_read_unlabelled_only_when_asked(tmp_path):
    """Official test files carry no answers: read for prediction, refused for training."""
    raw = json.loads(DEV.read_text(encoding="utf-8"))
    raw["data"] = raw["data"][:2]
    for article in raw["data"]:
        for par in article["paragraphs"]:
            for qa in par["qas"]:
                del qa["answers"]
    raw["data"][1]["paragraphs"][0]["qas"][0]["answers"] = []  # v1.1: an empty list too
    path = write_json(tmp_path / "test-v1.1.json", raw)
    with pytest.raises(BadInputError, match=r"article 1 \(Super_Bowl_50\), paragraph 1, "
                                            r"question 1: question '56be4db0acb8001400a502ec'"
                                            r": the question has no 'answers'"):
        read_qa(path)
    split = read_qa(path, require_answers=False)
    n = sum(len(p["qas"]) for a in raw["data"] for p in a["paragraphs"])
    assert len(split.examples) == n and split.dropped == [] and split.version == "1.1"
    assert all(not ex.labelled and ex.answers == [] and not ex.impossible
               for ex in split.examples)
    labelled = read_qa(DEV).examples[:n]
    assert [(e.id, e.question, e.context) for e in split.examples] == [
        (e.id, e.question, e.context) for e in labelled]
    assert all(e.labelled for e in labelled)

    # v2.0: a missing key is unlabelled, an empty list stays an impossible question;
    # answers that are given are still checked
    obj = squad_v2()
    del obj["data"][0]["paragraphs"][0]["qas"][0]["answers"]
    del obj["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"]
    obj["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] = 11
    path = write_json(tmp_path / "v2.json", obj)
    with pytest.raises(BadInputError, match="question 'q3': answer 1 text 'a Viking leader' "
                                            "at offset 11 does not match"):
        read_qa(path, require_answers=False)
    obj["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] = 10
    q1, q2, q3, q4 = read_qa(write_json(path, obj), require_answers=False).examples
    assert not q1.labelled and not q1.impossible
    assert q2.labelled and q2.impossible and q4.impossible
    assert q3.labelled and q3.answers == [("a Viking leader", 10)]

    # MRQA: no detected_answers is unlabelled (with or without "answers")
    rows = mrqa_lines()
    del rows[1]["qas"][0]["detected_answers"]
    del rows[1]["qas"][0]["answers"]
    del rows[2]["qas"][0]["detected_answers"]
    path = write_jsonl(tmp_path / "test.jsonl", rows)
    with pytest.raises(BadInputError, match=r"test.jsonl:2, question 1: question 'm1': "
                                            r"the question has no 'answers'"):
        read_qa(path)
    m1, m2, m3 = read_qa(path, require_answers=False).examples
    assert not m1.labelled and m1.accepted == [] and m2.labelled and not m3.labelled


# ---------------------------------------------------------------- samples (a validation size)


def _qas(obj):
    return [(a["title"], p["context"], qa) for a in obj["data"] for p in a["paragraphs"]
            for qa in p["qas"]]


def test_a_question_sample_is_fixed_by_its_seed_in_file_order_and_recorded(tmp_path):
    raw = json.loads(DEV.read_text(encoding="utf-8"))
    everything = _qas(raw)
    order = {qa["id"]: k for k, (_, _, qa) in enumerate(everything)}
    taken = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        record = sample_squad(DEV, tmp_path / f"{name}.json", 150, "questions", seed)
        obj = json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))
        taken[name] = _qas(obj)
        assert obj[SAMPLE_KEY] == record and obj["version"] == raw["version"]
        assert record["sha256"] == hashlib.sha256(DEV.read_bytes()).hexdigest()
        assert (record["questions"], record["of_questions"], record["of_articles"]) == (
            150, 10570, 48)
        assert record["articles"] == len(obj["data"]) and record["seed"] == seed
        positions = [order[qa["id"]] for _, _, qa in taken[name]]
        assert positions == sorted(positions)  # file order, each question whole
        assert all(everything[k] == q for k, q in zip(positions, taken[name]))
        assert all(p["qas"] for a in obj["data"] for p in a["paragraphs"])
        assert len(read_qa(tmp_path / f"{name}.json").examples) == 150
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert taken["a"] != taken["c"]


def test_an_article_sample_takes_whole_articles_and_a_large_size_everything(tmp_path):
    raw = json.loads(DEV.read_text(encoding="utf-8"))
    record = sample_squad(DEV, tmp_path / "a.json", 3, "articles", 7)
    obj = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))
    titles = [a["title"] for a in raw["data"]]
    assert [titles.index(a["title"]) for a in obj["data"]] == sorted(
        titles.index(a["title"]) for a in obj["data"])
    assert all(a in raw["data"] for a in obj["data"]) and len(obj["data"]) == 3
    assert record["questions"] == len(_qas(obj)) and record["unit"] == "articles"
    record = sample_squad(DEV, tmp_path / "all.json", 20000, "questions", 1)
    obj = json.loads((tmp_path / "all.json").read_text(encoding="utf-8"))
    assert obj["data"] == raw["data"] and record["questions"] == record["of_questions"] == 10570


def test_a_sample_refuses_what_it_cannot_take(tmp_path):
    with pytest.raises(ValueError, match="size=0"):
        sample_squad(DEV, tmp_path / "x.json", 0)
    with pytest.raises(ValueError, match="unit 'paragraphs'"):
        sample_squad(DEV, tmp_path / "x.json", 3, "paragraphs")
    with pytest.raises(ValueError, match="must differ"):
        sample_squad(DEV, DEV, 3)
    mrqa = tmp_path / "m.jsonl"
    mrqa.write_text(json.dumps({"header": {"dataset": "SQuAD"}}) + "\n")
    with pytest.raises(BadInputError, match="MRQA"):
        sample_squad(mrqa, tmp_path / "x.json", 3)
    assert not (tmp_path / "x.json").exists()
