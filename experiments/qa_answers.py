"""Where the QA heads' EM and F1 part: outcome shares and answer lengths per run, and a
per-question paired comparison of two heads at the same seed.

EM and F1 can move in opposite directions (a head that is more often exactly right but
further off when wrong). This splits each run's questions into exact (EM 1), partial
(0 < F1 < 1) and miss (F1 0), and compares predicted with gold answer lengths (words of
the normalized text; the gold length is that of the gold answer the prediction scores
best against), so the report can say which it is. With the run's nbest.json beside its
predictions, "top-5 exact %" is the share of questions with an exact answer among the
five best candidates: a head that ranks the gold answer high but picks another has a
decoding or calibration problem rather than a ranking one.

    python experiments/qa_answers.py \\
        --valid data-bin/all-MiniLM-L6-v2/squad-dev-split38/valid.json \\
        --runs runs/qa_grid/runs/*/predictions.json
Run folders are named <encoder>-<head>-...-s<seed> (experiments/qa_grid.py).
"""

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from span_plugin.formats.squad import read_qa
from span_plugin.formats.squad_metrics import (
    exact_match, f1_score, gold_texts, normalize_answer)

RUN_NAME = re.compile(r"-(boundary|sf|span)-.*-s(\d+)$")
TOP_K = 5


def outcomes(predictions, examples, nbest=None):
    """{id: (em, f1, predicted words, gold words, exact in top 5 or None)}; the gold
    answer is the one the prediction scores best against (F1, then EM; the first on
    ties). nbest: {id: [{"text": ...}, ...] best first} (span-predict's nbest.json) or
    None."""
    out = {}
    for ex in examples:
        pred = predictions[ex.id]
        golds = gold_texts(ex)
        # ties (a miss against every gold) keep the first gold answer
        f1, em, gold = max(((f1_score(pred, g, "1.1"), exact_match(pred, g), g) for g in golds),
                           key=lambda s: s[:2])
        top = None if nbest is None else float(any(
            exact_match(c["text"], g) for c in nbest[ex.id][:TOP_K] for g in golds))
        out[ex.id] = (em, f1, len(normalize_answer(pred).split()),
                      len(normalize_answer(gold).split()), top)
    return out


def summary(rows):
    n = len(rows)
    em = [r[0] for r in rows]
    f1 = [r[1] for r in rows]
    partial = [r for r in rows if r[0] == 0 and r[1] > 0]
    return {
        "EM": 100 * sum(em) / n, "F1": 100 * sum(f1) / n,
        "partial %": 100 * len(partial) / n,
        "miss %": 100 * sum(1 for r in rows if r[1] == 0) / n,
        "F1 of partials": 100 * statistics.mean(r[1] for r in partial) if partial else 0.0,
        "pred words": statistics.mean(r[2] for r in rows),
        "gold words": statistics.mean(r[3] for r in rows),
        "longer than gold %": 100 * sum(1 for r in rows if r[0] == 0 and r[2] > r[3]) / n,
        "shorter than gold %": 100 * sum(1 for r in rows if r[0] == 0 and r[2] < r[3]) / n,
        f"top-{TOP_K} exact %": (100 * sum(r[4] for r in rows) / n
                                 if all(r[4] is not None for r in rows) else float("nan")),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--valid", required=True, help="the held-out SQuAD file the runs predicted")
    p.add_argument("--runs", nargs="+", required=True, help="predictions.json of grid runs")
    args = p.parse_args(argv)
    examples = read_qa(args.valid).examples
    runs = {}
    for path in args.runs:
        m = RUN_NAME.search(Path(path).parent.name)
        if not m:
            p.error(f"{path}: folder name does not end in -<head>-...-s<seed>")
        predictions = json.loads(Path(path).read_text(encoding="utf-8"))
        missing = [ex.id for ex in examples if ex.id not in predictions]
        if missing:
            p.error(f"{path}: no prediction for {len(missing)} questions (first {missing[0]})")
        nbest_path = Path(path).with_name("nbest.json")
        nbest = (json.loads(nbest_path.read_text(encoding="utf-8"))
                 if nbest_path.exists() else None)
        runs[m.group(1), int(m.group(2))] = outcomes(predictions, examples, nbest)

    columns = list(summary(next(iter(runs.values())).values()))
    print("| head | seed | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 2) + "|")
    for (head, seed), out in sorted(runs.items()):
        s = summary(list(out.values()))
        print(f"| {head} | {seed} | " + " | ".join(f"{s[c]:.2f}" for c in columns) + " |")

    seeds = sorted({s for h, s in runs if h == "span"} & {s for h, s in runs if h == "boundary"})
    if seeds:
        print("\nPer question, span vs boundary at the same seed (counts of questions):\n")
        print("| seed | both exact | span only exact | boundary only exact | "
              "span F1 higher | boundary F1 higher |")
        print("|---|---|---|---|---|---|")
    for seed in seeds:
        span, bound = runs["span", seed], runs["boundary", seed]
        ids = list(span)
        count = lambda f: sum(1 for i in ids if f(span[i], bound[i]))  # noqa: E731
        cells = [count(lambda s, b: s[0] and b[0]), count(lambda s, b: s[0] and not b[0]),
                 count(lambda s, b: b[0] and not s[0]), count(lambda s, b: s[1] > b[1]),
                 count(lambda s, b: b[1] > s[1])]
        print(f"| {seed} | " + " | ".join(map(str, cells)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
