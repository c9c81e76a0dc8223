"""Write the run's small results file: the dev result of checkpoint_best.pt.

Two sources, the same figures:

- ``--log dev.log``: fairseq-validate's JSON log lines of checkpoint_best.pt;
- ``--train-log train.log``: fairseq-train's own validation of the epoch whose weights
  checkpoint_best.pt holds (the recipe keeps fairseq-train's output there, across
  relaunches), which saves a second pass over the dev set. fairseq saves
  checkpoint_best.pt right after a validation whose metric is the best so far (its
  line then shows ``METRIC == best_METRIC``, or no ``best_METRIC`` on a first
  validation) and logs ``Saved checkpoint ... (epoch E @ U updates, score S)`` once
  every file of that save is written. When the log cannot tell which validation the
  file holds (no such save logged, or a new best logged after the last one without its
  save line: a run killed while saving), the script exits with status 3 and writes
  nothing, and the recipe runs fairseq-validate instead.

Usage: python write_results.py --task MNLI --metric accuracy --checkpoint best.pt
           (--log dev.log | --train-log train.log) --out results.json

(``--metric`` is also the --best-checkpoint-metric: fairseq's best_METRIC is the max or
the min of the values logged so far, so a validation that set a new best shows
``METRIC == best_METRIC`` either way.)

Each validated subset becomes an entry: valid (MNLI: matched) and valid1 (MNLI:
mismatched), with every metric fairseq logged for it and the task's own metric
named in "metric".
"""

import argparse
import json
import re
import sys

SUBSET_NAMES = {"MNLI": {"valid": "dev_matched", "valid1": "dev_mismatched"}}
SPEED_STATS = {"wps", "wpb", "bsz"}  # throughput figures, not results
TRAINING_STATS = {"num_updates"}  # what fairseq-train adds to a validation's figures
UNDECIDED = 3  # exit status: the training log cannot tell; validate the checkpoint instead

VALID_LINE = re.compile(r"\| valid on '(\w+)' subset \| (.*?)\s*$")
SAVED_LINE = re.compile(r"Saved checkpoint (\S+) \(epoch (\d+) @ (\d+) updates, score ([^)]*)\)")


def parse(log_text):
    """{subset: {stat: value}} from lines like ``| valid1 | {"valid1_loss": "0.9", ...}``."""
    found = {}
    for subset, payload in re.findall(r"\| (valid\d*) \| (\{.*\})\s*$", log_text, flags=re.M):
        stats = json.loads(payload)
        found[subset] = {
            k[len(subset) + 1 :]: float(v)
            for k, v in stats.items()
            if k.startswith(subset + "_") and k[len(subset) + 1 :] not in SPEED_STATS
        }
    return found


def _pipe_stats(text):
    """{stat: value} of ``loss 0.52 | accuracy 75 | ...`` (values that are numbers)."""
    stats = {}
    for part in text.split(" | "):
        key, _, value = part.strip().partition(" ")
        try:
            stats[key] = float(value)
        except ValueError:
            continue
    return stats


def best_from_train_log(log_text, metric):
    """({subset: stats}, epoch, updates) of the validation whose weights
    checkpoint_best.pt holds, from fairseq-train's simple-format log; None when the log
    cannot tell. ``metric`` is the recipe's --best-checkpoint-metric; the log's own
    ``best_X`` figure names the one the run tracked, should extra arguments have
    changed it."""
    events = []  # ("valid", subset, stats) and ("saved", match), in log order
    for line in log_text.splitlines():
        m = VALID_LINE.search(line)
        if m:
            events.append(("valid", m.group(1), _pipe_stats(m.group(2))))
        elif m := SAVED_LINE.search(line):
            events.append(("saved", m))
    tracked = next((k[len("best_"):] for e in events if e[0] == "valid" for k in e[2]
                    if k.startswith("best_")), metric)
    rounds = []  # validation rounds, in log order
    best = None
    for event in events:
        if event[0] == "valid":
            _, subset, stats = event
            current = rounds[-1] if rounds else None
            if (current is None or current["saved"] or subset in current["subsets"]
                    or current["updates"] != stats.get("num_updates")):
                # The first subset tracks the best (fairseq's tracking_best): its line
                # has best_X unless no validation came before it in this process.
                if tracked not in stats:
                    return None
                key = "best_" + tracked
                current = {"subsets": {}, "updates": stats.get("num_updates"), "saved": False,
                           "value": stats[tracked],
                           "new_best": key not in stats or stats[key] == stats[tracked]}
                rounds.append(current)
            current["subsets"][subset] = stats
            continue
        m = event[1]
        if rounds and not rounds[-1]["saved"]:
            current = rounds[-1]
            epoch, updates, score = int(m.group(2)), int(m.group(3)), m.group(4)
            if current["updates"] != updates:
                return None  # a save of another validation than the last one logged
            if score != "None" and float(score) != current["value"]:
                return None  # the save tracked another figure than this one
            current["saved"] = True
            if current["new_best"]:
                best = (current, epoch, updates)
    if best is None:
        return None
    after = rounds[rounds.index(best[0]) + 1 :]
    if any(r["new_best"] for r in after):
        return None  # a later best whose save was not logged: the file may hold either
    subsets = {
        subset: {k: v for k, v in stats.items()
                 if k not in SPEED_STATS | TRAINING_STATS and not k.startswith("best_")}
        for subset, stats in best[0]["subsets"].items()
    }
    return subsets, best[1], best[2]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True)
    p.add_argument("--metric", required=True)
    p.add_argument("--checkpoint", required=True)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--log", help="fairseq-validate's JSON log of the checkpoint")
    source.add_argument("--train-log", help="fairseq-train's simple-format log of the run")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    extra = {}
    if args.log:
        with open(args.log, encoding="utf-8") as f:
            subsets = parse(f.read())
        if not subsets:
            sys.exit(f"{args.log}: no fairseq-validate results found (did validation run?)")
    else:
        try:
            with open(args.train_log, encoding="utf-8", errors="replace") as f:
                found = best_from_train_log(f.read(), args.metric)
        except FileNotFoundError:
            found = None
        if found is None:
            print(f"{args.train_log}: does not tell which validation {args.checkpoint} holds",
                  file=sys.stderr)
            return UNDECIDED
        subsets, epoch, updates = found
        extra = {"validated": f"by fairseq-train after epoch {epoch} ({updates} updates)"}
    names = SUBSET_NAMES.get(args.task, {"valid": "dev"})
    results = {
        "task": args.task,
        "metric": args.metric,
        "checkpoint": args.checkpoint,
        **extra,
        "dev": {names.get(s, s): stats for s, stats in sorted(subsets.items())},
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    for name, stats in results["dev"].items():
        print(f"{args.task} {name}: {args.metric} {stats.get(args.metric)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
