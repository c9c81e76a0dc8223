"""A corpus in 1, 2 and 4 shards through the pre-training recipe's whole data path.

The four shared Wikipedia files (../shared/data/wikipedia/wiki.{AA,AB,AC,AD}.txt.gz, about
65M words) go through ``recipes/pretrain/spanbert.sh`` with ``PREPARE_ONLY=1``: one
n-gram dictionary counted over all of the text (``NGRAMS=count``), then every shard
decompressed, encoded (GPT-2 BPE), segmented (greedy, the counted dictionary) and
binarized into its own folder with its data record (``SPAN_MASKING=ngram``), the shards
``SHARD_JOBS`` at a time with ``WORKERS`` processes shared among them. As 1 shard the
four files are one file (their gzip streams joined), as 2 shards two (AA+AB, AC+AD), as
4 shards the four files. Each configuration starts from no data folder.

Measured per configuration: wall time of the whole recipe and of its two phases
(counting, binarizing: from the recipe's own lines), words/s (words = whitespace-separated
words of the training text, counted once), CPU seconds of all its processes
(``getrusage(RUSAGE_CHILDREN)`` before and after), and the peak resident set of every
process the recipe starts (polled every 0.1 s with psutil, so a peak shorter than that
may be missed; the largest also exactly, from GNU time's ``%M``), and the machine's load
average over the run.

    .venv/bin/python benchmarks/pretrain_shards.py --max-lines 20000     # a small cut
    nice -n 10 .venv/bin/python benchmarks/pretrain_shards.py            # the whole corpus
    .venv/bin/python benchmarks/pretrain_shards.py --report              # the table

Results go to ``--results`` (JSON, one entry per configuration and cut); a configuration
already there is skipped, so an interrupted run resumes where it stopped.
"""

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from common import DATA, ROOT
from common import GPT2_BPE as GPT2

WIKI = DATA / "wikipedia"
FILES = ["wiki.AA.txt.gz", "wiki.AB.txt.gz", "wiki.AC.txt.gz", "wiki.AD.txt.gz"]
VALID = DATA / "wikitext-2" / "wiki.valid.tokens"


def _cut(src, dst, max_lines):
    """The first ``max_lines`` lines of ``src`` (gzip) as ``dst`` (gzip)."""
    import gzip

    with gzip.open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=1) as out:
        for i, line in enumerate(f):
            if i >= max_lines:
                break
            out.write(line)


def _join(parts, dst):
    """gzip files joined into one (a gzip file of several members reads as one text)."""
    with open(dst, "wb") as out:
        for p in parts:
            with open(p, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 22)


def sources(work, max_lines):
    """The four source files: the shared ones, or their first ``max_lines`` lines."""
    if not max_lines:
        return [WIKI / f for f in FILES]
    out = []
    for f in FILES:
        dst = work / f"cut{max_lines}" / f
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            _cut(WIKI / f, str(dst) + ".tmp", max_lines)
            os.replace(str(dst) + ".tmp", dst)
        out.append(dst)
    return out


def shard_files(work, srcs, shards, tag):
    """The training files of ``shards`` shards: the sources joined into that many files."""
    if shards == len(srcs):
        return list(srcs)
    per = len(srcs) // shards
    out = []
    for k in range(shards):
        dst = work / tag / f"{shards}shards" / f"part{k}.txt.gz"
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            _join(srcs[k * per:(k + 1) * per], str(dst) + ".tmp")
            os.replace(str(dst) + ".tmp", dst)
        out.append(dst)
    return out


def count_words(paths):
    import gzip

    n = 0
    for p in paths:
        with gzip.open(p, "rb") as f:
            for line in f:
                n += len(line.split())
    return n


def role(proc):
    """What a process of the recipe is, from its command line."""
    try:
        cmd = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "?"
    text = " ".join(cmd)
    for sub in ("ngrams", "pretrain"):
        if f"span-preprocess {sub}" in text or re.search(rf"span-preprocess\S* {sub}\b", text):
            return f"span-preprocess {sub}"
    if "spanbert.sh" in text:
        return "recipe (bash)"
    if cmd and os.path.basename(cmd[0]).startswith("python"):
        return "python helper (" + " ".join(cmd[1:4]) + ")"
    return os.path.basename(cmd[0]) if cmd else "?"


