"""Does Span Fine-tuning help? The powered grid, resumable.

Every run goes through the GLUE recipe (``experiments/glue_grid.py: run_glue``) on the
converted all-MiniLM-L6-v2 and is appended, when finished, to the results file
(``experiments/results/sf_minilm.jsonl``, committed), so the grid grows over sessions.
``experiments/sf_report.py`` turns it into ``experiments/RESULTS_SF_MINILM.md``.

Plan (in this order):
  1. learning rate: every variant of LR_VARIANTS on CoLA seed 0 (never reported) at each
     of 2e-5, 5e-5, 1e-4; a variant's rate is the one with the best CoLA dev MCC. The
     Figure-4 variants (nocat, dict20k, dict400k) change one setting of sf and take
     sf's rate.
  2. reported runs, seed-major (seed 1 of every cell, then seed 2, ...), so a partial
     grid is balanced:
       CoLA: plain, sf 10 seeds; random, chunker, cnn 5 seeds; nocat, dict20k,
             dict400k 3 seeds (the paper's Figure 4)
       MRPC: plain, sf 5 seeds
Variants:
  plain     the encoder's <s> feature and a classification head (HEAD=plain)
  sf        Span Fine-tuning: cnn-cnn span head, greedy segmentation with the packaged
            dictionary (Wikipedia, most frequent 100k n-grams)
  random    sf with random segmentation (greedy's span lengths, random boundaries)
  chunker   sf with NLTK chunker segmentation (the paper's "NLTK SF")
  cnn       the CNN head without segmentation (every word its own span)
  nocat     sf without the <s> feature beside the span vector
  dict20k, dict400k   sf with the most frequent 20k / 400k n-grams of the same counts

    python experiments/sf_grid.py --model-dir MODEL --dictionaries runs/dictionaries
    python experiments/sf_grid.py --model-dir MODEL --dictionaries ... --max-runs 4
"""

import argparse
import os
import sys
from pathlib import Path

from glue_grid import hparams, run_glue, train_rows
from grid_lib import DATA, GLUE, ROOT, model_flags, read_results, resolve_device, run_grid


SF = {"HEAD": "span", "SPAN_ENCODER": "cnn-cnn", "SEGMENTATION": "greedy"}
VARIANTS = {
    "plain": {"HEAD": "plain", "SEGMENTATION": "greedy"},
    "sf": SF,
    "random": dict(SF, SEGMENTATION="random"),
    "chunker": dict(SF, SEGMENTATION="chunker"),
    "cnn": dict(SF, SPAN_ENCODER="cnn"),
    "nocat": SF,
    "dict20k": SF,
    "dict400k": SF,
}
EXTRA = {"nocat": ["--no-span-cls-concat"]}
DICT_SIZES = {"dict20k": 20_000, "dict400k": 400_000}  # cut from the full counts
LR_VARIANTS = ("plain", "sf", "random", "chunker", "cnn")
LR_OF = {"nocat": "sf", "dict20k": "sf", "dict400k": "sf"}
LRS = (2e-5, 5e-5, 1e-4)
LR_SEED = 0
SEEDS = {("CoLA", "plain"): 10, ("CoLA", "sf"): 10, ("CoLA", "random"): 5,
         ("CoLA", "chunker"): 5, ("CoLA", "cnn"): 5, ("CoLA", "nocat"): 3,
         ("CoLA", "dict20k"): 3, ("CoLA", "dict400k"): 3,
         ("MRPC", "plain"): 5, ("MRPC", "sf"): 5}


def run_key(r):
    return (r["task"], r["variant"], r["seed"], r["hparams"]["lr"])


def chosen_lrs(records, lrs=LRS):
    """variant -> learning rate with the best CoLA dev MCC at seed 0 (ties: the smaller
    rate); None while a variant's selection runs are not all in."""
    out = {}
    for v in LR_VARIANTS:
        got = {r["hparams"]["lr"]: r["value"] for r in records
               if (r["task"], r["variant"], r["seed"]) == ("CoLA", v, LR_SEED)}
        out[v] = max(lrs, key=lambda lr: (got[lr], -lr)) if all(lr in got for lr in lrs) else None
    for v, base in LR_OF.items():
        out[v] = out[base]
    return out


def reported_cells(variants=VARIANTS, max_seed=None):
    """(task, variant, seed), seed-major."""
    top = max(SEEDS.values()) if max_seed is None else max_seed
    return [(t, v, s) for s in range(1, top + 1) for (t, v), n in SEEDS.items()
            if s <= n and v in variants]


