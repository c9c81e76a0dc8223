"""Resumable GLUE grid: does the span head help a real pretrained encoder?

Every (task, variant, seed) run goes through the recipe (recipes/glue/<TASK>.sh) with
one set of hyperparameters for all variants, and is appended, when finished, as one
JSON line to the results file (committed to the repo). A relaunch skips what the file
already holds and resumes an interrupted run from its checkpoint_last.pt, so the grid
can grow over several sessions. ``experiments/glue_report.py`` turns the file into the
table, the plot and the paired tests.

Variants (the paper's Table 6 comparison and its controls):
    plain    the plain classification head (HEAD=plain): fairseq's roberta, or for a
             converted BERT with segment B and pooler, BERT's classifier in roberta_span
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
import sys
from pathlib import Path

from grid_lib import (
    GLUE, ROOT, model_flags, read_results, resolve_device, run_grid, run_recipe, trained_on)


VARIANTS = {
    "plain": {"HEAD": "plain", "SEGMENTATION": "greedy"},
    "sf": {"HEAD": "span", "SPAN_ENCODER": "cnn-cnn", "SEGMENTATION": "greedy"},
    "cnn": {"HEAD": "span", "SPAN_ENCODER": "cnn", "SEGMENTATION": "greedy"},
    "random": {"HEAD": "span", "SPAN_ENCODER": "cnn-cnn", "SEGMENTATION": "random"},
}
METRICS = {"CoLA": "mcc", "SST-2": "accuracy", "MRPC": "f1", "STS-B": "pearson",
           "QQP": "f1", "MNLI": "accuracy", "QNLI": "accuracy", "RTE": "accuracy",
           "WNLI": "accuracy", "SNLI": "accuracy"}


def run_key(r):
    return (r["task"], r["variant"], r["seed"], r["hparams"]["lr"])


def dev_rows(glue_dir, task):
    """(inputs, gold labels) of the task's dev split, as span-preprocess reads them."""
    from span_plugin.formats.glue import TASKS, read_split

    raw = "dev_matched" if task == "MNLI" else "dev"
    return read_split(TASKS[task], os.path.join(glue_dir, task, raw + ".tsv"), raw)


def train_rows(glue_dir, task):
    """How many rows of the task's train.tsv span-preprocess reads."""
    from span_plugin.formats.glue import TASKS, read_split

    return read_split(TASKS[task], os.path.join(glue_dir, task, "train.tsv"), "train").rows


def read_predictions(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()[1:]
    return [line.split("\t")[1] for line in lines]


def hparams(lr, batch_size, epochs, warmup, rows):
    updates = math.ceil(rows / batch_size) * epochs
    return {"lr": lr, "batch_size": batch_size, "epochs": epochs, "warmup": warmup,
            "updates": updates}


def run_glue(task, settings, seed, hp, model_dir, glue_dir, data_dir, out_dir, workers,
             device, keep_checkpoints=False, extra=()):
    """Fine-tune ``model_dir`` on ``glue_dir``/TASK through recipes/glue/TASK.sh with the
    recipe variables ``settings``, hyperparameters ``hp`` (see :func:`hparams`) and
    fairseq-train flags ``extra``; returns the run's record (dev metrics, dev predictions
    and gold labels)."""
    flags = list(extra)
    env = dict(GLUE_DIR=Path(glue_dir).resolve(), MODEL_DIR=Path(model_dir).resolve(),
               SEED=seed, DATA_DIR=data_dir, OUT_DIR=out_dir, WORKERS=workers,
               TEST_PREDICTIONS="0", **settings)
    warmup = int(round(hp["warmup"] * hp["updates"]))
    extra = ["--lr", f"{hp['lr']:g}", "--batch-size", hp["batch_size"],
             "--max-epoch", hp["epochs"], "--max-update", hp["updates"],
             "--total-num-update", hp["updates"], "--warmup-updates", warmup,
             "--log-interval", "50", "--num-workers", "0"]
    if device == "cpu":
        extra.append("--cpu")
    extra += flags
    minutes = run_recipe(f"recipes/glue/{task}.sh", env, extra, out_dir,
                         f"{task} {settings} seed {seed}")
    out_dir = Path(out_dir)
    results = json.loads((out_dir / "results.json").read_text())
    dev = next(iter(results["dev"].values()))
    name = "MNLI-m" if task == "MNLI" else task
    predictions = read_predictions(out_dir / "dev_predictions" / f"{name}.tsv")
    gold = dev_rows(glue_dir, task).labels
    if len(predictions) != len(gold):
        raise SystemExit(f"{out_dir}: {len(predictions)} dev predictions for {len(gold)} rows")
    facts = trained_on(data_dir, out_dir / "checkpoints" / "checkpoint_best.pt")
    if not keep_checkpoints:
        shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    return {"task": task, "metric": METRICS[task], "dev": dev, "value": dev[METRICS[task]],
            "seed": seed, "hparams": hp,
            "encoder": os.path.basename(os.path.normpath(model_dir)), "device": device,
            "minutes": minutes, "predictions": predictions, "gold": gold,
            "settings": settings, **({"flags": flags} if flags else {}), **facts}


def run_cell(args, task, variant, seed, device):
    """One cell of the grid: the task's data folder is shared by the variants that
    segment alike."""
    settings = VARIANTS[variant]
    work = Path(args.work_dir).resolve()
    hp = hparams(args.lr, args.batch_size, args.epochs, args.warmup, train_rows(args.glue_dir, task))
    record = run_glue(task, settings, seed, hp, args.model_dir, args.glue_dir,
                      work / "data" / f"{task}-{settings['SEGMENTATION']}",
                      work / "runs" / f"{task}-{variant}-lr{args.lr:g}-s{seed}",
                      args.workers, device, args.keep_checkpoints)
    return {"variant": variant, **record}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="a span-convert output folder")
    p.add_argument("--glue-dir", default=str(GLUE))
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
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    cells = [(t, v, s) for s in args.seeds for t in args.tasks for v in args.variants]
    if args.order == "task":
        cells.sort(key=lambda c: (args.tasks.index(c[0]), c[2], args.variants.index(c[1])))
    run_grid({(t, v, s, args.lr): (t, v, s) for t, v, s in cells},
             {run_key(r) for r in read_results(args.results)},
             lambda c: run_cell(args, *c, device), args.results, args.max_runs,
             name=lambda c: f"{c[0]} {c[1]} seed {c[2]}",
             show=lambda r: f"{r['metric']} {r['value']:.2f}", flags=model_flags(args.model_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