class Watcher(threading.Thread):
    """Polls the process tree under ``pid``: peak RSS and last CPU times of every process;
    the load average."""

    def __init__(self, pid, every=0.1):
        super().__init__(daemon=True)
        self.root, self.every, self.stop = psutil.Process(pid), every, threading.Event()
        self.procs = {}  # pid -> {"role", "peak_mb", "cpu_s", "parent"}
        self.loads = []

    def run(self):
        last_load = 0.0
        while not self.stop.is_set():
            try:
                tree = [self.root] + self.root.children(recursive=True)
            except psutil.NoSuchProcess:
                break
            for p in tree:
                try:
                    with p.oneshot():
                        rss = p.memory_info().rss / 2**20
                        t = p.cpu_times()
                        cpu = t.user + t.system
                        entry = self.procs.get(p.pid)
                        if entry is None:
                            entry = self.procs[p.pid] = {"role": role(p), "peak_mb": 0.0,
                                                         "cpu_s": 0.0, "parent": p.ppid()}
                        entry["peak_mb"] = max(entry["peak_mb"], rss)
                        entry["cpu_s"] = max(entry["cpu_s"], cpu)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            now = time.monotonic()
            if now - last_load >= 5:
                self.loads.append(os.getloadavg()[0])
                last_load = now
            time.sleep(self.every)


