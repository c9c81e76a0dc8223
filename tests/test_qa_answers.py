"""experiments/qa_answers.py: its per-question outcomes reproduce the official SQuAD
scores on real dev questions, and its outcome shares and lengths say what they claim."""

import json
import random

import pytest

from conftest import DATA

import qa_answers
from span_plugin.formats.squad import read_qa, split_squad_articles
from span_plugin.formats.squad_metrics import gold_texts, score_answer, squad_scores

pytestmark = pytest.mark.research  # experiments/qa_answers.py and qa_grid.py (pytest.ini)


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
    """Records of before word decoding (``em``, no answer_boundaries: token) and after
    (``exact_match``, word) are each paired with the boundary head of their decoding."""
    import qa_grid

    def rec(head, seed, em, f1, boundaries=None):
        if boundaries is None:  # an older record
            return {"head": head, "seed": seed, "em": em, "f1": f1, "minutes": 10.0,
                    "hparams": {}}
        return {"head": head, "seed": seed, "exact_match": em, "f1": f1, "minutes": 10.0,
                "hparams": {"answer_boundaries": boundaries}}

    records = [rec("boundary", 1, 40.0, 55.0), rec("boundary", 2, 42.0, 57.0),
               rec("sf", 1, 41.0, 56.5), rec("sf", 2, 41.0, 58.0), rec("span", 1, 39.0, 50.0),
               rec("boundary", 1, 44.0, 60.0, "word"), rec("sf", 1, 45.0, 59.0, "word")]
    text = qa_grid.report(records)
    assert "| sf | token | 1, 2 | 41.00 +- 0.00 | 57.25 +- 1.06 | 10 |" in text
    assert "| sf | word | 1 | 45.00 +- 0.00 | 59.00 +- 0.00 | 10 |" in text
    assert "sf - boundary, EM, token answers, paired by seed: +0.00 +- 1.41 (1 of 2)" in text
    assert ("sf - boundary, F1, token answers, paired by seed: +1.25 +- 0.35 (2 of 2), "
            "95% CI [-1.93, +4.43], paired t p = 0.13") in text
    assert "span - boundary, F1, token answers, paired by seed: -5.00 (0 of 1)\n" in text
    assert "sf - boundary, EM, word answers, paired by seed: +1.00 (1 of 1)" in text
    assert "- n-gram dictionary: not recorded (7 runs: boundary, sf, span)" in text
    assert "span - boundary" in qa_grid.report(records[:2] + records[4:5])
    assert "sf - boundary" not in qa_grid.report(records[:2] + records[4:5])
    assert [qa_grid.boundaries_of(r) for r in (records[0], records[5])] == ["token", "word"]


def test_qa_grid_report_compares_word_and_token_decoding_of_the_same_checkpoints():
    import qa_grid

    def rec(head, seed, word, token):
        decoded = {b: {"exact_match": em, "f1": f1, "inside_word": cut, "answers": 100}
                   for b, (em, f1, cut) in (("word", word), ("token", token))}
        return {"head": head, "seed": seed, "exact_match": word[0], "f1": word[1],
                "minutes": 50.0, "hparams": {"answer_boundaries": "word"}, "decoded": decoded}

    records = [rec("boundary", 1, (43.0, 58.0, 0), (42.0, 58.5, 6)),
               rec("boundary", 2, (44.0, 59.0, 0), (43.5, 59.0, 4)),
               rec("span", 1, (41.0, 52.0, 0), (40.0, 51.0, 8))]
    text = qa_grid.report(records)
    assert "| boundary | 2 | 43.50 | 42.75 | 58.50 | 58.75 | 0.00% | 5.00% |" in text
    assert "| span | 1 | 41.00 | 40.00 | 52.00 | 51.00 | 0.00% | 8.00% |" in text
    assert "boundary: word - token, exact_match: +0.75 +- 0.35 (2 of 2), 95% CI" in text
    assert "span: word - token, f1: +1.00 (1 of 1)" in text


@pytest.mark.slow
def test_qa_grid_runs_a_cell_and_scores_both_decodings_of_its_checkpoint(tmp_path,
                                                                          converted_tiny_bert):
    """A smoke cell of the grid through the real recipe (a converted tiny BERT of MiniLM's
    WordPiece, 2 updates, 3 real dev articles split 2/1): one record with the official
    names and its wall and CPU minutes, both decodings of the same checkpoint and their
    word cuts; a relaunch skips it; the report pairs them."""
    import qa_grid

    data = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    data["data"] = data["data"][:3]
    (tmp_path / "dev.json").write_text(json.dumps(data))
    args = ["--model-dir", str(converted_tiny_bert), "--squad-dev", str(tmp_path / "dev.json"),
            "--split-articles", "2", "--heads", "boundary", "--seeds", "1",
            "--results", str(tmp_path / "r.jsonl"), "--work-dir", str(tmp_path / "w"),
            "--report-file", str(tmp_path / "report.md"), "--max-positions", "96",
            "--doc-stride", "32", "--batch-size", "8", "--device", "cpu",
            "--extra", "--max-update", "2"]
    assert qa_grid.main(args) == 0
    [record] = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert record["hparams"]["answer_boundaries"] == "word" and "em" not in record
    assert 0 < record["cpu_minutes"] and 0 < record["minutes"]
    decoded = record["decoded"]
    assert set(decoded) == {"word", "token"}
    assert decoded["word"]["exact_match"] == record["exact_match"]
    assert decoded["word"]["inside_word"] == 0
    assert decoded["word"]["answers"] == decoded["token"]["answers"] == record["questions"]
    run = tmp_path / "w" / "runs" / f"{converted_tiny_bert.name}-boundary-lr5e-05-e1-p96-word-s1"
    token = json.loads((run / "decoded-token" / "results.json").read_text())
    assert token["answer_boundaries"] == "token" and token["f1"] == decoded["token"]["f1"]
    assert not (run / "checkpoints").exists()  # not kept unless asked
    folder = tmp_path / "w" / "data" / f"{converted_tiny_bert.name}-96-32"
    ngrams = json.loads((folder / "provenance.json").read_text())["encoder"]["ngrams"]
    assert record["data_record"]["encoder"]["ngrams"] == ngrams
    assert record["model_settings"]["qa_head"] == "boundary"
    assert qa_grid.main(args) == 0  # nothing left to run
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 1
    report = (tmp_path / "report.md").read_text()
    assert "| boundary | 1 |" in report
    assert (f"n-gram dictionary: {ngrams['packaged']} sha256 {ngrams['sha256'][:12]}, counted "
            f"on {ngrams['built']['corpus']} (1 run: boundary)") in report
