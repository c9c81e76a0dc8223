"""Files the official SQuAD evaluation scripts accept are read and scored as they score
them: gold answers whose offsets do not match their text, reused question ids, v2.0
questions whose is_impossible disagrees with their answers. The reference scorers here
are written from the official v1.1 and v2.0 scripts' definitions, independently of
span_plugin.formats.squad_metrics, and read the raw JSON as the scripts do."""

import collections
import copy
import json
import re
import string

import pytest

from conftest import DATA, run_cli, run_main

from span_plugin.formats.squad import read_qa
from span_plugin.formats.squad_metrics import best_null_threshold, squad_scores
from span_plugin.modules.qa_decoding import cuts_word

DEV = DATA / "squad" / "dev-v1.1.json"

# ---------------------------------------------------------------- reference scorers


def _normalize(s):
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def _f1_v1(prediction, gold):
    p, g = _normalize(prediction).split(), _normalize(gold).split()
    same = sum((collections.Counter(p) & collections.Counter(g)).values())
    if same == 0:
        return 0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def official_v1(dataset, predictions):
    """evaluate-v1.1.py: every question of the file, its prediction looked up by id."""
    em = f1 = total = 0
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                golds = [a["text"] for a in qa["answers"]]
                pred = predictions[qa["id"]]
                em += max(float(_normalize(pred) == _normalize(g)) for g in golds)
                f1 += max(_f1_v1(pred, g) for g in golds)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total, "total": total}


def _tokens(s):
    return _normalize(s).split() if s else []


def _f1_v2(gold, pred):
    g, p = _tokens(gold), _tokens(pred)
    if not g or not p:
        return int(g == p)
    same = sum((collections.Counter(g) & collections.Counter(p)).values())
    if same == 0:
        return 0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def _v2_raw(dataset, predictions):
    """The v2.0 script's per-id scores and answerability: dicts keyed by id, so a
    reused id keeps its last occurrence."""
    has_ans, exact, f1 = {}, {}, {}
    for article in dataset["data"]:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                qid = qa["id"]
                has_ans[qid] = bool(qa["answers"])
                golds = [a["text"] for a in qa["answers"] if _normalize(a["text"])] or [""]
                if qid not in predictions:
                    continue
                pred = predictions[qid]
                exact[qid] = max(int(_normalize(g) == _normalize(pred)) for g in golds)
                f1[qid] = max(_f1_v2(g, pred) for g in golds)
    return has_ans, exact, f1


def official_v2(dataset, predictions):
    """evaluate-v2.0.py without a no-answer probability file."""
    has_ans, exact, f1 = _v2_raw(dataset, predictions)

    def summary(ids, prefix, exact_key):
        n = len(ids)
        return {f"{prefix}{exact_key}": 100.0 * sum(exact[k] for k in ids) / n,
                f"{prefix}f1": 100.0 * sum(f1[k] for k in ids) / n, f"{prefix}total": n}

    out = summary(list(exact), "", "exact_match")
    for prefix, want in (("HasAns_", True), ("NoAns_", False)):
        ids = [k for k, v in has_ans.items() if v == want]
        if ids:
            out.update(summary(ids, prefix, "exact"))
    return out


def official_best_f1(dataset, predictions, na_probs):
    """evaluate-v2.0.py's find_best_thresh on F1: (best F1, threshold)."""
    has_ans, _, f1 = _v2_raw(dataset, predictions)
    score = best = sum(1 for v in has_ans.values() if not v)
    thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in f1:
            continue
        score += f1[qid] if has_ans[qid] else (-1 if predictions[qid] else 0)
        if score > best:
            best, thresh = score, na_probs[qid]
    return 100.0 * best / len(f1), thresh


