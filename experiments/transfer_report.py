"""Table and plot of the transfer fine-tuning grid (experiments/transfer_grid.py).

    python experiments/transfer_report.py --results experiments/results/transfer_minilm.jsonl \\
        --out experiments/RESULTS_TRANSFER_MINILM.md --plot docs/figures/transfer_minilm.png

One table per aligner version (records of the conditions that use transfer data name it;
those without one are version 1; the "none" runs serve every table). One row per
(target, share of train rows, dev metric): MRPC shows F1, accuracy and MCC, STS-B
Pearson and Spearman; each condition's mean +- sample standard deviation over seeds,
with runs whose MRPC MCC is <= 5 flagged as collapsed (the model predicts one class;
F1 alone hides it: an all-positive guess has F1 81.2). For each condition, the paired
difference to "none" (same seed, same subset): mean, standard deviation, seeds won and
the paired t-test's two-sided p; transfer, phrasal-only and sentential-only also against
the compute-matched control (their transfer runs have the same number of updates).
Then the transfer runs: their data (class counts, the identity rule's accuracy:
identical -> paraphrase; random partner -> random; else in-paraphrase) beside the
model's own phrasal accuracy on the same dev pairs.
"""

import argparse
import math
import sys
from collections import defaultdict

from grid_lib import dictionary_lines, mean_sd, paired_cell_p, read_results, write_report

ORDER = ["none", "transfer", "phrasal", "sentential", "matched"]
USES_TRANSFER_DATA = ("transfer", "phrasal", "sentential", "matched")  # as transfer_grid.py
OLD_ALIGNER = 1
METRICS = {"MRPC": ("f1", "accuracy", "mcc"), "STS-B": ("pearson", "spearman")}
COLLAPSED_MCC = 5.0


def aligner_of(r):
    """The aligner version a record depends on (None: no transfer data)."""
    condition = r["condition"]
    return r.get("aligner", OLD_ALIGNER) if condition in USES_TRANSFER_DATA else None


def collapsed(r):
    return r["task"] == "MRPC" and r["dev"].get("mcc", math.inf) <= COLLAPSED_MCC


def fmt(values):
    if not values:
        return "-"
    mean, sd = mean_sd(values)
    return f"{mean:.1f} +- {sd:.1f} (n={len(values)})" if len(values) > 1 else f"{mean:.1f} (n=1)"


def diff_cell(cond, c, metric, base="none"):
    seeds = sorted(set(cond.get(c, {})) & set(cond.get(base, {})))
    diffs = [cond[c][s]["dev"][metric] - cond[base][s]["dev"][metric] for s in seeds]
    return paired_cell_p(diffs, 1)


def table(runs, version):
    """The markdown table of the runs of one aligner version (and the "none" runs)."""
    by = defaultdict(dict)  # (task, share) -> condition -> seed -> record
    for r in runs:
        if aligner_of(r) in (None, version):
            by[(r["task"], r["share"])].setdefault(r["condition"], {})[r["seed"]] = r
    conditions = [c for c in ORDER if any(c in v for v in by.values())]
    # every condition against no transfer; each transfer condition also against the
    # compute-matched control (the same number of updates: the single objectives run on
    # the same pairs for as long), which separates "transfer data helps" from "more
    # updates help"
    pairs = [(c, "none") for c in conditions if c != "none"]
    if "matched" in conditions:
        pairs += [(c, "matched") for c in ("transfer", "phrasal", "sentential") if c in conditions]
    lines = ["| target | train rows | metric | " + " | ".join(conditions) + " | "
             + " | ".join(f"{c} - {b} (wins; p)" for c, b in pairs) + " |",
             "|---" * (3 + len(conditions) + len(pairs)) + "|"]
    for (task, share), cond in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        seen = {k for c in cond.values() for r in c.values() for k in r["dev"]}
        for metric in [m for m in METRICS.get(task, ()) if m in seen] or [
                next(iter(next(iter(cond.values())).values()))["metric"]]:
            cells = []
            for c in conditions:
                recs = list(cond.get(c, {}).values())
                cell = fmt([r["dev"][metric] for r in recs if metric in r["dev"]])
                down = sum(map(collapsed, recs))
                cells.append(cell + (f" **{down} collapsed**" if down else ""))
            cells += [diff_cell(cond, c, metric, b) for c, b in pairs]
            lines.append(f"| {task} | {share}% | {metric} | " + " | ".join(cells) + " |")
    return lines, by, conditions