def dictionary_for(variant, dictionaries, work):
    """NGRAMS for a variant: '' (the packaged default) or a cut of the full counts."""
    if variant not in DICT_SIZES:
        return ""
    from span_plugin.preprocess.segmentation.ngrams import cut_dictionary

    full = Path(dictionaries) / "wiki.bert.txt.gz"
    if not full.exists():
        raise SystemExit(f"{full}: the full WordPiece-scheme counts are missing; build them "
                         f"with experiments/build_dictionaries.sh")
    out = Path(work) / "dictionaries" / f"wiki.bert.top{DICT_SIZES[variant]}.txt.gz"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        cut_dictionary(full, str(out) + ".part.gz", DICT_SIZES[variant])
        os.replace(str(out) + ".part.gz", out)
    return str(out)


def run_cell(args, task, variant, seed, lr, device):
    work = Path(args.work_dir).resolve()
    ngrams = dictionary_for(variant, args.dictionaries, work)
    settings = dict(VARIANTS[variant], NGRAMS=ngrams)
    seg = settings["SEGMENTATION"] + (f"-{variant}" if ngrams else "")
    hp = hparams(lr, args.batch_size, args.epochs, args.warmup, train_rows(args.glue_dir, task))
    record = run_glue(task, settings, seed, hp, args.model_dir, args.glue_dir,
                      work / "data" / f"{task}-{seg}",
                      work / "runs" / f"{task}-{variant}-lr{lr:g}-s{seed}",
                      args.workers, device, extra=EXTRA.get(variant, []))
    return {"variant": variant, **record}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="a span-convert output folder")
    p.add_argument("--dictionaries", default=str(ROOT / "runs" / "dictionaries"),
                   help="folder with wiki.bert.txt.gz (experiments/build_dictionaries.sh)")
    p.add_argument("--glue-dir", default=str(GLUE))
    p.add_argument("--nltk-data", default=str(DATA / "nltk_data"))
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "sf_minilm.jsonl"))
    p.add_argument("--work-dir", default=str(ROOT / "runs" / "sf_grid"))
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--warmup", type=float, default=0.06, help="share of updates")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--max-runs", type=int, help="stop after this many new runs")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                   help="a part of the plan (a variant without its own rate needs sf)")
    p.add_argument("--lrs", nargs="+", type=float, default=list(LRS),
                   help="the rates tried on seed 0")
    p.add_argument("--max-seed", type=int, help="reported seeds 1..N only (smoke runs)")
    args = p.parse_args(argv)
    missing = {LR_OF[v] for v in args.variants if v in LR_OF} - set(args.variants)
    if missing:
        raise SystemExit(f"--variants: {', '.join(sorted(missing))} is needed for the "
                         f"learning rate of {', '.join(v for v in args.variants if v in LR_OF)}")
    os.environ.setdefault("NLTK_DATA", args.nltk_data)
    device = resolve_device(args.device)
    name = lambda c: f"{c[0]} {c[1]} seed {c[2]} lr {c[3]:g}"  # noqa: E731
    show = lambda r: f"{r['metric']} {r['value']:.2f}"  # noqa: E731
    run = lambda c: run_cell(args, *c, device)  # noqa: E731
    flags = model_flags(args.model_dir)

    # 1. learning-rate selection on seed 0
    select = {("CoLA", v, LR_SEED, lr): ("CoLA", v, LR_SEED, lr)
              for v in LR_VARIANTS if v in args.variants for lr in args.lrs}
    done = {run_key(r) for r in read_results(args.results)}
    run_grid(select, done, run, args.results, args.max_runs, name=name, show=show, flags=flags)
    new = len([k for k in select if k not in done])
    left = None if args.max_runs is None else args.max_runs - min(new, args.max_runs)
    lrs = chosen_lrs(read_results(args.results), args.lrs)
    if any(lrs[v] is None for v in args.variants) or left == 0:
        return 0
    print("learning rates (CoLA dev MCC, seed 0): "
          + ", ".join(f"{v} {lrs[v]:g}" for v in args.variants), flush=True)

    # 2. the reported runs
    cells = {(t, v, s, lrs[v]): (t, v, s, lrs[v])
             for t, v, s in reported_cells(args.variants, args.max_seed)}
    run_grid(cells, {run_key(r) for r in read_results(args.results)}, run, args.results, left,
             name=name, show=show, flags=flags)
    return 0


if __name__ == "__main__":
    sys.exit(main())
