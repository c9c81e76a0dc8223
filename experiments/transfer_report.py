"""Table and plot of the transfer fine-tuning grid (experiments/transfer_grid.py).

    python experiments/transfer_report.py --results experiments/results/transfer_minilm.jsonl \\
        --out /tmp/report.md --plot docs/figures/transfer_minilm.png

One row per (target, share of train rows): the dev metric of each condition as mean +-
sample standard deviation over seeds, and for each transfer condition the paired
difference to "none" (same seed, same subset): its mean, standard deviation and how many
seeds it won. Then the transfer data of each target (rows dropped for sharing a sentence
with the target's dev or test file).
"""

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grid_lib import mean_sd, paired_cell, read_results, write_report  # noqa: E402

ORDER = ["none", "transfer", "phrasal", "sentential"]


def fmt(values):
    if not values:
        return "-"
    mean, sd = mean_sd(values)
    return f"{mean:.1f} +- {sd:.1f} (n={len(values)})" if len(values) > 1 else f"{mean:.1f} (n=1)"


def report(records):
    runs = [r for r in records if r["kind"] == "finetune"]
    transfers = [r for r in records if r["kind"] == "transfer"]
    by = defaultdict(dict)  # (task, share) -> condition -> seed -> value
    for r in runs:
        by[(r["task"], r["share"])].setdefault(r["condition"], {})[r["seed"]] = r["value"]
    conditions = [c for c in ORDER if any(c in v for v in by.values())]
    lines = ["| target | train rows | metric | " + " | ".join(conditions) + " | "
             + " | ".join(f"{c} - none (wins)" for c in conditions if c != "none") + " |",
             "|---" * (3 + 2 * len(conditions) - 1) + "|"]
    metric = {r["task"]: r["metric"] for r in runs}
    for (task, share), cond in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = [fmt(list(cond.get(c, {}).values())) for c in conditions]
        for c in conditions[1:]:
            seeds = sorted(set(cond.get(c, {})) & set(cond.get("none", {})))
            cells.append(paired_cell([cond[c][s] - cond["none"][s] for s in seeds], 1))
        lines.append(f"| {task} | {share}% | {metric[task]} | " + " | ".join(cells) + " |")
    lines += ["", "Transfer runs (data: the weak aligner on the other task's train.tsv; rows "
              "sharing a normalised sentence with the target's dev/test dropped):", "",
              "| target | source | condition | seed | paraphrase rows | random partners | "
              "dropped (overlap) | phrase pairs | dev phrasal / sentential accuracy (sentential F1) | "
              "minutes |",
              "|---" * 10 + "|"]
    for t in sorted(transfers, key=lambda t: (t["target"], ORDER.index(t["condition"]), t["seed"])):
        d = t["data"]["train"]
        pp = ", ".join(f"{k} {v}" for k, v in sorted(d["phrase_pairs"].items()))
        v = t.get("valid") or {}
        acc = " / ".join(f"{v[k]:.1f}" if k in v else "-"
                         for k in ("phrasal_accuracy", "sentential_accuracy"))
        if "sentential_f1" in v:  # not logged by the grid's first transfer runs
            acc += f" ({v['sentential_f1']:.1f})"
        lines.append(f"| {t['target']} | {t['source']} train | {t['condition']} | {t['seed']} | "
                     f"{d['paraphrase_rows']} | {d['random_rows']} | {d['excluded_rows']} | "
                     f"{pp} | {acc} | {t['minutes']} |")
    return "\n".join(lines) + "\n", by, conditions


def draw(by, conditions, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(by, key=lambda k: (k[0], k[1]))
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(keys), 3.4))
    width = 0.8 / len(conditions)
    for i, c in enumerate(conditions):
        xs, means, sds = [], [], []
        for j, k in enumerate(keys):
            values = list(by[k].get(c, {}).values())
            if values:
                mean, sd = mean_sd(values)
                xs.append(j + (i - (len(conditions) - 1) / 2) * width)
                means.append(mean)
                sds.append(sd)
        ax.bar(xs, means, width, yerr=sds, capsize=3, label=c)
    ax.set_xticks(range(len(keys)), [f"{t}\n{s}% train" for t, s in keys])
    low = min(min(v.values()) for k in keys for v in by[k].values())
    ax.set_ylim(max(0, low - 10), None)
    ax.set_ylabel("dev metric (MRPC F1, STS-B Pearson)")
    ax.legend(title="transfer", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--plot")
    a = p.parse_args(argv)
    text, by, conditions = report(read_results(a.results))
    write_report(a.out, text)
    print(text)
    if a.plot and by:
        draw(by, conditions, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