def test_reference_scorers_agree_on_the_clean_dev_file():
    dataset = json.loads(DEV.read_text(encoding="utf-8"))
    examples = read_qa(DEV).examples
    predictions = {ex.id: ex.context.split()[i % 7] for i, ex in enumerate(examples)}
    ours = squad_scores(predictions, examples)
    want = official_v1(dataset, predictions)
    for key in want:
        assert ours[key] == pytest.approx(want[key], abs=1e-9), key


# ---------------------------------------------------------------- a user's messy file

MISMATCHED_ANSWERS, MISMATCHED_QUESTIONS, REUSED_IDS = 21, 9, 5


def _shift(answer, context, kind):
    """Give a gold answer an offset that does not read its text."""
    text, start = answer["text"], answer["answer_start"]
    if kind == 0:
        answer["answer_start"] = start + 1
    elif kind == 1:
        answer["answer_start"] = max(0, start - 3) if start >= 3 else start + 2
    elif kind == 2:
        answer["answer_start"] = len(context) + 5  # past the end
    elif kind == 3:
        del answer["answer_start"]
    else:
        answer["answer_start"] = str(start)
    if kind < 3:
        assert context[answer["answer_start"]:][:len(text)] != text


def messy_v1():
    """Real dev rows (article Warsaw, 6 paragraphs) as a user's file: 21 gold answers
    of 9 questions with offsets that do not read their text (every answer of 6
    questions, one of 3 more) and 5 reuses of a question id (an identical copy, other
    questions under an id already used, an id used three times, a reused id whose
    answers are misplaced)."""
    raw = json.loads(DEV.read_text(encoding="utf-8"))
    article = copy.deepcopy(raw["data"][1])
    article["paragraphs"] = article["paragraphs"][:6]
    pars = article["paragraphs"]
    qas = [(p, qa) for p in pars for qa in p["qas"]]
    n = 0
    for k, (p, qa) in enumerate(qas[1:28:3][:MISMATCHED_QUESTIONS]):
        answers = qa["answers"] if k < 6 else qa["answers"][:1]
        for a in answers:
            _shift(a, p["context"], n % 5)
            n += 1
    assert n == MISMATCHED_ANSWERS
    first, second = pars[0]["qas"], pars[1]["qas"]
    first.append(copy.deepcopy(first[2]))    # 1: the same question twice
    second[0]["id"] = first[0]["id"]          # 2: another question, another paragraph
    pars[2]["qas"][0]["id"] = first[0]["id"]  # 3: the same id a third time
    second[3]["id"] = second[2]["id"]         # 4: a neighbour's id
    pars[3]["qas"][2]["id"] = qas[1][1]["id"]  # 5: the id of a question misplaced above
    return {"version": "1.1", "data": [article]}


def messy_v2():
    """The v1.1 mess as SQuAD 2.0: is_impossible everywhere, impossible questions (one
    the last occurrence of a reused id), and two is_impossible that disagree with
    their answers (the v2.0 script reads answerability from the answers only)."""
    obj = messy_v1()
    obj["version"] = "v2.0"
    pars = obj["data"][0]["paragraphs"]
    for p in pars:
        for qa in p["qas"]:
            qa["is_impossible"] = False
    for k, p in enumerate(pars[:3]):
        other = copy.deepcopy(pars[k + 3]["qas"][0])
        other.update(id=f"impossible-{k}", answers=[], is_impossible=True,
                     plausible_answers=[{"text": p["context"][:4], "answer_start": 0}])
        p["qas"].append(other)
    pars[4]["qas"][0]["is_impossible"] = True     # has answers: answerable
    pars[4]["qas"][1].update(answers=[])          # is_impossible false: impossible
    last = copy.deepcopy(pars[0]["qas"][3])       # a reused id, impossible at its end
    last.update(answers=[], is_impossible=True)
    pars[5]["qas"].append(last)
    return obj


