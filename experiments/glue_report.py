"""Table, plot and paired tests of the GLUE grid (experiments/glue_grid.py).

    python experiments/glue_report.py --results experiments/results/glue_minilm.jsonl \\
        --out experiments/RESULTS_GLUE_MINILM.md --plot docs/figures/glue_grid_minilm.png

- Table in the layout of the paper's Table 6: one row per variant, one column per
  task, each cell the median over seeds with the min-max range, and the average of
  the task medians (tasks with every variant present only).
- Paired test of each span variant against the plain head on the same dev rows and
  the same seed: exact McNemar (two-sided binomial test on the discordant rows),
  as the paper uses, for the classification tasks.
- Everything is recomputed from the stored dev predictions; the metric of each run
  is checked against the one fairseq logged.
"""

import argparse
import json
import statistics
from collections import defaultdict

import numpy as np

from grid_lib import dictionary_lines, write_report

VARIANT_NAMES = {"plain": "encoder (plain head)", "sf": "+ SF (cnn-cnn, greedy)",
                 "cnn": "+ CNN, no segmentation", "random": "+ SF, random segmentation"}
ORDER = ["plain", "sf", "cnn", "random"]


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def metric_from_predictions(r):
    """The run's dev metric recomputed from its stored predictions (percent)."""
    from scipy.stats import pearsonr
    from sklearn.metrics import f1_score, matthews_corrcoef

    if r["metric"] == "pearson":
        pred = np.array([float(x) for x in r["predictions"]]) / 5.0
        gold = np.array([float(x) for x in r["gold"]])
        return 100 * pearsonr(pred, gold)[0]
    pred, gold = r["predictions"], r["gold"]
    if r["metric"] == "mcc":
        return 100 * matthews_corrcoef(gold, pred)
    if r["metric"] == "f1":
        return 100 * f1_score(gold, pred, pos_label="1")
    return 100 * float(np.mean([p == g for p, g in zip(pred, gold)]))


def mcnemar(a, b):
    """Exact McNemar on paired runs a, b: (a right & b wrong, a wrong & b right, p)."""
    from scipy.stats import binomtest

    ra = np.array([p == g for p, g in zip(a["predictions"], a["gold"])])
    rb = np.array([p == g for p, g in zip(b["predictions"], b["gold"])])
    only_a, only_b = int((ra & ~rb).sum()), int((~ra & rb).sum())
    n = only_a + only_b
    p = binomtest(min(only_a, only_b), n, 0.5).pvalue if n else 1.0
    return only_a, only_b, p


def cell(values):
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.1f} (n=1)"
    return f"{med:.1f} ({min(values):.1f}-{max(values):.1f}, n={len(values)})"


def selection(runs):
    """The learning-rate choice: plain-head runs at every lr tried, per task and seed."""
    lrs = sorted({r["hparams"]["lr"] for r in runs})
    if len(lrs) < 2:
        return []
    lines = ["Learning-rate choice (plain head only, the protocol in experiments/README.md): dev metric "
             "per learning rate.", "", "| task | seed | " + " | ".join(f"lr {x:g}" for x in lrs)
             + " |", "|---|---|" + "---|" * len(lrs)]
    cells = defaultdict(dict)
    for r in runs:
        if r["variant"] == "plain":
            cells[(r["task"], r["seed"])][r["hparams"]["lr"]] = r["value"]
    for (task, seed), by_lr in sorted(cells.items()):
        lines.append(f"| {task} | {seed} | " + " | ".join(
            f"{by_lr[x]:.1f}" if x in by_lr else "-" for x in lrs) + " |")
    return lines + [""]


