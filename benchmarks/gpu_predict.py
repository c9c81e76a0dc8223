"""Prediction on a GPU (issue 69, part 4): the portable predictor of an exported span
model (:func:`span_plugin.portable.load_model` on CUDA, its network cast to fp16 or
bf16, batches sorted by length) against a Hugging Face ``pipeline("text-classification")``
of the plain encoder (the same all-MiniLM-L6-v2 weights with ``BertForSequenceClassification``'s
head) in the same precision on the same card, fed the same rows sorted by length.
Rows/s at batch 32 and 256; the goal is portable / pipeline >= 1.0.

The model and rows are those of ``benchmarks/predict_large.py --model minilm`` (the
README's first run fine-tuned on SST-2 for 2 updates, exported with ``span-export hf``;
real GLUE and SQuAD text of mixed lengths), built on the CPU with ``--prepare``. Each
figure: the median of ``--repeats`` timed passes over all rows after one untimed pass of
the first 2 batches (CUDA's and the tokenizers' first-call set-up); the paths alternate
so a change in the card's clocks hits both.

    python benchmarks/gpu_predict.py --prepare              # CPU: the model and rows (minutes)
    python benchmarks/gpu_predict.py [--rows 20000] [--repeats 3]   # GPU: the table, gpu_predict.json
    python benchmarks/gpu_predict.py --quick                # CPU: tiny models, bf16, 64 rows (no figure)

Without CUDA (and without ``--quick`` or ``--prepare``) it says so and exits 0.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import predict_large  # noqa: E402  (the model and rows of the CPU benchmark)
from common import ROOT, minilm_dir  # noqa: E402

WORK = os.path.join(ROOT, "runs", "bench-predict-large")
RESULTS = os.path.join(HERE, "gpu_predict.json")
DTYPES = ("float16", "bfloat16")
BATCHES = (32, 256)


def rows_of(n, seed=1):
    """``n`` texts of the CPU benchmark's pool (real GLUE and SQuAD text), seeded order."""
    pool = predict_large.text_pool()
    random.Random(seed).shuffle(pool)
    return [pool[k % len(pool)] for k in range(n)]


def portable_path(folder, device, dtype):
    """``forward(rows, batch) -> logits``: the exported span model, its network in
    ``dtype`` on ``device``, batches sorted by length (results in input order)."""
    import torch

    from span_plugin.portable import load_model

    model = load_model(folder, device=device)
    model.network.to(dtype=getattr(torch, dtype))

    def forward(rows, batch):
        return model.predict_logits(rows, batch_size=batch, order="length")

    return forward


def pipeline_path(plain, device, dtype):
    """``forward(rows, batch)``: transformers' text-classification pipeline of the plain
    encoder ``plain`` (a BERT folder; its classifier freshly initialised: the weights do
    not change the timing), in ``dtype`` on ``device``, fed the rows sorted by length
    (longest first, as the portable path batches them) and answered in input order."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    tokenizer = AutoTokenizer.from_pretrained(plain)
    network = AutoModelForSequenceClassification.from_pretrained(
        plain, num_labels=2, dtype=getattr(torch, dtype)).to(device).eval()
    classify = pipeline("text-classification", model=network, tokenizer=tokenizer,
                        device=torch.device(device))

    def forward(rows, batch):
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        found = classify([rows[i] for i in order], batch_size=batch, truncation=True)
        out = [None] * len(rows)
        for i, result in zip(order, found):
            out[i] = result
        return out

    return forward


def timed(forward, rows, batch, device):
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    forward(rows, batch)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    return len(rows) / (time.perf_counter() - start)


def measure(folder, plain, rows, device, dtypes, batches, repeats):
    """``{dtype: {batch: {"portable": rows/s, "pipeline": rows/s}}}`` (medians)."""
    import torch

    out = {}
    for dtype in dtypes:
        paths = {"portable": portable_path(folder, device, dtype),
                 "pipeline": pipeline_path(plain, device, dtype)}
        out[dtype] = {}
        for batch in batches:
            for forward in paths.values():
                forward(rows[:2 * batch], batch)  # first-call set-up, untimed
            found = {name: [] for name in paths}
            with torch.inference_mode():
                for _ in range(repeats):
                    for name, forward in paths.items():
                        found[name].append(timed(forward, rows, batch, device))
            out[dtype][batch] = {name: round(statistics.median(v), 1)
                                 for name, v in found.items()}
            out[dtype][batch]["runs"] = found
        del paths
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def tiny_plain(work):
    """A randomly initialised 2-layer BERT folder with MiniLM's tokenizer: the quick check's
    plain encoder."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    out = os.path.join(work, "tiny-plain")
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def report(found, device, rows):
    print(f"{rows} rows (real GLUE/SQuAD text, mixed lengths), {device}; rows/s, medians")
    print(f"{'dtype':9s} {'batch':>5s} {'portable':>10s} {'pipeline':>10s} {'ratio':>6s}")
    for dtype, by_batch in found.items():
        for batch, r in by_batch.items():
            print(f"{dtype:9s} {batch:5d} {r['portable']:10.1f} {r['pipeline']:10.1f} "
                  f"{r['portable'] / r['pipeline']:6.2f}  (goal >= 1.0)")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default=WORK)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    p.add_argument("--device", default="cuda")
    p.add_argument("--results", default=RESULTS)
    p.add_argument("--prepare", action="store_true", help="CPU: build the model, then stop")
    p.add_argument("--quick", action="store_true",
                   help="CPU: tiny models, bf16, 64 rows, batches 4 and 16 (checks the code "
                        "paths; no figure is kept)")
    args = p.parse_args()
    if args.prepare:
        _, folder, _ = predict_large.prepare(args.work, "minilm")
        print(f"gpu_predict: {folder} ready; run this script on a GPU machine")
        return 0
    if args.quick:
        work = tempfile.mkdtemp(prefix="gpu_predict_")
        try:
            _, folder, _ = predict_large.prepare(work, "tiny")
            found = measure(folder, tiny_plain(work), rows_of(64), "cpu", ["bfloat16"],
                            [4, 16], 1)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        report(found, "cpu (quick check: no figure)", 64)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_predict: no GPU on this machine: nothing to measure (--quick checks "
              "the code paths on the CPU)")
        return 0
    folder = os.path.join(args.work, "minilm", "hf")
    if not os.path.isfile(os.path.join(folder, "files.json")):
        sys.exit(f"gpu_predict: {folder} is missing: run --prepare first (CPU)")
    found = measure(folder, minilm_dir(), rows_of(args.rows), args.device, args.dtypes,
                    args.batches, args.repeats)
    name = torch.cuda.get_device_name()
    report(found, name, args.rows)
    with open(args.results, "w", encoding="utf-8") as f:
        json.dump({"device": name, "torch": torch.__version__, "rows": args.rows,
                   "repeats": args.repeats, "found": found}, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
