"""experiments/qa_answers.py: its per-question outcomes reproduce the official SQuAD
scores on real dev questions, and its outcome shares and lengths say what they claim."""

import json
import random
import sys

from conftest import DATA, ROOT

sys.path.insert(0, str(ROOT / "experiments"))
import qa_answers  # noqa: E402
from span_plugin.formats.squad import read_qa, split_squad_articles  # noqa: E402
from span_plugin.formats.squad_metrics import gold_texts, score_answer, squad_scores  # noqa: E402


def _predictions(examples, seed=0):
    """Exact, shortened, lengthened and wrong answers, mixed."""
    rng = random.Random(seed)
    out = {}
    for i, ex in enumerate(examples):
        text, start = ex.answers[0]
        kind = i % 4
        if kind == 0:
            out[ex.id] = text
        elif kind == 1:
            out[ex.id] = text.split()[0]
        elif kind == 2:
            out[ex.id] = ex.context[start: start + len(text) + 30]
        else:
            out[ex.id] = rng.choice(ex.context.split())
    return out


def test_outcomes_reproduce_the_official_scores_and_partition_the_questions(tmp_path):
    split_squad_articles(DATA / "squad" / "dev-v1.1.json", 1, tmp_path / "a.json",
                         tmp_path / "rest.json")
    examples = read_qa(tmp_path / "a.json").examples[:120]
    predictions = _predictions(examples)
    official = squad_scores(predictions, examples)
    s = qa_answers.summary(list(qa_answers.outcomes(predictions, examples).values()))
    assert abs(s["EM"] - official["exact_match"]) < 1e-9
    assert abs(s["F1"] - official["f1"]) < 1e-9
    assert abs(s["EM"] + s["partial %"] + s["miss %"] - 100) < 1e-9
    assert 0 < s["partial %"] and 0 < s["miss %"]

    # every answer cut to its first word: never longer than gold, shorter where gold
    # has several words
    first_words = {ex.id: ex.answers[0][0].split()[0] for ex in examples}
    short = qa_answers.summary(list(qa_answers.outcomes(first_words, examples).values()))
    assert short["longer than gold %"] == 0 < short["shorter than gold %"]
    assert short["pred words"] < short["gold words"]

    # top-5: the gold answer fourth among wrong candidates counts, sixth does not
    wrong = [{"text": "zzz"}] * 5
    for place, share in ((3, 100.0), (5, 0.0)):
        nbest = {ex.id: wrong[:place] + [{"text": ex.answers[0][0]}] for ex in examples}
        rows = qa_answers.outcomes(first_words, examples, nbest).values()
        assert qa_answers.summary(list(rows))["top-5 exact %"] == share


def test_the_cli_pairs_heads_by_seed(tmp_path, capsys):
    split_squad_articles(DATA / "squad" / "dev-v1.1.json", 47, tmp_path / "train.json",
                         tmp_path / "valid.json")
    examples = read_qa(tmp_path / "valid.json").examples
    paths, exact = [], {}
    for head, seed in (("boundary", 1), ("span", 1)):
        run = tmp_path / f"enc-{head}-lr5e-05-e1-p256-s{seed}"
        run.mkdir()
        predictions = _predictions(examples, seed=len(head))
        exact[head] = {ex.id for ex in examples
                       if score_answer(predictions[ex.id], gold_texts(ex), "1.1")[0] == 1}
        (run / "predictions.json").write_text(json.dumps(predictions))
        paths.append(str(run / "predictions.json"))
    assert qa_answers.main(["--valid", str(tmp_path / "valid.json"), "--runs", *paths]) == 0
    out = capsys.readouterr().out
    assert "| boundary | 1 |" in out and "| span | 1 |" in out
    row = [line for line in out.splitlines() if line.startswith("| 1 |")]
    both, span_only, boundary_only = map(int, row[0].split("|")[2:5])
    assert both == len(exact["span"] & exact["boundary"]) >= len(examples) // 4
    assert (span_only, boundary_only) == (len(exact["span"] - exact["boundary"]),
                                          len(exact["boundary"] - exact["span"]))


def test_qa_grid_report_pairs_every_head_with_boundary():
    import qa_grid

    def rec(head, seed, em, f1):
        return {"head": head, "seed": seed, "em": em, "f1": f1, "minutes": 10.0}

    records = [rec("boundary", 1, 40.0, 55.0), rec("boundary", 2, 42.0, 57.0),
               rec("sf", 1, 41.0, 56.5), rec("sf", 2, 41.0, 58.0), rec("span", 1, 39.0, 50.0)]
    text = qa_grid.report(records)
    assert "| sf | 1, 2 | 41.00 +- 0.00 | 57.25 +- 1.06 | 10 |" in text
    assert "sf - boundary, EM, paired by seed: +0.00 +- 1.41 (1 of 2)" in text
    assert "sf - boundary, F1, paired by seed: +1.25 +- 0.35 (2 of 2)" in text
    assert "span - boundary, F1, paired by seed: -5.00 (0 of 1)" in text
    assert "span - boundary" in qa_grid.report(records[:2] + records[4:])
    assert "sf - boundary" not in qa_grid.report(records[:2] + records[4:])