def report(runs, plot=None):
    by = defaultdict(dict)  # (task, variant) -> {seed: run}
    for r in runs:
        by[(r["task"], r["variant"])][r["seed"]] = r
    tasks = sorted({r["task"] for r in runs}, key=lambda t: ["CoLA", "STS-B", "MRPC"].index(t)
                   if t in ("CoLA", "STS-B", "MRPC") else 9)
    variants = [v for v in ORDER if any((t, v) in by for t in tasks)]
    lines = []
    lines.append(f"Runs: {len(runs)}; encoder: {', '.join(sorted({r['encoder'] for r in runs}))}; "
                 f"devices: {', '.join(sorted({r['device'] for r in runs}))}.")
    lines.append("")
    lines += [f"- {line}" for line in dictionary_lines(runs, label=lambda r: r["variant"])]
    lines.append("")
    worst = max(abs(metric_from_predictions(r) - r["value"]) for r in runs)
    lines.append(f"Every metric recomputed from the stored dev predictions (scikit-learn, "
                 f"scipy) agrees with fairseq's logged value within {worst:.2f} points.")
    lines.append("")
    metrics = {t: next(r["metric"] for r in runs if r["task"] == t) for t in tasks}
    head = "| variant | " + " | ".join(f"{t} ({metrics[t]})" for t in tasks) + " | average |"
    lines += [head, "|---" * (len(tasks) + 2) + "|"]
    complete = [t for t in tasks if all((t, v) in by for v in variants)]
    for v in variants:
        row, meds = [], []
        for t in tasks:
            vals = [r["value"] for r in by.get((t, v), {}).values()]
            row.append(cell(vals) if vals else "-")
            if vals and t in complete:
                meds.append(statistics.median(vals))
        avg = f"{np.mean(meds):.1f}" if meds and len(meds) == len(complete) else "-"
        lines.append(f"| {VARIANT_NAMES[v]} | " + " | ".join(row) + f" | {avg} |")
    lines.append("")
    lines.append(f"Cells: median over seeds (min-max, number of seeds). Average: mean of the "
                 f"task medians over {', '.join(complete) or 'no task with every variant'}.")
    lines.append("")

    lines.append("Paired tests on the dev rows (same seed, same batches), each span variant "
                 "against the plain head; b = rows only the plain head gets right, c = rows "
                 "only the span variant gets right; exact McNemar p-value:")
    lines.append("")
    lines.append("| task | variant | seed | plain | variant | b | c | p |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for t in tasks:
        if metrics[t] == "pearson":
            continue
        for v in variants:
            if v == "plain":
                continue
            for seed in sorted(by.get((t, v), {})):
                base = by.get((t, "plain"), {}).get(seed)
                if base is None:
                    continue
                run = by[(t, v)][seed]
                b, c, p = mcnemar(base, run)
                lines.append(f"| {t} | {v} | {seed} | {base['value']:.1f} | {run['value']:.1f} "
                             f"| {b} | {c} | {p:.3f} |")
    lines.append("")
    lines.append("Hyperparameters (one set for every variant of a task; updates = epochs x "
                 "batches of the task's train set):")
    lines.append("")
    for t in tasks:
        hp = {json.dumps(r["hparams"], sort_keys=True) for r in runs if r["task"] == t}
        lines.append(f"- {t}: " + "; ".join(sorted(hp)))
    if plot:
        draw(by, tasks, variants, metrics, plot)
    return "\n".join(lines) + "\n"


def draw(by, tasks, variants, metrics, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.6), squeeze=False)
    for ax, t in zip(axes[0], tasks):
        for i, v in enumerate(variants):
            vals = [r["value"] for r in by.get((t, v), {}).values()]
            if not vals:
                continue
            ax.scatter([i] * len(vals), vals, alpha=0.6, color=f"C{i}")
            ax.hlines(statistics.median(vals), i - 0.25, i + 0.25, color=f"C{i}")
        ax.set_xticks(range(len(variants)), [v for v in variants])
        ax.set_title(f"{t} dev {metrics[t]}")
    fig.suptitle("Dev results per seed (dots) and median (bar)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True)
    p.add_argument("--out", help="write the markdown here (default: print)")
    p.add_argument("--plot", help="write the figure here (PNG)")
    p.add_argument("--lr", type=float, help="the grid's learning rate (runs at other "
                   "rates are the selection runs; default: the only one present)")
    args = p.parse_args(argv)
    runs = load(args.results)
    lrs = sorted({r["hparams"]["lr"] for r in runs})
    lr = args.lr if args.lr is not None else (lrs[0] if len(lrs) == 1 else None)
    if lr is None:
        raise SystemExit(f"{args.results} holds runs at learning rates {lrs}: pick the grid's with --lr")
    text = report([r for r in runs if r["hparams"]["lr"] == lr], plot=args.plot)
    text += "\n" + "\n".join(selection(runs))
    if args.out:
        write_report(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
