"""Fine-tuning throughput on a GPU: the span model against plain RoBERTa.

One command on a GPU machine, a few minutes, no downloads. ``fairseq-train`` in fp16
(the recipes' fp16 flags) from random weights, batches of 32 long sentence pairs
(consecutive Wikipedia paragraphs, 321-384 tokens each with specials, GPT-2 BPE, greedy
n-gram spans from the packaged dictionary), for:

- ``span``  : task/criterion ``span_classification``, ``roberta_span_{base,large}``;
- ``plain`` : fairseq's ``sentence_prediction`` with ``roberta_{base,large}``;
- ``span+compile`` / ``plain+compile``: the span model with ``--compile
  --compile-mode reduce-overhead --length-multiple 64`` (``--sentence-head plain`` for
  plain), where the torch on the machine compiles; ``span+compile-default`` is the
  same without CUDA graphs;
- ``span-bf16`` / ``plain-bf16``: eager in bf16 (``--bf16``: no loss scaling) instead
  of fp16;
- ``+amp`` (e.g. ``span+compile+amp``): ``--amp`` (fp32 weights, autocast, no fp16
  weight copies) with ``--optimizer torch_adamw`` (every tensor in one fused step, one
  norm call) instead of fp16 and fairseq's per-tensor ``adam``; ``+fused``: fp16 with
  ``torch_adamw``;
- ``+fairseq`` (e.g. ``span+compile+amp+fairseq``): with fairseq's own update
  (``SPAN_PLUGIN_FAIRSEQ_UPDATE=1``) instead of the plugin's one-read update
  (``span_plugin/runtime/update_reads.py``): the "before" of that change.

For each run: words/s and updates/s (fairseq's own ``wps``/``ups`` of the logged
intervals after the first ones, which hold start-up and compilation), peak GPU memory
and mean SM utilisation over the same window (``nvidia-smi`` sampled every 100 ms),
and MFU: tokens/s x training FLOPs per token (6 x non-embedding parameters + 12 x
layers x H x T attention) / the card's peak, measured here by an fp16 matmul.

    python benchmarks/gpu_throughput.py --prepare DIR     # CPU: build the task folder
    python benchmarks/gpu_throughput.py [--data DIR] [--repeats 3]   # GPU: run, print, write RESULTS.md
    python benchmarks/gpu_throughput.py --quick           # CPU or GPU: a tiny model, seconds

Without a GPU (and without ``--quick``) it says so and exits 0. The figures go into
the section "GPU throughput (issue 40)" of ``benchmarks/RESULTS.md`` (``--results``),
with the device named.
"""

import argparse
import gzip
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from common import DATA, ROOT, encoder_flags
from common import GPT2_BPE as GPT2
from span_plugin.runtime.update_reads import OPT_OUT

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "RESULTS.md")
SECTION = "## GPU throughput (issue 40)"
MIN_TOKENS, MAX_TOKENS = 321, 384  # with <s> A </s> </s> B </s>: one 64-multiple bucket
FP16 = ["--fp16", "--fp16-init-scale", "4", "--threshold-loss-scale", "1", "--fp16-scale-window", "128"]
SIZES = {"base": (12, 768), "large": (24, 1024), "tiny": (2, 64)}
TINY = encoder_flags(encoder_embed_dim=64, encoder_ffn_embed_dim=128)


# ----------------------------------------------------------------------------------
# The task folder (CPU, from ../shared)


def paragraph_pairs(tokenizer, count, seed=0):
    """``count`` pairs of consecutive paragraphs of one Wikipedia article whose pair
    layout has MIN_TOKENS..MAX_TOKENS tokens; label 1 when B follows A, 0 when B
    is a later paragraph of the same article (a task, not a benchmark of accuracy)."""
    rng = random.Random(seed)
    pairs = []
    article = []
    path = os.path.join(DATA, "wikipedia", "wiki.AA.txt.gz")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            line = line.strip()
            if line:
                article.append((line, len(tokenizer.pieces(line)[0])))
                continue
            for i in range(1, len(article) - 1):  # article[0] is the title
                (a, na), (b, nb) = article[i], article[i + 1]
                if MIN_TOKENS <= na + nb + 4 <= MAX_TOKENS:
                    pairs.append({"sentence1": a, "sentence2": b, "label": str(rng.randint(0, 1))})
            article = []
            if len(pairs) >= count:
                break
    return pairs[:count]