def _predictions(examples):
    """Exact, first-word, longer, wrong and empty answers of each id's first question."""
    out = {}
    for i, ex in enumerate(examples):
        if ex.id in out:
            continue
        golds = [t for t, _ in ex.answers + ex.unplaced] or [""]
        text = golds[0]
        out[ex.id] = [text, text.split()[0] if text else "", f"{text} and more",
                      ex.context.split()[i % 5], ""][i % 5]
    return out


def test_messy_v1_read_as_the_official_script_reads_it(tmp_path):
    dataset = messy_v1()
    path = tmp_path / "user.json"
    path.write_text(json.dumps(dataset), encoding="utf-8")
    with pytest.raises(ValueError):
        read_qa(path)  # training reads offsets
    split = read_qa(path, require_answers=False, official=True)
    counts = split.note_counts()
    assert counts == {"duplicate id": REUSED_IDS, "unplaced answer": MISMATCHED_ANSWERS,
                      "mrqa text": 0, "is_impossible": 0}
    assert len({n.id for n in split.notes if n.kind == "unplaced answer"}) == MISMATCHED_QUESTIONS
    n_questions = sum(len(p["qas"]) for p in dataset["data"][0]["paragraphs"])
    assert len(split.examples) == n_questions and split.dropped == []
    predictions = _predictions(split.examples)
    ours, want = squad_scores(predictions, split.examples, "1.1"), official_v1(dataset, predictions)
    assert ours["total"] == n_questions and ours["missing"] == 0
    for key in want:
        assert ours[key] == pytest.approx(want[key], abs=1e-9), key


def test_messy_v2_read_as_the_official_script_reads_it(tmp_path):
    dataset = messy_v2()
    path = tmp_path / "user-v2.json"
    path.write_text(json.dumps(dataset), encoding="utf-8")
    split = read_qa(path, require_answers=False, official=True)
    assert split.version == "2.0"
    assert split.note_counts() == {"duplicate id": REUSED_IDS + 1,
                                   "unplaced answer": MISMATCHED_ANSWERS, "mrqa text": 0,
                                   "is_impossible": 2}
    predictions = _predictions(split.examples)
    ours, want = squad_scores(predictions, split.examples, "2.0"), official_v2(dataset, predictions)
    assert want["total"] < len(split.examples)  # the v2.0 script counts each id once
    assert {"HasAns_total", "NoAns_total"} <= set(want)
    for key in want:
        assert ours[key] == pytest.approx(want[key], abs=1e-9), key
    # the F1-best no-answer threshold, distinct margins
    margins = {qid: (i * 7 % 23) / 10 - 1.0 for i, qid in enumerate(predictions)}
    thresh, _, f1 = best_null_threshold(predictions, margins, split.examples, "2.0")
    best_f1, official_thresh = official_best_f1(dataset, predictions, margins)
    assert f1 == pytest.approx(best_f1, abs=1e-9) and thresh == official_thresh


