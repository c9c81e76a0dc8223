"""--segmentation chunker: its CoNLL-2000 scores, its training time, and what it costs
in preprocessing against greedy segmentation (docs/PREPROCESS.md, "Chunker segmentation").

- chunk precision/recall/F1 on CoNLL-2000 test, with the POS tags of NLTK's tagger (what
  segmentation sees) and with the corpus's own tags (the usual benchmark setting);
- training time: the tagger run over train.txt plus the perceptron passes, in-process,
  without the cache;
- CoLA train (8,551 sentences) through ``span-preprocess binarize`` (GPT-2 BPE, span
  and token binaries), greedy vs chunker, each command its own process (start-up and, for
  the chunker, loading the cached model included), interleaved, median of ``--repeats``;
  and the in-process encode rate (sentences/s, no start-up) of both.

    .venv/bin/python benchmarks/chunker_speed.py --nltk-data ../shared/data/nltk_data
    .venv/bin/python benchmarks/chunker_speed.py --quick   # seconds: no training, 200 sentences
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import DATA, ROOT
from common import GPT2_BPE as BPE

BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))
QUICK_SENTENCES = 200  # of CoLA train and of CoNLL-2000 test, in --quick


def cola_sentences():
    lines = (DATA / "glue" / "CoLA" / "train.tsv").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[3] for line in lines]


def binarize(src, out, segmentation, workers, nltk_data):
    cmd = [BIN / "span-preprocess", "binarize", src, out / segmentation / "train",
           "--gpt2-encoder-json", BPE / "encoder.json", "--gpt2-vocab-bpe", BPE / "vocab.bpe",
           "--srcdict", BPE / "dict.txt", "--segmentation", segmentation, "--workers", workers]
    if segmentation == "chunker":
        cmd += ["--nltk-data", nltk_data]
    start = time.perf_counter()
    subprocess.run([str(c) for c in cmd], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nltk-data", default=str(DATA / "nltk_data"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--quick", action="store_true",
                   help=f"a check in seconds: the cached model (trained only when there is "
                   f"none), {QUICK_SENTENCES} sentences, 1 worker, 1 repeat")
    args = p.parse_args()
    if args.quick:
        args.workers, args.repeats = [1], 1
    limit = QUICK_SENTENCES if args.quick else None

    from span_plugin.preprocess.segmentation import chunker as C
    from span_plugin.preprocess import make_encoder

    root = C.find_data(args.nltk_data)
    start = time.perf_counter()
    model = C.build(root, use_cache=args.quick)  # trains (and scores on test.txt)
    if args.quick:
        print(f"training: not timed (--quick: the cached model, {time.perf_counter() - start:.1f} s)")
    else:
        print(f"training: {model.train_seconds:.1f} s (tagging train.txt + {C.PASSES} passes); "
              f"with scoring test.txt: {time.perf_counter() - start:.1f} s")
    s = model.scores
    print(f"CoNLL-2000 test, tagger POS: P {s['precision']:.4f} R {s['recall']:.4f} "
          f"F1 {s['f1']:.4f} ({s['chunks']} chunks)")
    test = C.read_conll2000(os.path.join(root, C.TEST_FILE))[:limit]
    s = C.evaluate(model.chunker, test)
    print(f"CoNLL-2000 test{f' (first {limit} sentences)' if limit else ''}, corpus POS: "
          f"P {s['precision']:.4f} R {s['recall']:.4f} F1 {s['f1']:.4f}")
    C.build(root)  # the cache the commands below load

    sentences = cola_sentences()[:limit]
    for segmentation in ("greedy", "chunker"):
        enc = make_encoder(bpe="gpt2", encoder_json=str(BPE / "encoder.json"),
                           vocab_bpe=str(BPE / "vocab.bpe"), segmentation=segmentation,
                           nltk_data=root)
        start = time.perf_counter()
        for line in sentences:
            enc.encode(line)
        rate = len(sentences) / (time.perf_counter() - start)
        print(f"in-process encode, {segmentation}: {rate:,.0f} sentences/s")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = tmp / "cola.train.txt"
        src.write_text("\n".join(sentences) + "\n", encoding="utf-8")
        for workers in args.workers:
            times = {"greedy": [], "chunker": []}
            for _ in range(args.repeats):
                for segmentation in times:
                    times[segmentation].append(binarize(src, tmp, segmentation, workers, root))
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"span-preprocess binarize CoLA train ({len(sentences)} sentences), "
                  f"{workers} worker(s): greedy {med['greedy']:.1f} s "
                  f"({len(sentences) / med['greedy']:,.0f} sentences/s), chunker "
                  f"{med['chunker']:.1f} s ({len(sentences) / med['chunker']:,.0f} sentences/s)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