def prepare(out, count=3200):
    """Write the long-pair task folder with ``span-preprocess table`` (GPT-2 BPE, greedy
    spans with the packaged dictionary): ``count`` training pairs, 128 for valid."""
    from span_plugin.tokenizers import build_tokenizer

    tokenizer = build_tokenizer("gpt2", encoder_json=os.path.join(GPT2, "encoder.json"),
                                vocab_bpe=os.path.join(GPT2, "vocab.bpe"))
    pairs = paragraph_pairs(tokenizer, count + 128)
    with tempfile.TemporaryDirectory() as tmp:
        for split, rows in (("train", pairs[:count]), ("valid", pairs[count:])):
            with open(os.path.join(tmp, f"{split}.jsonl"), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
        subprocess.run([
            os.path.join(os.path.dirname(sys.executable), "span-preprocess"), "table",
            "--out", out, "--name", "wiki-pairs", "--train", os.path.join(tmp, "train.jsonl"),
            "--valid", os.path.join(tmp, "valid.jsonl"), "--text-columns", "sentence1", "sentence2",
            "--label-column", "label", "--positive-label", "1",
            "--gpt2-encoder-json", os.path.join(GPT2, "encoder.json"),
            "--gpt2-vocab-bpe", os.path.join(GPT2, "vocab.bpe"),
            "--srcdict", os.path.join(GPT2, "dict.txt"), "--workers", "2",
        ], check=True)
    print(f"wrote {out}: {count} training pairs of {MIN_TOKENS}-{MAX_TOKENS} tokens")


# ----------------------------------------------------------------------------------
# Runs (GPU)


class SmiSampler:
    """``nvidia-smi`` every 100 ms in the background: (time, SM %, memory MiB)."""

    def __init__(self):
        self.samples = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
             "-lms", "100"], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                util, mem = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.time(), util, mem))

    def window(self, start, end):
        inside = [(u, m) for t, u, m in self.samples if start <= t <= end]
        if not inside:
            return None, None
        return statistics.mean(u for u, _ in inside), max(m for _, m in inside)

    def stop(self):
        self.proc.terminate()


def fairseq_train():
    """fairseq-train beside this Python (a venv not activated), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "fairseq-train")
    return beside if os.path.exists(beside) else (shutil.which("fairseq-train") or "fairseq-train")


def variant_args(variant, size, quick):
    """fairseq-train's task, model and precision flags of a variant (module docstring) at
    ``size`` (``tiny``: the base architecture made tiny); ``quick``: on the CPU, compiled
    variants with ``aot_eager``."""
    span = variant.startswith("span")
    compiled = "+compile" in variant
    if span or compiled:
        args = ["--task", "span_classification", "--criterion", "span_classification",
                "--arch", f"roberta_span_{'base' if size == 'tiny' else size}"]
        if not span:
            args += ["--sentence-head", "plain"]
    else:
        args = ["--task", "sentence_prediction", "--criterion", "sentence_prediction",
                "--arch", f"roberta_{'base' if size == 'tiny' else size}"]
    if compiled:
        args += ["--compile", "--length-multiple", "64"]
        args += [] if variant.endswith("-default") else ["--compile-mode", "reduce-overhead"]
    if size == "tiny":
        args += TINY
    amp = "+amp" in variant
    if quick:
        args += ["--cpu"] + (["--amp"] if amp else [])
        if compiled:
            args += ["--compile-backend", "aot_eager"]
    else:
        args += ["--amp"] if amp else ["--bf16"] if variant.endswith("-bf16") else FP16
    args += ["--optimizer", "torch_adamw" if amp or "+fused" in variant else "adam"]
    return args


def training_args(batch):
    """The fairseq-train flags every variant shares: the plugin, the two-class pair task,
    ``batch`` sentences an update, Adam's settings of the recipes (which Adam: the
    variant's), 2 loader workers."""
    return ["--user-dir", os.path.join(ROOT, "span_plugin"), "--num-classes", "2",
            "--init-token", "0", "--separator-token", "2", "--max-positions", "512",
            "--batch-size", str(batch), "--required-batch-size-multiple", "1",
            "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-06",
            "--lr", "1e-05", "--dropout", "0.1", "--attention-dropout", "0.1",
            "--weight-decay", "0.1", "--clip-norm", "0.0", "--num-workers", "2", "--seed", "1"]