def test_training_skips_lists_and_counts_what_it_cannot_place(tmp_path, converted_minilm):
    """span-preprocess qa on the messy file: answers never shifted; questions left
    without a placed answer dropped, every case listed by id; --on-bad error stops."""
    path = tmp_path / "user.json"
    path.write_text(json.dumps(messy_v1()), encoding="utf-8")
    args = ["span-preprocess", "qa", "--train", path, "--valid", path, "--bpe", "wordpiece",
            "--wordpiece", converted_minilm, "--srcdict", converted_minilm / "dict.txt",
            "--max-positions", "128", "--doc-stride", "32", "--workers", "1"]
    proc = run_cli(*args, "--out", tmp_path / "bin")
    n = sum(len(p["qas"]) for p in messy_v1()["data"][0]["paragraphs"])
    dropped_questions = 6  # every answer misplaced
    assert f"train: {n - dropped_questions} questions" in proc.stdout, proc.stdout
    assert (f"{MISMATCHED_ANSWERS - 18} answers that cannot be placed, left out of training, "
            f"{REUSED_IDS} reused question ids") in proc.stdout, proc.stdout
    folder = tmp_path / "bin"
    dropped = (folder / "dropped_rows.tsv").read_text().splitlines()[1:]
    assert len(dropped) == 2 * dropped_questions
    assert all("no answer can be placed" in row for row in dropped)
    notes = [r.split("\t") for r in (folder / "input_notes.tsv").read_text().splitlines()[1:]]
    assert sorted({r[2] for r in notes}) == ["duplicate id", "unplaced answer"]
    record = json.loads((folder / "provenance.json").read_text())
    stats = record["labels"]["stats"]["valid"]
    assert (stats["unplaced_answers"], stats["duplicate_ids"]) == (3, REUSED_IDS)
    assert stats["dropped"] == dropped_questions and stats["questions"] == n - dropped_questions
    # the records keep the misplaced answers of kept questions as gold, unplaced
    records = [json.loads(line) for line in (folder / "raw" / "valid.jsonl").open()]
    assert sum(len(r["unplaced"]) for r in records) == 3
    for r in records:
        for text, start in r["answers"]:
            assert r["context"][start:start + len(text)] == text  # never shifted
    proc = run_cli(*args, "--out", tmp_path / "strict", "--on-bad", "error", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout
    assert "user.json: article 1 (Warsaw), paragraph 1, question 2" in proc.stdout
    assert not (tmp_path / "strict" / "provenance.json").exists()


# ---------------------------------------------------------------- span-predict end to end


def _printed(stdout):
    line = next(x for x in stdout.splitlines() if re.search(r"predictions\.json: \d+ answers", x))
    return line, dict(re.findall(r"(\w+) (-?\d+\.\d\d)\b", line))


@pytest.mark.slow
def test_span_predict_prints_what_the_official_scripts_compute(qa_checkpoint, tmp_path):
    for name, dataset, official in (("v1", messy_v1(), official_v1),
                                    ("v2", messy_v2(), official_v2)):
        path = tmp_path / f"user-{name}.json"
        path.write_text(json.dumps(dataset), encoding="utf-8")
        out = tmp_path / name
        proc = run_main("span-predict", "--checkpoint", qa_checkpoint,
                        "--input", path, "--output", out / "predictions.json",
                        "--results", out / "scores.json", "--nbest", out / "nbest.json")
        predictions = json.loads((out / "predictions.json").read_text())
        want = official(dataset, predictions)
        # word-level answers (the default) of the real dev contexts: none cuts a word (a
        # reused id is predicted at its first occurrence)
        contexts = {}
        for p in (p for a in dataset["data"] for p in a["paragraphs"]):
            for qa in p["qas"]:
                contexts.setdefault(qa["id"], p["context"])
        nbest = json.loads((out / "nbest.json").read_text())
        assert not [(qid, a["text"]) for qid, answers in nbest.items() for a in answers
                    if any(cuts_word(contexts[qid], a["start"], a["end"]))]
        results = json.loads((out / "scores.json").read_text())
        line, printed = _printed(proc.stdout)
        for key in want:
            assert results[key] == pytest.approx(want[key], abs=1e-9), (name, key)
            if isinstance(want[key], float):
                assert printed[key] == f"{want[key]:.2f}", (name, key, line)
        ids = {qa["id"] for p in dataset["data"][0]["paragraphs"] for qa in p["qas"]}
        questions = sum(len(p["qas"]) for p in dataset["data"][0]["paragraphs"])
        assert set(predictions) == ids
        assert f"{len(ids)} answers for {questions} questions" in line
        assert f"{REUSED_IDS + (name == 'v2')} reused question ids" in proc.stdout
        assert f"{MISMATCHED_ANSWERS} gold answers whose offsets do not place" in proc.stdout
        assert "Traceback" not in proc.stdout
        counts = results["input_notes"]["counts"]
        assert (counts["duplicate id"], counts["unplaced answer"]) == (
            REUSED_IDS + (name == "v2"), MISMATCHED_ANSWERS)
