"""span-predict on large files (issue 69 part 2): rows/s with batches sorted by length
(``--batch-order length``, the default) against batches in file order (``--batch-order
file``), and the peak resident memory of the command at 10,000 and 100,000 rows.

The rows are real text of mixed lengths: every input field of SST-2, CoLA and STS-B
train, QNLI dev and test (questions and sentences), and SQuAD 1.1 dev (questions and
contexts, the longest, cut to the model's positions as it was trained), read by the
project's own readers, mixed in a seeded order and repeated to the number of rows asked.
They are written as split ``bench`` (``raw/bench.input0``) of a copy of the model's own
task folder, which ``span-predict --data`` reads.

The model: a span model (the plugin's roberta_span) fine-tuned on SST-2 for 2 updates
(the weights do not change the timings), ``tiny`` (2 layers of 32: the text encoding
and the command's own work dominate) or ``minilm`` (all-MiniLM-L6-v2 converted, 6 layers
of 384: the network dominates), exported with ``span-export hf``; built once into
``--work``.

Each measurement is one ``span-predict --model DIR`` (or ``--checkpoint``) in a fresh
process, one thread (OMP_NUM_THREADS=1), its wall time from start to exit (model load
included), its CPU seconds (user + system) and peak resident set (``ru_utime``,
``ru_stime``, ``ru_maxrss`` of that child, from ``os.wait4``): on a loaded machine rows per
CPU-second is the figure that load moves least. The orders' output files are compared
byte for byte.

    .venv/bin/python benchmarks/predict_large.py                 # tiny, 10,000 and 100,000 rows
    .venv/bin/python benchmarks/predict_large.py --model minilm --rows 10000
    git archive COMMIT span_plugin | tar -x -C /tmp/before      # the code before, as order "before"
    .venv/bin/python benchmarks/predict_large.py --before /tmp/before
    .venv/bin/python benchmarks/predict_large.py --report        # the table of what is there
    .venv/bin/python benchmarks/predict_large.py --quick         # tiny, 300 rows, a temporary folder

Results go to ``--results`` (JSON, one entry per model, source, rows and order, with the
machine's load average); an entry already there is skipped, so a run resumes.
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

from common import DATA, GLUE, ROOT
from common import TINY_ROBERTA as TINY
from portable_inference import run  # a console script or command of this environment, checked

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
RESULTS = os.path.join(HERE, "predict_large.json")
ORDERS = ("length", "file")
SOURCES = (("SST-2", "train"), ("CoLA", "train"), ("STS-B", "train"), ("QNLI", "dev"),
           ("QNLI", "test"))


def text_pool():
    """Every text of :data:`SOURCES` and of SQuAD 1.1 dev, white space runs made one
    space, blank ones left out: a list of str of mixed lengths."""
    sys.path.insert(0, str(ROOT))
    from span_plugin.formats.glue import TASKS, read_split

    texts = []
    for task, split in SOURCES:
        rows = read_split(TASKS[task], os.path.join(GLUE, task, f"{split}.tsv"), split,
                          bad_rows="default")
        for column in rows.inputs:
            texts.extend(column)
    with open(os.path.join(DATA, "squad", "dev-v1.1.json"), encoding="utf-8") as f:
        for article in json.load(f)["data"]:
            for paragraph in article["paragraphs"]:
                texts.append(paragraph["context"])
                texts.extend(qa["question"] for qa in paragraph["qas"])
    texts = [re.sub(r"\s+", " ", t).strip() for t in texts]
    return [t for t in texts if t]


def bench_folder(work, data, rows):
    """A copy of the task folder ``data`` whose split ``bench`` holds ``rows`` texts of
    the pool, mixed in a seeded order (repeated when the pool is smaller)."""
    out = os.path.join(work, f"data-{rows}")
    path = os.path.join(out, "raw", "bench.input0")
    if os.path.isfile(path):
        return out
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(data, out)
    pool = text_pool()
    random.Random(1).shuffle(pool)
    with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as f:
        for k in range(rows):
            f.write(pool[k % len(pool)] + "\n")
    os.replace(path + ".tmp", path)
    return out


def prepare(work, model):
    """``(checkpoint, exported folder, task folder)`` of ``model`` in ``work``, built
    when missing."""
    base = os.path.join(work, model)
    checkpoint = os.path.join(base, "run", "checkpoint_last.pt")
    folder, data = os.path.join(base, "hf"), os.path.join(base, "data")
    if os.path.isfile(os.path.join(folder, "files.json")):
        return checkpoint, folder, data
    glue = os.path.join(work, "glue", "SST-2")  # 400 training rows are enough for 2 updates
    os.makedirs(glue, exist_ok=True)
    for split in ("train", "dev"):
        with open(os.path.join(GLUE, "SST-2", f"{split}.tsv"), encoding="utf-8") as f:
            lines = f.read().splitlines()[:401]
        with open(os.path.join(glue, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    train = ["--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--max-update", "2",
             "--save-dir", os.path.dirname(checkpoint), "--cpu", "--no-epoch-checkpoints",
             "--disable-validation", "--num-workers", "0", "--task", "span_classification",
             "--criterion", "span_classification", "--num-classes", "2", "--init-token", "0",
             "--separator-token", "2", "--shorten-method", "truncate",
             "--user-dir", os.path.join(ROOT, "span_plugin")]
    if model == "tiny":
        gpt2 = os.path.join(DATA, "gpt2_bpe")
        run("span-preprocess", "glue", "--task", "SST-2", "--glue-dir", os.path.dirname(glue),
            "--out", data, "--gpt2-encoder-json", os.path.join(gpt2, "encoder.json"),
            "--gpt2-vocab-bpe", os.path.join(gpt2, "vocab.bpe"), "--srcdict",
            os.path.join(gpt2, "dict.txt"), "--workers", "1")
        run("fairseq-train", data, "--arch", "roberta_span_base", *TINY, *train)
    else:  # the README's first run (recipes/glue: all-MiniLM-L6-v2, span head) on SST-2
        run("bash", os.path.join(ROOT, "recipes", "glue", "SST-2.sh"), "--max-update", "2",
            env={"GLUE_DIR": os.path.dirname(glue), "DATA_DIR": data,
                 "OUT_DIR": os.path.join(base, "recipe"), "TEST_PREDICTIONS": "0",
                 "NUM_GPUS": "0"})
        os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
        shutil.copy(os.path.join(base, "recipe", "checkpoints", "checkpoint_last.pt"),
                    checkpoint)
    run("span-export", "hf", checkpoint, "--out", folder, "--force")
    return checkpoint, folder, data


# span-predict from another checkout of the project (--before): its span_plugin first on
# the path, ahead of this environment's editable install.
FROM_CHECKOUT = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
                 "from span_plugin.cli.predict import main; sys.exit(main())")


def measure(source, path, data, order, out, before=None):
    """``{"wall_s", "peak_rss_mb", "rows"}`` of one span-predict in a fresh process;
    ``before``: the checkout whose span-predict to run instead (one from before
    ``--batch-order``: it batches in file order and reads the split whole)."""
    command = [os.path.join(BIN, "span-predict"), f"--{source}", path, "--data", data,
               "--split", "bench", "--output", out]
    if before:
        command[:1] = [sys.executable, "-c", FROM_CHECKOUT, os.path.abspath(before)]
    else:
        command += ["--batch-order", order]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", LOGLEVEL="ERROR")
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=before or ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest so far
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"span-predict exited {proc.returncode}:\n{stderr[-4000:]}")
    rows = int(re.search(r": (\d+) predictions", stderr).group(1))
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "rows": rows,
            "rows_per_s": round(rows / wall, 1), "rows_per_cpu_s": round(rows / cpu, 1)}


def load(path):
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return {}


def save(path, results):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def report(results):
    print(f"{'model':8s} {'source':10s} {'rows':>7s} {'order':6s} {'rows/s':>8s} "
          f"{'wall s':>8s} {'rows/CPU-s':>10s} {'CPU s':>8s} {'peak MB':>8s}  load (1/5/15 min)")
    for key in sorted(results, key=lambda k: (k.split("/")[0], k.split("/")[1],
                                              int(k.split("/")[2]), k.split("/")[3])):
        model, source, rows, order = key.split("/")
        r = results[key]
        print(f"{model:8s} {source:10s} {int(rows):7d} {order:6s} {r['rows_per_s']:8.1f} "
              f"{r['wall_s']:8.1f} {r['rows_per_cpu_s']:10.1f} {r['cpu_s']:8.1f} "
              f"{r['peak_rss_mb']:8.1f}  {r['load']}")
    for key in results:
        model, source, rows, order = key.split("/")
        for other, name in (("file", "file order"), ("before", "before (whole file, file order)")):
            them = results.get(f"{model}/{source}/{rows}/{other}")
            if order == "length" and them:
                ours = results[key]
                print(f"{model} {source} {rows} rows: sorted / {name} "
                      f"{ours['rows_per_s'] / them['rows_per_s']:.2f}x rows/s, "
                      f"{ours['rows_per_cpu_s'] / them['rows_per_cpu_s']:.2f}x rows per CPU-second")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default=os.path.join(ROOT, "runs", "bench-predict-large"))
    p.add_argument("--model", choices=("tiny", "minilm"), default="tiny")
    p.add_argument("--source", choices=("model", "checkpoint"), nargs="+", default=["model"],
                   help="span-predict --model (the exported folder) or --checkpoint")
    p.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--results", default=RESULTS)
    p.add_argument("--before", metavar="CHECKOUT",
                   help="measure the span-predict of this checkout of the project instead "
                   "(git worktree add /tmp/before COMMIT), as order 'before'")
    p.add_argument("--report", action="store_true", help="print the table and stop")
    p.add_argument("--quick", action="store_true",
                   help="tiny model, 300 rows, in a temporary folder (no figure kept)")
    args = p.parse_args()
    if args.quick:
        import tempfile

        work = tempfile.mkdtemp(prefix="predict_large_")
        args.work, args.model, args.rows = work, "tiny", [300]
        args.results = os.path.join(work, "results.json")
        try:
            measure_all(args)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    if args.report:
        report(load(args.results))
        return
    measure_all(args)


def measure_all(args):
    """Measure what ``args`` asks that ``args.results`` lacks, then print the table."""
    results = load(args.results)
    checkpoint, folder, data = prepare(args.work, args.model)
    for rows in args.rows:
        bench = bench_folder(os.path.join(args.work, args.model), data, rows)
        for source in args.source:
            written = {}
            for order in ORDERS if not args.before else ("before",):
                key = f"{args.model}/{source}/{rows}/{order}"
                out = os.path.join(args.work, f"out-{args.model}-{source}-{rows}-{order}.tsv")
                if key in results and os.path.isfile(out):
                    written[order] = out
                    continue
                load_before = os.getloadavg()
                found = measure(source, checkpoint if source == "checkpoint" else folder,
                                bench, order, out, args.before)
                if found["rows"] != rows:
                    sys.exit(f"{out}: {found['rows']} predictions for {rows} rows")
                load_after = os.getloadavg()
                found["load"] = "/".join(f"{max(a, b):.2f}"
                                         for a, b in zip(load_before, load_after))
                found["cores"] = os.cpu_count()
                results[key] = found
                save(args.results, results)
                written[order] = out
                print(key, found, flush=True)
            ours = os.path.join(args.work, f"out-{args.model}-{source}-{rows}-length.tsv")
            for order, out in written.items():
                if order != "length" and os.path.isfile(ours):
                    with open(ours, "rb") as a, open(out, "rb") as b:
                        if a.read() != b.read():
                            sys.exit(f"{ours} and {out} differ: sorted batches changed a "
                                     f"prediction")
    report(results)


if __name__ == "__main__":
    main()
