"""Resumable CoNLL-2003 grid: token head vs token-level SF head vs span labeling.

Every (variant, seed) run goes through recipes/ner/conll2003.sh with one set of
hyperparameters for all variants and is appended, when finished, as one JSON line
(dev and test P/R/F1 of checkpoint_best.pt, the decoding, settings, minutes) to the
results file (committed to the repo). The checkpoint is chosen by dev F1, so dev figures
are optimistic; test is scored once, on the chosen checkpoint. A relaunch skips what the file holds and resumes an
interrupted run from its checkpoint_last.pt, as experiments/glue_grid.py does.

Variants:
    token          span_tagging, a linear layer per token (the baseline), argmax tags
    sf             span_tagging, the token-level Span Fine-tuning head (paper's Table 8),
                   argmax tags
    span           span_labeling, spans of up to 8 words, every candidate in the loss,
                   flat decoding (best non-overlapping spans)
    token-viterbi  token with --token-decoding viterbi (the best well-formed IOB2 tags):
                   does the span head's gain survive a well-formed tagger?
    sf-viterbi     sf with --token-decoding viterbi

The decoding of a tagging variant is a fairseq-train flag: it sets the validation F1 that
picks the checkpoint, and span-predict then scores dev and test with it. token and sf
keep argmax, what their first records (made before Viterbi existed) used.

    python experiments/ner_grid.py --model-dir models/minilm --seeds 1 2 3
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from grid_lib import (
    DATA, GPT2_BPE, ROOT, mean_sd, model_flags, read_results, resolve_device, run_grid, run_recipe,
    trained_on)

VARIANTS = {
    "token": {"HEAD": "token"},
    "sf": {"HEAD": "sf"},
    "span": {"HEAD": "span", "MAX_SPAN_WORDS": "8", "NEGATIVE_SAMPLING": "0"},
    "token-viterbi": {"HEAD": "token"},
    "sf-viterbi": {"HEAD": "sf"},
}
# --token-decoding of the tagging variants (span labeling decodes flat spans).
TOKEN_DECODING = {"token": "argmax", "sf": "argmax", "token-viterbi": "viterbi",
                  "sf-viterbi": "viterbi"}


def run_key(r):
    return (r["variant"], r["seed"], r["hparams"]["lr"], r["hparams"]["epochs"])


def run_one(args, variant, seed, device):
    """Run the recipe for one cell; returns its result record."""
    work = Path(args.work_dir).resolve()
    model = os.path.basename(os.path.normpath(args.model_dir)) if args.model_dir else "scratch"
    out_dir = work / "runs" / f"{model}-{variant}-lr{args.lr:g}-e{args.epochs}-s{seed}"
    data_dir = Path(args.data_dir).resolve() if args.data_dir else work / "data" / model
    env = dict(CONLL_DIR=Path(args.conll_dir).resolve(), SEED=seed, DATA_DIR=data_dir,
               OUT_DIR=out_dir, WORKERS=args.workers, LR=f"{args.lr:g}", BATCH_SIZE=args.batch_size,
               EPOCHS=args.epochs, **VARIANTS[variant])
    if args.model_dir:
        env["MODEL_DIR"] = Path(args.model_dir).resolve()
    else:  # the recipe's default would be the packaged MiniLM
        env["BPE_DIR"] = Path(args.bpe_dir).resolve()
        env["FROM_SCRATCH"] = 1
    decoding = (["--token-decoding", TOKEN_DECODING[variant]] if variant in TOKEN_DECODING
                else [])
    extra = ["--log-interval", "50", "--num-workers", "0", *decoding, *args.extra]
    if device == "cpu":
        extra.append("--cpu")
    minutes = run_recipe("recipes/ner/conll2003.sh", env, extra, out_dir,
                         f"{variant} seed {seed}")
    scored = json.loads((out_dir / "results.json").read_text())
    results = scored["dev"]
    used = scored.get("decoding") or {}
    if variant in TOKEN_DECODING and used.get("token_decoding") != TOKEN_DECODING[variant]:
        raise SystemExit(f"{variant} seed {seed}: span-predict decoded with {used}, not "
                         f"{TOKEN_DECODING[variant]}; see {out_dir / 'results.json'}")
    record = {
        "variant": variant, "seed": seed, "dev": results["valid"], "test": results["test"],
        "dev_f1": results["valid"]["f1"], "test_f1": results["test"]["f1"], "decoding": used,
        "hparams": {"lr": args.lr, "batch_size": args.batch_size, "epochs": args.epochs,
                    "extra": args.extra},
        "encoder": model, "device": device, "settings": VARIANTS[variant],
        "minutes": minutes, **trained_on(data_dir, out_dir / "checkpoints" / "checkpoint_best.pt"),
    }
    if not args.keep_checkpoints:
        shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    return record


def summary(records):
    """Mean and spread of dev and test F1 per variant, as printable lines."""
    lines = []
    for variant in VARIANTS:
        rows = [r for r in records if r["variant"] == variant]
        if not rows:
            continue
        parts = []
        for key in ("dev_f1", "test_f1"):
            mean, sd = mean_sd([r[key] for r in rows])
            parts.append(f"{key} {mean:.2f} +- {sd:.2f}")
        lines.append(f"{variant:>6}: {len(rows)} seeds, " + ", ".join(parts))
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", help="a span-convert output folder (WordPiece encoder); "
                   "without it: GPT-2 BPE and a model trained from scratch (smoke runs)")
    p.add_argument("--bpe-dir", default=str(GPT2_BPE))
    p.add_argument("--conll-dir", default=str(DATA / "conll2003"))
    p.add_argument("--data-dir", help="the tagging folder, prepared there when missing "
                   "[WORK_DIR/data/<model>]")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "ner_minilm.jsonl"))
    p.add_argument("--work-dir", default=str(ROOT / "runs" / "ner_grid"))
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--max-runs", type=int, help="stop after this many new runs")
    p.add_argument("--keep-checkpoints", action="store_true")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="arguments for fairseq-train, last (smoke runs: --max-update 2 ...)")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    cells = {(v, s, args.lr, args.epochs): (v, s) for s in args.seeds for v in args.variants}
    run_grid(cells, {run_key(r) for r in read_results(args.results)},
             lambda c: run_one(args, *c, device), args.results, args.max_runs,
             name=lambda c: f"{c[0]} seed {c[1]}",
             show=lambda r: f"dev F1 {r['dev_f1']:.2f}, test F1 {r['test_f1']:.2f}",
             flags=model_flags(args.model_dir))
    for line in summary(read_results(args.results)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
