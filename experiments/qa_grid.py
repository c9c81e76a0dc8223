"""Resumable extractive-QA grid: boundary head vs token-level SF (``sf``: the boundary
head over [token; conv within its n-gram span]) and span head on SQuAD v1.1 dev split by
article (first 38 articles to train, last 10 to evaluate: NOT comparable with the
official leaderboard, which trains on the 87k-question train set).

Every (head, seed) run goes through recipes/qa/squad.sh with one set of
hyperparameters for both heads (fixed in advance, not tuned on any reported seed) and
is appended, when finished, as one JSON line (EM/F1 of checkpoint_best.pt on the 10
held-out articles, settings, minutes) to the results file (committed). A relaunch skips
what the file holds and resumes an interrupted run from its checkpoint_last.pt.

    python experiments/qa_grid.py --model-dir ~/.cache/span_plugin/models/all-MiniLM-L6-v2
    python experiments/qa_grid.py --report     # experiments/RESULTS_QA_MINILM.md
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grid_lib import (  # noqa: E402
    ROOT, mean_sd, model_flags, paired_cell, read_results, resolve_device, run_grid, run_recipe,
    write_report)

HEADS = ("boundary", "sf", "span")


def run_key(r):
    h = r["hparams"]
    return (r["head"], r["seed"], h["lr"], h["epochs"], h["max_positions"], h["doc_stride"])


def run_one(a, head, seed, device):
    work = Path(a.work_dir).resolve()
    model = os.path.basename(os.path.normpath(a.model_dir))
    out_dir = work / "runs" / f"{model}-{head}-lr{a.lr:g}-e{a.epochs}-p{a.max_positions}-s{seed}"
    env = dict(MODEL_DIR=Path(a.model_dir).resolve(), HEAD=head, SEED=seed,
               SQUAD_DEV=Path(a.squad_dev).resolve(), SPLIT_ARTICLES=a.split_articles,
               MAX_POSITIONS=a.max_positions, DOC_STRIDE=a.doc_stride, LR=f"{a.lr:g}",
               BATCH_SIZE=a.batch_size, EPOCHS=a.epochs, OUT_DIR=out_dir,
               DATA_DIR=work / "data" / f"{model}-{a.max_positions}-{a.doc_stride}")
    extra = ["--log-interval", "50", "--num-workers", "0", *a.extra]
    if device == "cpu":
        extra.append("--cpu")
    minutes = run_recipe("recipes/qa/squad.sh", env, extra, out_dir, f"{head} seed {seed}")
    scores = json.loads((out_dir / "results.json").read_text())
    record = {"head": head, "seed": seed, "em": scores["exact_match"], "f1": scores["f1"],
              "questions": scores["total"],
              "hparams": {"lr": a.lr, "batch_size": a.batch_size, "epochs": a.epochs,
                          "max_positions": a.max_positions, "doc_stride": a.doc_stride,
                          "split_articles": a.split_articles, "extra": a.extra},
              "encoder": model, "device": device, "minutes": minutes}
    if not a.keep_checkpoints:
        shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    return record


def report(records):
    """The markdown table: per head mean +- sd of EM/F1; each head minus boundary,
    paired by seed."""
    lines = ["| head | seeds | EM | F1 | minutes per run |", "|---|---|---|---|---|"]
    for head in HEADS:
        rows = [r for r in records if r["head"] == head]
        if not rows:
            continue
        em, em_sd = mean_sd([r["em"] for r in rows])
        f1, f1_sd = mean_sd([r["f1"] for r in rows])
        minutes, _ = mean_sd([r["minutes"] for r in rows])
        lines.append(f"| {head} | {', '.join(str(r['seed']) for r in rows)} | {em:.2f} +- "
                     f"{em_sd:.2f} | {f1:.2f} +- {f1_sd:.2f} | {minutes:.0f} |")
    by = {(r["head"], r["seed"]): r for r in records}
    for head in HEADS[1:]:
        seeds = sorted({s for h, s in by if h == head} & {s for h, s in by if h == "boundary"})
        for key in ("em", "f1") if seeds else ():
            diffs = [by[head, s][key] - by["boundary", s][key] for s in seeds]
            lines.append(f"\n{head} - boundary, {key.upper()}, paired by seed: "
                         f"{paired_cell(diffs, 2)}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", help="span-convert output folder (WordPiece encoder)")
    p.add_argument("--squad-dev", default=str(ROOT.parent / "shared" / "data" / "squad" / "dev-v1.1.json"))
    p.add_argument("--split-articles", type=int, default=38)
    p.add_argument("--heads", nargs="+", default=list(HEADS), choices=HEADS)
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "qa_minilm.jsonl"))
    p.add_argument("--work-dir", default=str(ROOT / "runs" / "qa_grid"))
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-positions", type=int, default=256)
    p.add_argument("--doc-stride", type=int, default=64)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--max-runs", type=int, help="stop after this many new runs")
    p.add_argument("--keep-checkpoints", action="store_true")
    p.add_argument("--report", action="store_true", help="only write the report")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="arguments for fairseq-train, last (smoke runs: --max-update 2 ...)")
    a = p.parse_args(argv)
    if not a.report:
        if not a.model_dir:
            p.error("--model-dir is required to run (the converted all-MiniLM-L6-v2)")
        device = resolve_device(a.device)
        # seed-major: both heads of a seed finish before the next seed starts
        cells = {(h, s, a.lr, a.epochs, a.max_positions, a.doc_stride): (h, s)
                 for s in a.seeds for h in a.heads}
        run_grid(cells, {run_key(r) for r in read_results(a.results)},
                 lambda c: run_one(a, *c, device), a.results, a.max_runs,
                 name=lambda c: f"{c[0]} seed {c[1]}",
                 show=lambda r: f"EM {r['em']:.2f}, F1 {r['f1']:.2f}",
                 flags=model_flags(a.model_dir))
    records = read_results(a.results)
    if records:
        write_report(ROOT / "experiments" / "RESULTS_QA_MINILM.md",
                     "## Table (generated by experiments/qa_grid.py --report)\n\n" + report(records))
        print(report(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
