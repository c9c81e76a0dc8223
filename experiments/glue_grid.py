"""Resumable GLUE grid: does the span head help a real pretrained encoder?

Every (task, variant, seed) run goes through the recipe (recipes/glue/<TASK>.sh) with
one set of hyperparameters for all variants, and is appended, when finished, as one
JSON line to the results file (committed to the repo). A relaunch skips what the file
already holds and resumes an interrupted run from its checkpoint_last.pt, so the grid
can grow over several sessions. ``experiments/glue_report.py`` turns the file into the
table, the plot and the paired tests.

Variants (the paper's Table 6 comparison and its controls):
    plain    fairseq's roberta + sentence_prediction head (HEAD=plain)
    sf       Span Fine-tuning: cnn-cnn head, greedy n-gram segmentation
    cnn      CNN without segmentation (SPAN_ENCODER=cnn)
    random   cnn-cnn head, random segmentation (same span lengths, random boundaries)

    python experiments/glue_grid.py --model-dir models/minilm \\
        --glue-dir ../shared/data/glue --tasks MRPC STS-B CoLA --seeds 1 2 3
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {
    "plain": {"HEAD": "plain", "SEGMENTATION": "greedy"},
    "sf": {"HEAD": "span", "SPAN_ENCODER": "cnn-cnn", "SEGMENTATION": "greedy"},
    "cnn": {"HEAD": "span", "SPAN_ENCODER": "cnn", "SEGMENTATION": "greedy"},
    "random": {"HEAD": "span", "SPAN_ENCODER": "cnn-cnn", "SEGMENTATION": "random"},
}
METRICS = {"CoLA": "mcc", "SST-2": "accuracy", "MRPC": "f1", "STS-B": "pearson",
           "QQP": "f1", "MNLI": "accuracy", "QNLI": "accuracy", "RTE": "accuracy",
           "WNLI": "accuracy", "SNLI": "accuracy"}


def read_results(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run_key(r):
    return (r["task"], r["variant"], r["seed"], r["hparams"]["lr"])


def dev_rows(glue_dir, task):
    """(inputs, gold labels) of the task's dev split, as span-preprocess reads them."""
    from span_plugin.preprocess.glue import TASKS, read_split

    t = TASKS[task]
    raw = "dev_matched" if task == "MNLI" else "dev"
    rows = read_split(t, os.path.join(glue_dir, task, raw + ".tsv"), raw)
    return rows


def train_rows(glue_dir, task):
    from span_plugin.preprocess.glue import TASKS, read_split

    return read_split(TASKS[task], os.path.join(glue_dir, task, "train.tsv"), "train").rows


def read_predictions(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()[1:]
    return [line.split("\t")[1] for line in lines]


def run_one(a, task, variant, seed, device):
    """Run the recipe for one grid cell; returns the result record."""
    settings = VARIANTS[variant]
    work = Path(a.work_dir).resolve()
    data_dir = work / "data" / f"{task}-{settings['SEGMENTATION']}"
    out_dir = work / "runs" / f"{task}-{variant}-lr{a.lr:g}-s{seed}"
    rows = train_rows(a.glue_dir, task)
    updates = math.ceil(rows / a.batch_size) * a.epochs
    warmup = int(round(a.warmup * updates))
    env = dict(os.environ, GLUE_DIR=str(Path(a.glue_dir).resolve()),
               MODEL_DIR=str(Path(a.model_dir).resolve()), SEED=str(seed),
               DATA_DIR=str(data_dir), OUT_DIR=str(out_dir), WORKERS=str(a.workers),
               TEST_PREDICTIONS="0",
               **settings)
    extra = ["--lr", f"{a.lr:g}", "--batch-size", str(a.batch_size),
             "--max-epoch", str(a.epochs), "--max-update", str(updates),
             "--total-num-update", str(updates), "--warmup-updates", str(warmup),
             "--log-interval", "50", "--num-workers", "0"]
    if device == "cpu":
        extra.append("--cpu")
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(out_dir / "recipe.log", "a", encoding="utf-8") as log:
        proc = subprocess.run(["bash", str(ROOT / "recipes" / "glue" / f"{task}.sh"), *extra],
                              env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{task} {variant} seed {seed}: the recipe failed; see "
                         f"{out_dir / 'recipe.log'}")
    results = json.loads((out_dir / "results.json").read_text())
    dev = next(iter(results["dev"].values()))
    name = "MNLI-m" if task == "MNLI" else task
    predictions = read_predictions(out_dir / "dev_predictions" / f"{name}.tsv")
    gold = dev_rows(a.glue_dir, task).labels
    if len(predictions) != len(gold):
        raise SystemExit(f"{out_dir}: {len(predictions)} dev predictions for {len(gold)} rows")
    record = {
        "task": task, "variant": variant, "seed": seed, "metric": METRICS[task],
        "dev": dev, "value": dev[METRICS[task]],
        "hparams": {"lr": a.lr, "batch_size": a.batch_size, "epochs": a.epochs,
                    "warmup": a.warmup, "updates": updates},
        "encoder": os.path.basename(os.path.normpath(a.model_dir)), "device": device,
        "minutes": round((time.time() - start) / 60, 1),
        "predictions": predictions, "gold": gold,
        "settings": settings,
    }
    if not a.keep_checkpoints:
        shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    return record


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="a span-convert output folder")
    p.add_argument("--glue-dir", default=str(ROOT.parent / "shared" / "data" / "glue"))
    p.add_argument("--tasks", nargs="+", default=["MRPC", "STS-B", "CoLA"])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "glue_minilm.jsonl"))
    p.add_argument("--work-dir", default=str(ROOT / "runs" / "grid"))
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--warmup", type=float, default=0.06, help="share of updates")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--order", choices=("seed", "task"), default="seed",
                   help="seed: every task and variant of seed 1 first (a complete "
                   "comparison grows seed by seed); task: one task at a time")
    p.add_argument("--max-runs", type=int, help="stop after this many new runs")
    p.add_argument("--keep-checkpoints", action="store_true")
    a = p.parse_args(argv)
    device = a.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    done = {run_key(r) for r in read_results(a.results)}
    cells = [(t, v, s) for s in a.seeds for t in a.tasks for v in a.variants]
    if a.order == "task":
        cells.sort(key=lambda c: (a.tasks.index(c[0]), c[2], a.variants.index(c[1])))
    todo = [c for c in cells if (c[0], c[1], c[2], a.lr) not in done]
    print(f"{len(cells) - len(todo)} of {len(cells)} runs already in {a.results}")
    for n, (task, variant, seed) in enumerate(todo):
        if a.max_runs is not None and n >= a.max_runs:
            break
        print(f"[{time.strftime('%H:%M:%S')}] {task} {variant} seed {seed} ...", flush=True)
        record = run_one(a, task, variant, seed, device)
        os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
        with open(a.results, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        print(f"    {record['metric']} {record['value']:.2f} ({record['minutes']} min)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
