"""The official SQuAD scores (formats/squad_metrics.py): hand-computed EM and F1, the
v1.1/v2.0 differences, the summary with HasAns/NoAns groups, the no-answer threshold
search, and a real dev-v1.1 question whose gold answer normalizes to nothing."""

import random

import pytest

from conftest import DATA

from span_plugin.formats.squad import QAExample, read_qa
from span_plugin.formats.squad_metrics import (best_null_threshold, exact_match, f1_score,
                                               gold_texts, normalize_answer, score_answer,
                                               squad_scores)


def test_normalize_answer():
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("the theater") == "theater"  # articles only as whole words
    # punctuation goes first: "A.M." becomes "am", not the article "a"
    assert normalize_answer("A.M. the") == "am"
    assert normalize_answer("l'avion--(1884)") == "lavion1884"
    assert normalize_answer(" \t\n") == "" and normalize_answer("the.") == ""


def test_exact_match_and_f1_by_hand():
    assert exact_match("the Denver Broncos!", "denver broncos") == 1.0
    assert exact_match("Denver", "Denver Broncos") == 0.0
    # pred tokens [cat sat on mat], gold [cat on mat]: 3 common, P = 3/4, R = 3/3,
    # F1 = 2 * 3/4 * 1 / (3/4 + 1) = 6/7
    assert f1_score("the cat sat on the mat", "a cat on a mat") == pytest.approx(6 / 7)
    # counts clip: pred [new york new york], gold [new york]: 2 common, P = 2/4, R = 1,
    # F1 = 2 * 1/2 / (3/2) = 2/3
    assert f1_score("New York, New York", "new york") == pytest.approx(2 / 3)
    assert f1_score("Broncos", "Carolina Panthers") == 0.0
    assert f1_score("Denver Broncos", "The Denver Broncos.") == 1.0
    # an empty token list: v2.0 gives EM, v1.1 gives 0
    assert f1_score("", "") == 1.0 and f1_score("the", ".") == 1.0
    assert f1_score("", "", version="1.1") == 0.0
    assert f1_score("", "Broncos") == 0.0 and f1_score("Broncos", "") == 0.0


def test_score_answer():
    # max over golds: vs "broncos" P = 1/2, R = 1, F1 = 2/3; vs "denver broncos team"
    # P = 2/2, R = 2/3, F1 = 0.8; EM 0 against both
    em, f1 = score_answer("Denver Broncos", ["Broncos", "the Denver Broncos team"])
    assert em == 0.0 and f1 == pytest.approx(0.8)
    assert score_answer("broncos", ["Broncos", "the Denver Broncos team"]) == (1.0, 1.0)
    # unanswerable: golds [] (or [""]) score only the empty answer
    assert score_answer("", []) == (1.0, 1.0) == score_answer("", [""])
    assert score_answer("the", []) == (1.0, 1.0)  # normalizes to nothing
    assert score_answer("Santa Clara", []) == (0.0, 0.0)
    # an empty prediction for an answerable question
    assert score_answer("", ["Broncos"]) == (0.0, 0.0)
    # v2.0 drops golds that normalize to nothing; v1.1 keeps them (EM 1, F1 0 for ".")
    assert score_answer(".", ["Broncos", "."]) == (0.0, 0.0)
    assert score_answer(".", ["Broncos", "."], version="1.1") == (1.0, 0.0)
    assert score_answer(".", ["."]) == (1.0, 1.0)
    with pytest.raises(ValueError, match="version '3.0'"):
        score_answer("a", ["a"], version="3.0")


def ex(qid, golds, impossible=False, accepted=()):
    context = " ".join(golds) + " filler"
    answers = [(g, context.index(g)) for g in golds]
    return QAExample(qid, f"question {qid}?", context, answers, impossible, f"test:{qid}",
                     accepted=list(accepted))


def v2_examples():
    return [ex("a1", ["Denver Broncos", "Broncos", "Broncos"]),
            ex("a2", ["Carolina Panthers"]),
            ex("a3", ["Levi's Stadium"]),
            ex("n1", [], impossible=True),
            ex("n2", [], impossible=True)]


def test_gold_texts():
    a1, *_, n1, _ = v2_examples()
    assert gold_texts(a1) == ["Denver Broncos", "Broncos"]
    assert gold_texts(n1) == [""]
    assert gold_texts(ex("m", ["New York"], accepted=["New York", "NYC"])) == ["New York", "NYC"]