def run_variant(data, variant, size, updates, batch, quick):
    """One fairseq-train run; returns its figures (or ``{"error": ...}``)."""
    args = variant_args(variant, size, quick)
    interval = max(1, updates // 8)
    save = tempfile.mkdtemp(prefix="gpu_throughput_")
    command = [
        fairseq_train(), data, *args, *training_args(batch),
        "--lr-scheduler", "polynomial_decay", "--total-num-update", str(updates),
        "--warmup-updates", str(max(1, updates // 16)), "--max-update", str(updates),
        "--disable-validation", "--no-save", "--save-dir", save,
        "--log-format", "json", "--log-interval", str(interval),
    ]
    env = dict(os.environ)
    env.pop(OPT_OUT, None)
    if "+fairseq" in variant:
        env[OPT_OUT] = "1"
    smi = None if quick else SmiSampler()
    started = time.time()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    ended = time.time()
    if smi:
        smi.stop()
    shutil.rmtree(save, ignore_errors=True)
    logs = []
    for line in proc.stdout.splitlines() + proc.stderr.splitlines():
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \| INFO \| train_inner \| (\{.*\})", line)
        if m:
            stamp = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
            logs.append((stamp, json.loads(m.group(2))))
    if proc.returncode != 0 or len(logs) < 3:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
        return {"error": f"exit {proc.returncode}, {len(logs)} logged intervals:\n{tail}"}
    steady = logs[2:]  # the first intervals hold start-up, warm-up and compilation
    figures = {
        "wps": statistics.median(float(s["wps"]) for _, s in steady),
        "ups": statistics.median(float(s["ups"]) for _, s in steady),
        "wpb": statistics.median(float(s["wpb"]) for _, s in steady),
        "seconds": ended - started,
        "first_log_s": logs[0][0] - started,
    }
    if smi:
        # From the end of the second logged interval to the last log line (1 s grain).
        figures["sm"], figures["mem_mib"] = smi.window(logs[1][0] + 1, logs[-1][0])
    return figures


def combine(rounds):
    """One row per (size, variant): the median of each figure over the rounds that ran
    it (an error only when every round failed), with ``ratio``: the median over rounds
    of span / plain words/s measured in the same round, and ``runs``: how many."""
    rows = {}
    for key in dict.fromkeys(k for runs in rounds for k in runs):
        ok = [runs[key] for runs in rounds if key in runs and "error" not in runs[key]]
        if not ok:
            rows[key] = next(runs[key] for runs in rounds if key in runs)
            continue
        rows[key] = {f: statistics.median(r[f] for r in ok if r.get(f) is not None)
                     for f in ok[0] if any(r.get(f) is not None for r in ok)}
        rows[key]["runs"] = len(ok)
        size, variant = key
        partner = (size, variant.replace("span", "plain", 1))
        if variant.startswith("span") and partner != key:
            ratios = [runs[key]["wps"] / runs[partner]["wps"] for runs in rounds
                      if "wps" in runs.get(key, {}) and "wps" in runs.get(partner, {})]
            if ratios:
                rows[key]["ratio"] = statistics.median(ratios)
    return rows


def flops_per_token(layers, dim, seq_len):
    """Training FLOPs per token: 6 x non-embedding weights (forward + backward) and
    the attention products (12 L H T)."""
    return 6 * 12 * layers * dim * dim + 12 * layers * dim * seq_len


def peak_tflops():
    """Measured fp16 matmul throughput of this GPU (TFLOP/s), median of 10."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    times = []
    for _ in range(13):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * 8192 ** 3 / statistics.median(times[3:]) / 1e12


def report(rows, device, peak, batch, updates, seq_len):
    """Markdown table of the runs, with span/plain ratios per size and mode."""
    lines = [
        f"Device: {device}; measured fp16 matmul peak {peak:.0f} TFLOP/s. Batch {batch} pairs, "
        f"{updates} updates per run, figures are medians of fairseq's logged intervals after "
        f"the first two; SM utilisation is nvidia-smi's mean over the same window; memory is "
        f"nvidia-smi's peak (the caching allocator included). MFU = words/s x FLOPs per token "
        f"(6 x 12 L H^2 + 12 L H T, T = {seq_len}) / the measured peak.",
        "",
        "| size | model | runs | words/s | updates/s | SM % | peak MiB | MFU % | span / plain words/s | first log (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (size, variant), r in rows.items():
        if "error" in r:
            lines.append(f"| {size} | {variant} | 0 | failed: {r['error'].splitlines()[0][:80]} | | | | | | |")
            continue
        layers, dim = SIZES[size]
        mfu = r["wps"] * flops_per_token(layers, dim, seq_len) / (peak * 1e12) * 100 if peak else float("nan")
        ratio = f"{r['ratio']:.3f}" if "ratio" in r else ""
        sm = f"{r['sm']:.0f}" if r.get("sm") is not None else "n/a"
        mem = f"{r['mem_mib']:.0f}" if r.get("mem_mib") is not None else "n/a"
        lines.append(f"| {size} | {variant} | {r['runs']} | {r['wps']:,.0f} | {r['ups']:.2f} | {sm} | {mem} | "
                     f"{mfu:.1f} | {ratio} | {r['first_log_s']:.0f} |")
    return "\n".join(lines)


def write_results(path, text, command):
    """Replace (or append) the opening of the GPU section of the results file ``path``
    (up to its first subsection: earlier runs' notes are kept) with ``text``."""
    with open(path, encoding="utf-8") as f:
        body = f.read()
    section = f"{SECTION}\n\nTaken {time.strftime('%Y-%m-%d')} with\n\n    {command}\n\n{text}\n"
    if SECTION in body:
        head, rest = body.split(SECTION, 1)
        ends = [i for i in (rest.find("\n## "), rest.find("\n### ")) if i >= 0]
        body = head + section + (rest[min(ends) + 1:] if ends else "")
    else:
        body = body.rstrip("\n") + "\n\n" + section
    with open(path, "w", encoding="utf-8") as f:
        f.write(body)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", metavar="DIR", help="build the task folder in DIR and stop")
    parser.add_argument("--data", default=os.path.join(ROOT, ".gpu", "wiki-pairs"), help="task folder")
    parser.add_argument("--sizes", nargs="+", default=["base", "large"], choices=["base", "large"])
    parser.add_argument("--variants", nargs="+",
                        default=["span", "plain", "span+compile", "plain+compile", "span+compile-default"])
    parser.add_argument("--updates", type=int, default=120)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds over the variants (span, plain, span, plain, ...): figures "
                        "are medians over the rounds, the ratios medians of per-round ratios")
    parser.add_argument("--budget", type=float, default=420, help="seconds: skip runs after it")
    parser.add_argument("--results", default=RESULTS, help="RESULTS.md to write ('' for none)")
    parser.add_argument("--quick", action="store_true", help="tiny model on the CPU: seconds")
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare)
        return
    import torch

    if not args.quick and not torch.cuda.is_available():
        print("gpu_throughput: no GPU on this machine (torch.cuda.is_available() is False): "
              "nothing to measure. Run it on a GPU machine; --quick checks it on the CPU.")
        return
    if not os.path.isdir(args.data):
        prepare(args.data, count=64 if args.quick else 3200)
    if args.quick:
        # span+compile is left out: tests/test_compile.py runs fairseq-train --compile
        sizes, updates, batch, variants = ["tiny"], 6, 4, ["span", "plain", "span+amp"]
        device, peak = "CPU (quick check, no figures)", 0.0
    else:
        sizes, updates, batch, variants = args.sizes, args.updates, args.batch, args.variants
        device, peak = torch.cuda.get_device_name(0), peak_tflops()
    print(f"{device}: peak {peak:.0f} TFLOP/s; torch {torch.__version__}", flush=True)
    started = time.time()
    rounds = []
    order = [(s, v) for s in sizes for v in variants if s == sizes[0] or "+compile" not in v]
    for round_ in range(1 if args.quick else args.repeats):
        runs = {}
        for size, variant in order:
            if time.time() - started > args.budget:
                print(f"skipped {size} {variant} (round {round_ + 1}): over the {args.budget:.0f} s budget",
                      flush=True)
                continue
            runs[(size, variant)] = run_variant(args.data, variant, size, updates, batch, args.quick)
            print(size, variant, round_ + 1, json.dumps(runs[(size, variant)]), flush=True)
        rounds.append(runs)
    rows = combine(rounds)
    table = report(rows, device, peak, batch, updates, (MIN_TOKENS + MAX_TOKENS) // 2)
    print(table)
    if args.quick:
        failed = [k for k, r in rows.items() if "error" in r]
        print("quick check: " + ("failed: " + ", ".join(map(str, failed)) if failed else "every run trained"))
        sys.exit(1 if failed else 0)
    if args.results:
        write_results(args.results, table, "python benchmarks/gpu_throughput.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
