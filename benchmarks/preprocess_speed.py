"""Span preprocessing speed against fairseq's own pipeline, side by side in one run.

For each corpus (SST-2 train sentences; a corpus of at least 10M GPT-2 tokens made of
WikiText-2 valid/test and every GLUE input field, repeated), with the same number of
workers:

- fairseq: ``multiprocessing_bpe_encoder.py --keep-empty`` (RoBERTa's GLUE recipe) then
  ``fairseq-preprocess --only-source --srcdict dict.txt`` -- two processes, as the recipe;
- ours: ``span-preprocess binarize`` with greedy segmentation and the packaged
  dictionary: GPT-2 BPE + spans + token and span binaries, one process;
- ours without spans (``--segmentation none``), to show what segmentation itself costs.

Every command runs as its own process (start-up included, as a user runs them); runs
are interleaved and the median over ``--repeats`` is reported. The last line is the
headline: our time over fairseq's on the large corpus (target: at most 1.2).

    .venv/bin/python benchmarks/preprocess_speed.py --workers 2 --repeats 3
    .venv/bin/python benchmarks/preprocess_speed.py --quick   # seconds: a check that it runs
"""

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
from pathlib import Path

from common import DATA, ROOT
from common import GPT2_BPE as BPE
from timing import timed_command

BIN = Path(sys.executable).parent
# fairseq's script, found without importing fairseq (seconds) into this process
MP_BPE = (Path(importlib.util.find_spec("fairseq").submodule_search_locations[0])
          / "examples" / "roberta" / "multiprocessing_bpe_encoder.py")
QUICK_LINES = 300  # lines of the corpus in --quick
QUICK_GLUE = ("RTE",)  # the GLUE task --quick reads (a small one)


def sst2(path, max_lines=None):
    with open(DATA / "glue" / "SST-2" / "train.tsv", encoding="utf-8") as f:
        next(f)
        lines = [line.split("\t")[0] for line in f][:max_lines]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def big(path, min_tokens, max_lines=None, glue_tasks=None):
    """WikiText-2 valid/test + GLUE input fields, repeated to at least min_tokens BPE
    tokens (estimated at 1.3 tokens per whitespace word, then counted exactly by the
    runs themselves); the first ``max_lines`` of one pass when given (--quick)."""
    sys.path.insert(0, str(ROOT))
    from corpora import glue_sentences

    text = []
    for name in ("wiki.valid.tokens", "wiki.test.tokens"):
        text += (DATA / "wikitext-2" / name).read_text(encoding="utf-8").splitlines()
    text += list(glue_sentences(str(DATA / "glue"), glue_tasks))
    if max_lines:
        text = text[:max_lines // 2] + text[-(max_lines // 2):]  # Wikipedia and GLUE lines
    words = sum(len(t.split()) for t in text)
    reps = 1 if max_lines else max(1, -(-min_tokens // int(words * 1.3)))
    path.write_text(("\n".join(text) + "\n") * reps, encoding="utf-8")


def fairseq_pipeline(src, work, workers):
    bpe = work / "fs.bpe"
    t1 = timed_command([sys.executable, MP_BPE, "--encoder-json", BPE / "encoder.json",
                "--vocab-bpe", BPE / "vocab.bpe", "--inputs", src, "--outputs", bpe,
                "--workers", workers, "--keep-empty"])
    t2 = timed_command([BIN / "fairseq-preprocess", "--only-source", "--trainpref", bpe, "--destdir",
                work / "fs", "--srcdict", BPE / "dict.txt", "--workers", workers])
    return t1, t2


def ours(src, work, workers, segmentation="greedy"):
    return timed_command([BIN / "span-preprocess", "binarize", src, work / f"ours_{segmentation}" / "train",
                  "--gpt2-encoder-json", BPE / "encoder.json", "--gpt2-vocab-bpe",
                  BPE / "vocab.bpe", "--srcdict", BPE / "dict.txt", "--workers", workers,
                  "--segmentation", segmentation])


def tokens_in(work):
    sys.path.insert(0, str(ROOT))
    from span_plugin.preprocess.binary.indexed import IndexedReader

    ds = IndexedReader(str(work / "fs" / "train"))
    assert (work / "fs" / "train.bin").read_bytes() == \
        (work / "ours_greedy" / "train.bin").read_bytes(), "token binaries differ"
    return int(ds.sizes.sum() - len(ds)), len(ds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-tokens", type=float, default=10e6)
    ap.add_argument("--tmp-dir")
    ap.add_argument("--quick", action="store_true",
                    help=f"seconds: {QUICK_LINES} lines of the second corpus, 1 worker, 1 repeat")
    args = ap.parse_args()
    quick_lines = QUICK_LINES if args.quick else None
    if args.quick:
        args.workers, args.repeats = 1, 1
    print(f"machine: {os.cpu_count()} cores, workers={args.workers}, repeats={args.repeats} "
          f"(median), python {sys.version.split()[0]}")
    print("| corpus | lines | BPE tokens | fairseq BPE (s) | fairseq-preprocess (s) | "
          "fairseq total (s) | ours: BPE+spans+binarize (s) | ours, no spans (s) | "
          "ours / fairseq | spans cost (greedy / none) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratio = None
    with tempfile.TemporaryDirectory(dir=args.tmp_dir) as tmp:
        # --quick: the large corpus's recipe only (the one that reads the GLUE files)
        for name in ("SST-2 train", "WikiText-2+GLUE x N")[args.quick:]:
            work = Path(tmp) / name.split()[0]
            work.mkdir()
            src = work / "input.txt"
            if name.startswith("SST"):
                sst2(src, quick_lines)
            else:
                big(src, int(args.min_tokens), quick_lines, QUICK_GLUE if args.quick else None)
            runs = {"bpe": [], "pre": [], "ours": [], "none": []}
            for _ in range(args.repeats):
                t1, t2 = fairseq_pipeline(src, work, args.workers)
                runs["bpe"].append(t1)
                runs["pre"].append(t2)
                runs["ours"].append(ours(src, work, args.workers))
                runs["none"].append(ours(src, work, args.workers, "none"))
            med = {k: statistics.median(v) for k, v in runs.items()}
            fs = statistics.median(b + p for b, p in zip(runs["bpe"], runs["pre"]))
            ntok, nlines = tokens_in(work)
            ratio = med["ours"] / fs
            print(f"| {name} | {nlines:,} | {ntok:,} | {med['bpe']:.1f} | {med['pre']:.1f} | "
                  f"{fs:.1f} | {med['ours']:.1f} | {med['none']:.1f} | {ratio:.2f} | "
                  f"{med['ours'] / med['none']:.2f} |", flush=True)
    print(f"span preprocessing time / fairseq BPE+preprocess time: {ratio:.2f} "
          f"({ntok / 1e6:.1f}M tokens, {args.workers} workers)")


if __name__ == "__main__":
    main()
