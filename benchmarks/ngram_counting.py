"""N-gram dictionary building: throughput and peak memory at several corpus sizes.

Each size is a Zipf-distributed synthetic corpus (100k word types, exponent 1.1, lines
of 5-40 words) written to a temp dir, counted with n = 2..5 and min_count 11 (the
paper's threshold) in a fresh process, so the peak memory of each size is its own.
Memory is reported as the peak resident set (VmHWM) of the counting process minus its
resident set just before counting (the interpreter, numpy and regex), and the
largest peak among its worker processes.

    .venv/bin/python benchmarks/ngram_counting.py --sizes 5e6,20e6,50e6,100e6 --workers 2
    .venv/bin/python benchmarks/ngram_counting.py --quick   # seconds: a check that it runs

The last line is the headline: tokens per second (wall clock) at the largest size. CPU
seconds (the process and its workers) are printed too: on a shared machine they show
the throughput that contention from other jobs hides.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np


def _letters(i):
    out = ""
    while True:
        i, r = divmod(i, 26)
        out = chr(97 + r) + out
        if i == 0:
            return out


def make_corpus(path, tokens, vocab=100_000, a=1.1, seed=0):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** a
    p /= p.sum()
    # letters only: GPT-2's pre-tokenizer would split letters from digits
    words = np.array([_letters(i) for i in range(vocab)], dtype=object)
    step = 2_000_000
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, tokens, step):
            n = min(step, tokens - start)
            ids = rng.choice(vocab, size=n, p=p)
            lens = rng.integers(5, 41, size=n // 5 + 2)
            ends = np.cumsum(lens)
            seps = np.full(n, " ", dtype=object)
            seps[ends[ends <= n] - 1] = "\n"
            seps[-1] = "\n"
            parts = np.empty(2 * n, dtype=object)
            parts[0::2] = words[ids]
            parts[1::2] = seps
            f.write("".join(parts.tolist()))


def _vm(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _cpu():
    """User + system CPU seconds of this process and its finished children (the pool's
    workers): a figure that CPU contention from other jobs does not inflate."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def count_once(path, workers, min_count):
    # The counter needs only numpy and regex: the preprocessing layer loads neither torch
    # nor fairseq, which would dominate the memory figures.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from span_plugin.preprocess.segmentation.ngrams import NgramCounting, count_ngrams

    assert "torch" not in sys.modules and "fairseq" not in sys.modules

    base = _vm("VmRSS")
    cpu0 = _cpu()
    t = time.perf_counter()
    res = count_ngrams([path], NgramCounting(min_count=min_count), workers=workers)
    dt = time.perf_counter() - t
    return {"seconds": dt, "cpu_seconds": _cpu() - cpu0, "tokens": res.corpus_tokens,
            "ngrams": len(res.items),
            "rss_base_mb": base / 2**20, "peak_above_base_mb": (_vm("VmHWM") - base) / 2**20,
            "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="5e6,20e6,50e6")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--min-count", type=int, default=11)
    ap.add_argument("--scale-min-count", action="store_true",
                    help="min count grows with the corpus (min_count * tokens / 5M), so about "
                    "the same number of n-grams is kept at every size: the memory that is "
                    "left is the counter's own")
    ap.add_argument("--tmp-dir")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="seconds: 20k tokens, 1 worker")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.workers, args.min_count = "2e4", 1, 2
    if args.one:
        print(json.dumps(count_once(args.one, args.workers, args.min_count)))
        return
    print(f"machine: {os.cpu_count()} cores, workers={args.workers}, python {sys.version.split()[0]}")
    print("| corpus tokens | min count | seconds | tokens/s | CPU seconds | tokens per CPU-second | "
          "n-grams kept | main peak above base (MB) | worker peak RSS (MB) | file size (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    last = None
    with tempfile.TemporaryDirectory(dir=args.tmp_dir) as tmp:
        for size in [int(float(s)) for s in args.sizes.split(",")]:
            path = os.path.join(tmp, f"zipf{size}.txt")
            make_corpus(path, size)
            mc = max(1, round(args.min_count * size / 5e6)) if args.scale_min_count else args.min_count
            out = subprocess.run([sys.executable, __file__, "--one", path, "--workers",
                                  str(args.workers), "--min-count", str(mc)],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            mb = os.path.getsize(path) / 2**20
            os.remove(path)
            print(f"| {r['tokens']:,} | {mc} | {r['seconds']:.1f} | {r['tokens'] / r['seconds']:,.0f} "
                  f"| {r['cpu_seconds']:.1f} | {r['tokens'] / r['cpu_seconds']:,.0f} "
                  f"| {r['ngrams']:,} | {r['peak_above_base_mb']:.0f} | "
                  f"{r['worker_peak_mb']:.0f} | {mb:.0f} |", flush=True)
            last = r
    print(f"ngram counting throughput: {last['tokens'] / last['seconds']:,.0f} tokens/s "
          f"at {last['tokens']:,} tokens ({args.workers} workers)")


if __name__ == "__main__":
    main()