def test_squad_scores_v2_by_hand():
    examples = v2_examples()
    preds = {"a1": "Broncos",        # EM 1, F1 1
             "a2": "the Panthers",   # [panthers] vs [carolina panthers]: P 1, R 1/2, F1 2/3
             # a3 missing: 0, 0
             "n1": "",               # EM 1, F1 1
             "n2": "Santa Clara"}    # EM 0, F1 0
    scores = squad_scores(preds, examples)
    expect = {"exact_match": 100 * 2 / 5, "f1": 100 * (1 + 2 / 3 + 1) / 5, "total": 5,
              "missing": 1,
              "HasAns_exact": 100 / 3, "HasAns_f1": 100 * (1 + 2 / 3) / 3, "HasAns_total": 3,
              "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2}
    assert scores.keys() == expect.keys()
    for key, value in expect.items():
        assert scores[key] == pytest.approx(value), key
    # all answerable: no groups
    assert squad_scores({"a1": "Broncos"}, examples[:2]) == {
        "exact_match": 50.0, "f1": 50.0, "total": 2, "missing": 1}
    with pytest.raises(ValueError, match=r"such as \['zz'\]"):
        squad_scores({"a1": "x", "zz": "y"}, examples)
    with pytest.raises(ValueError, match="'a1' is None, expected a string"):
        squad_scores({"a1": None}, examples)


def threshold_case():
    examples = v2_examples()[:2] + v2_examples()[3:]  # a1, a2, n1, n2
    preds = {"a1": "Broncos", "a2": "the Panthers", "n1": "Santa Clara", "n2": "Levi"}
    margins = {"a1": -2.0, "a2": 0.5, "n1": 1.0, "n2": 3.0}
    return preds, margins, examples


def test_best_null_threshold_by_hand():
    preds, margins, examples = threshold_case()
    # F1 sums (a1, a2, n1, n2; null answers: 0 for a*, 1 for n*) as the threshold rises:
    #   below -2 (all null): 0 + 0 + 1 + 1 = 2      -> 50 %
    #   -2.0 (a1 answered):  1 + 0 + 1 + 1 = 3      -> 75 %
    #   0.5 (a2 too):        1 + 2/3 + 1 + 1 = 11/3 -> 91.67 %  (EM 1 + 0 + 1 + 1 = 75 %)
    #   1.0 (n1 too):        1 + 2/3 + 0 + 1 = 8/3
    #   3.0 (all answered):  1 + 2/3 + 0 + 0 = 5/3
    thresh, em, f1 = best_null_threshold(preds, margins, examples)
    assert thresh == 0.5 and em == pytest.approx(75.0) and f1 == pytest.approx(100 * 11 / 12)
    # the scores are those of the thresholded predictions
    final = {k: "" if margins[k] > thresh else p for k, p in preds.items()}
    s = squad_scores(final, examples)
    assert (s["exact_match"], s["f1"]) == (em, f1)
    # questions of one margin switch together: answering a1 and n1 at 0.0 gains nothing
    two = [examples[0], examples[2]]
    assert best_null_threshold({"a1": "Broncos", "n1": "x"}, {"a1": 0.0, "n1": 0.0},
                               two) == (-1.0, 50.0, 50.0)
    # all no-answer best, every margin positive: 0.0 as the official script reports it
    assert best_null_threshold({"n1": "x"}, {"n1": 2.0}, [examples[2]]) == (0.0, 100.0, 100.0)
    with pytest.raises(ValueError, match="without a null margin"):
        best_null_threshold(preds, {"a1": 1.0}, examples)
    with pytest.raises(ValueError, match=r"null margins .* such as \['zz'\]"):
        best_null_threshold(preds, dict(margins, zz=1.0), examples)


def test_best_null_threshold_against_every_threshold():
    rng = random.Random(3)
    golds = ["Denver Broncos", "Carolina Panthers", "Levi's Stadium", "Santa Clara"]
    examples, preds, margins = [], {}, {}
    for i in range(60):
        impossible = rng.random() < 0.4
        examples.append(ex(f"q{i}", [] if impossible else [rng.choice(golds)], impossible))
        if i % 13:  # some questions without a prediction
            preds[f"q{i}"] = rng.choice(golds + ["Denver", "the Panthers", "Stadium"])
            margins[f"q{i}"] = rng.choice([-1.5, -0.5, 0.0, 0.25, 1.0, 2.0])  # ties
    thresh, em, f1 = best_null_threshold(preds, margins, examples)
    best = max(squad_scores({k: "" if margins[k] > t else p for k, p in preds.items()},
                            examples)["f1"] for t in [-9.0] + sorted(set(margins.values())))
    assert f1 == pytest.approx(best)
    s = squad_scores({k: "" if margins[k] > thresh else p for k, p in preds.items()}, examples)
    assert (s["exact_match"], s["f1"]) == (em, f1)


def test_dev_v11_gold_that_normalizes_to_nothing():
    """Three dev-v1.1 questions have "." among their gold answers; the v1.1 script gives a
    "." prediction EM 1 and F1 0 there, the v2.0 rules drop that gold."""
    dev = read_qa(DATA / "squad" / "dev-v1.1.json")
    dots = [e for e in dev.examples if "." in gold_texts(e)]
    assert sorted(e.id for e in dots) == ["5725bad5271a42140099d0c1",
                                          "5730b7ce069b5314008322c4", "57340d124776f419006617bf"]
    s = squad_scores({e.id: "." for e in dots}, dots)
    assert (s["exact_match"], s["f1"]) == (100.0, 0.0)
    s = squad_scores({e.id: "." for e in dots}, dots, version="2.0")
    assert (s["exact_match"], s["f1"]) == (0.0, 0.0)
