"""Turn fairseq-validate's JSON log lines into the run's small results file.

Usage: python write_results.py --task MNLI --metric accuracy --log dev.log --out results.json

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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True)
    p.add_argument("--metric", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    with open(args.log, encoding="utf-8") as f:
        subsets = parse(f.read())
    if not subsets:
        sys.exit(f"{args.log}: no fairseq-validate results found (did validation run?)")
    names = SUBSET_NAMES.get(args.task, {"valid": "dev"})
    results = {
        "task": args.task,
        "metric": args.metric,
        "checkpoint": args.checkpoint,
        "dev": {names.get(s, s): stats for s, stats in sorted(subsets.items())},
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    for name, stats in results["dev"].items():
        print(f"{args.task} {name}: {args.metric} {stats.get(args.metric)}")


if __name__ == "__main__":
    main()