def transfer_rows(transfers):
    lines = ["| target | source | aligner | condition | seed | paraphrase rows | random partners | "
             "dropped (overlap) | train phrase pairs | identity rule dev (train) | "
             "model dev phrasal / sentential accuracy (sentential F1) | minutes |",
             "|---" * 12 + "|"]
    for t in sorted(transfers, key=lambda t: (t.get("aligner", OLD_ALIGNER), t["target"],
                                              ORDER.index(t["condition"]), t["seed"])):
        d = t["data"]["train"]
        pp = ", ".join(f"{k} {v}" for k, v in sorted(d["phrase_pairs"].items()))
        rule = [t["data"][s].get("identity_rule", {}).get("accuracy") for s in ("dev", "train")]
        rule = "-" if rule[0] is None else f"{rule[0]:.1f} ({rule[1]:.1f})"
        v = t.get("valid") or {}
        acc = " / ".join(f"{v[k]:.1f}" if k in v else "-"
                         for k in ("phrasal_accuracy", "sentential_accuracy"))
        if "sentential_f1" in v:  # not logged by the grid's first transfer runs
            acc += f" ({v['sentential_f1']:.1f})"
        lines.append(f"| {t['target']} | {t['source']} train | {t.get('aligner', OLD_ALIGNER)} | "
                     f"{t['condition']} | {t['seed']} | {d['paraphrase_rows']} | "
                     f"{d['random_rows']} | {d['excluded_rows']} | {pp} | {rule} | {acc} | "
                     f"{t['minutes']} |")
    return lines


def unmatched_updates(runs, transfers):
    """Transfer runs whose number of updates differs from a compute-matched control's
    extra updates (same target, seed and aligner; any share): the "- matched" columns
    assume equal."""
    extras = defaultdict(set)
    for r in runs:
        if r["condition"] == "matched":
            extras[(r["task"], r["seed"], aligner_of(r))].add(r["hparams"]["extra_updates"])
    found = []
    for t in transfers:
        made = t["hparams"].get("updates")
        other = extras[(t["target"], t["seed"], aligner_of(t))] - {made}
        if other:
            found.append(f"{t['target']} {t['condition']} seed {t['seed']}: {made} transfer "
                         f"updates, matched control {', '.join(map(str, sorted(other)))}")
    return found


def report(records):
    runs = [r for r in records if r["kind"] == "finetune"]
    transfers = [r for r in records if r["kind"] == "transfer"]
    versions = sorted({aligner_of(r) for r in runs} - {None}) or [None]
    lines, plots = [], []
    for version in versions:
        rows, by, conditions = table(runs, version)
        if version is not None:
            lines += [f"### Aligner version {version}"
                      + (" (identical anchors as positives; before issue 28)"
                         if version == OLD_ALIGNER else ""), ""]
        lines += rows + [""]
        plots.append((version, by, conditions))
    lines += [f"Collapsed: a run whose MRPC dev MCC is <= {COLLAPSED_MCC:g} (one class "
              f"predicted for (nearly) every pair). p: two-sided paired t-test over seeds.", ""]
    unmatched = unmatched_updates(runs, transfers)
    if unmatched:
        lines += ["**Not compute-matched** (the \"- matched\" columns compare unequal "
                  "numbers of updates for these): " + "; ".join(unmatched) + ".", ""]
    if transfers:
        lines += ["Transfer runs (data: the weak aligner on the other task's train.tsv and "
                  "dev.tsv; rows sharing a normalised sentence with the target's dev/test "
                  "dropped; identity rule: identical -> paraphrase, random partner -> "
                  "random, else in-paraphrase, on the same dev pairs the model's phrasal "
                  "accuracy is measured on; \"-\": not recorded by aligner 1 runs):", ""]
        lines += transfer_rows(transfers)
    lines += ["", *(f"- {line}" for line in dictionary_lines(
        records, label=lambda r: f"{r['kind']} {r['condition']}"))]
    return "\n".join(lines) + "\n", plots


def draw(plots, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = []  # (label, by, condition): "none" once, every other condition per version
    for version, by, conditions in plots:
        for c in conditions:
            if c == "none" and any(b[0] == "none" for b in bars):
                continue
            label = c if c == "none" or version is None else f"{c} (aligner {version})"
            bars.append((label, by, c))
    keys = sorted({k for _, by, _ in bars for k in by}, key=lambda k: (k[0], k[1]))
    fig, ax = plt.subplots(figsize=(1.6 + 1.6 * len(keys), 3.6))
    width = 0.8 / len(bars)
    low = math.inf
    for i, (label, by, c) in enumerate(bars):
        xs, means, sds = [], [], []
        for j, k in enumerate(keys):
            values = [r["value"] for r in by.get(k, {}).get(c, {}).values()]
            if values:
                mean, sd = mean_sd(values)
                xs.append(j + (i - (len(bars) - 1) / 2) * width)
                means.append(mean)
                sds.append(sd)
                low = min(low, min(values))
        ax.bar(xs, means, width, yerr=sds, capsize=3, label=label)
    ax.set_xticks(range(len(keys)), [f"{t}\n{s}% train" for t, s in keys])
    ax.set_ylim(max(0, low - 10), None)
    ax.set_ylabel("dev metric (MRPC F1, STS-B Pearson)")
    ax.legend(title="condition", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--plot")
    args = p.parse_args(argv)
    text, plots = report(read_results(args.results))
    write_report(args.out, text)
    print(text)
    if args.plot and any(by for _, by, _ in plots):
        draw(plots, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