def run_config(shards, files, words, work, workers, tag):
    data = work / tag / f"data-{shards}"
    shutil.rmtree(data, ignore_errors=True)
    for stale in data.parent.glob(f"data-{shards}*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink()
    env = dict(os.environ, TRAIN_TEXT=" ".join(str(f) for f in files), VALID_TEXT=str(VALID),
               FROM_SCRATCH="1", BPE_DIR=str(GPT2), WORKERS=str(workers), SPAN_MASKING="ngram",
               NGRAMS="count", PREPARE_ONLY="1", DATA_DIR=str(data),
               PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()
    # GNU time gives this configuration's largest peak exactly (this process's own
    # RUSAGE_CHILDREN keeps the largest of every configuration run before)
    peak_file = work / tag / f"peak-{shards}.txt"
    timer = ["/usr/bin/time", "-f", "%M", "-o", str(peak_file)] \
        if os.access("/usr/bin/time", os.X_OK) else []
    start = time.monotonic()
    proc = subprocess.Popen([*timer, "bash", str(ROOT / "recipes" / "pretrain" / "spanbert.sh"),
                             "--cpu"],
                            env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    watcher = Watcher(proc.pid)
    watcher.start()
    marks, log = {}, []
    for line in proc.stdout:
        t = time.monotonic() - start
        log.append(f"{t:8.1f} {line.rstrip()}")
        print(f"[{shards} shards {t:7.1f}s] {line.rstrip()}", flush=True)
        if line.startswith("counting n-grams"):
            marks["count_start"] = t
        elif line.startswith("preparing"):
            marks["binarize_start"] = t
    rc = proc.wait()
    wall = time.monotonic() - start
    watcher.stop.set()
    watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        raise SystemExit(f"{shards} shards: the recipe failed (exit {rc}):\n"
                         + "\n".join(log[-30:]))
    count_s = marks["binarize_start"] - marks.get("count_start", 0.0)
    binarize_s = wall - marks["binarize_start"]
    roles = {}
    for e in watcher.procs.values():
        r = roles.setdefault(e["role"], {"processes": 0, "peak_mb": 0.0, "cpu_s": 0.0})
        r["processes"] += 1
        r["peak_mb"] = max(r["peak_mb"], round(e["peak_mb"], 1))
        r["cpu_s"] = round(r["cpu_s"] + e["cpu_s"], 1)
    bytes_out = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
    return {
        "shards": shards, "files": [str(f) for f in files], "words": words, "workers": workers,
        "wall_s": round(wall, 1), "count_s": round(count_s, 1), "binarize_s": round(binarize_s, 1),
        "words_per_s": round(words / wall), "binarize_words_per_s": round(words / binarize_s),
        "count_words_per_s": round(words / count_s) if count_s > 0 else None,
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
        "largest_peak_mb_exact": (round(int(peak_file.read_text().split()[-1]) / 1024, 1)
                                  if timer else None),  # GNU time: KiB
        "roles": roles,
        "processes": sorted(({"pid": pid, **e, "peak_mb": round(e["peak_mb"], 1),
                              "cpu_s": round(e["cpu_s"], 1)}
                             for pid, e in watcher.procs.items()), key=lambda e: -e["peak_mb"]),
        "load_1min": {"start": round(load0[0], 2), **({
            "mean": round(sum(watcher.loads) / len(watcher.loads), 2),
            "max": round(max(watcher.loads), 2),
        } if watcher.loads else {"mean": None, "max": None})},
        "cpus": os.cpu_count(), "output_mb": round(bytes_out / 2**20, 1),
        "taken": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "log": log,
    }


def report(results):
    results = {k: v for k, v in results.items() if not k.startswith("words:")}
    rows = ["| cut | shards | words | wall (s) | counting (s) | binarizing (s) | words/s | "
            "binarize words/s | CPU s | words per CPU-second | "
            "largest peak RSS, polled (exact) (MB) | peak RSS by process kind (MB) | "
            "load (1-min mean / max) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(results, key=lambda k: (results[k]["max_lines"], results[k]["shards"])):
        r = results[key]
        kinds = "; ".join(f"{name} x{v['processes']}: {v['peak_mb']:.0f}"
                          for name, v in sorted(r["roles"].items()) if v["peak_mb"] >= 20)
        cut = f"first {r['max_lines']:,} lines a file" if r["max_lines"] else "whole"
        polled = max(p["peak_mb"] for p in r["processes"])
        exact = f" ({r['largest_peak_mb_exact']:.0f})" if r.get("largest_peak_mb_exact") else ""
        rows.append(f"| {cut} | {r['shards']} | {r['words']:,} | {r['wall_s']} | {r['count_s']} | "
                    f"{r['binarize_s']} | {r['words_per_s']:,} | {r['binarize_words_per_s']:,} | "
                    f"{r['cpu_s']} | {round(r['words'] / r['cpu_s']):,} | "
                    f"{polled:.0f}{exact} | {kinds} | "
                    f"{r['load_1min']['mean']} / {r['load_1min']['max']} |")
    return "\n".join(rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", default="1,2,4")
    p.add_argument("--max-lines", type=int, default=0,
                   help="take the first N lines of every file (0: the whole files)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--work", type=Path, default=Path("/tmp/pretrain_shards_bench"),
                   help="where the joined files and data folders go")
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "pretrain_shards.json")
    p.add_argument("--keep-data", action="store_true", help="keep the data folders")
    p.add_argument("--report", action="store_true", help="print the table of --results and stop")
    args = p.parse_args(argv)
    results = json.loads(args.results.read_text()) if args.results.exists() else {}
    if args.report:
        print(report(results))
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    tag = f"cut{args.max_lines}" if args.max_lines else "whole"
    srcs = sources(args.work, args.max_lines)
    words_key = f"words:{tag}"
    if words_key not in results:
        results[words_key] = count_words(srcs)
    words = results[words_key]
    for shards in [int(s) for s in args.shards.split(",")]:
        key = f"{tag}:{shards}:{args.workers}"
        if key in results:
            print(f"{shards} shards ({tag}, {args.workers} workers): recorded, skipped")
            continue
        files = shard_files(args.work, srcs, shards, tag)
        r = run_config(shards, files, words, args.work, args.workers, tag)
        r["max_lines"] = args.max_lines
        results[key] = r
        tmp = args.results.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(results, indent=1) + "\n")
        os.replace(tmp, args.results)
        print(f"{shards} shards: {r['wall_s']} s, {r['words_per_s']:,} words/s, largest peak "
              f"{max(p['peak_mb'] for p in r['processes']):.0f} MB", flush=True)
        if not args.keep_data:
            shutil.rmtree(args.work / tag / f"data-{shards}", ignore_errors=True)
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
