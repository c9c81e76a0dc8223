"""Table and plot of the CoNLL-2003 grid (experiments/ner_grid.py).

    python experiments/ner_report.py --results experiments/results/ner_minilm.jsonl \\
        --out experiments/RESULTS_NER_MINILM.md --plot docs/figures/ner_minilm.png

One row per variant (head and decoding): dev and test entity-level precision, recall
and F1 of the best-dev checkpoint as mean +- sample standard deviation over seeds; then,
for each variant, the paired difference (same seed) in dev and test F1 to the token head
and to the token head with Viterbi decoding, with how many seeds it won and the paired
t-test's p. Dev picked the checkpoint (optimistic); test did not.
"""

import argparse
import sys
from collections import defaultdict

from grid_lib import dictionary_lines, mean_sd, paired_cell_p, read_results, write_report

ORDER = ["token", "token-viterbi", "sf", "sf-viterbi", "span"]
# the token head as first run (argmax) and decoded as well-formed IOB2 (the strongest
# token decoder, against which the span and SF heads' own gains are read)
BASELINES = ("token", "token-viterbi")


def decoding(r):
    """How a record's entities were decoded. Records made before the grid recorded it
    (all before Viterbi existed) decoded tagging heads by argmax."""
    used = r.get("decoding") or {}
    if r["settings"]["HEAD"] == "span":
        overlap = used.get("overlap", "flat")
        return f"{overlap} spans" + (f" >= {used['span_threshold']:g}"
                                     if used.get("span_threshold") is not None else "")
    return used.get("token_decoding", "argmax")


def fmt(values):
    if not values:
        return "-"
    mean, sd = mean_sd(values)
    return f"{mean:.2f} +- {sd:.2f}" if len(values) > 1 else f"{mean:.2f}"


def report(records):
    by = defaultdict(dict)  # variant -> seed -> record (the last one, if a run was redone)
    for r in records:
        by[r["variant"]][r["seed"]] = r
    variants = [v for v in ORDER if v in by] + sorted(set(by) - set(ORDER))
    lines = ["| head | decoding | seeds | dev P | dev R | dev F1 | test P | test R | test F1 "
             "| minutes |", "|---" * 10 + "|"]
    for v in variants:
        runs = list(by[v].values())
        cells = [fmt([r[split][k] for r in runs]) for split in ("dev", "test")
                 for k in ("precision", "recall", "f1")]
        minutes = mean_sd([r["minutes"] for r in runs])[0]
        how = ", ".join(sorted({decoding(r) for r in runs}))
        lines.append(f"| {v} | {how} | {len(runs)} | " + " | ".join(cells) + f" | {minutes:.0f} |")
    for base in BASELINES:
        if base not in by or len(variants) < 2:
            continue
        lines += ["", f"Paired by seed, minus the {base} head (mean +- sd, seeds won; p: "
                  "two-sided paired t-test):", "", "| head | dev F1 | test F1 |", "|---|---|---|"]
        for v in variants:
            seeds = sorted(set(by[v]) & set(by[base]))
            if v == base or not seeds:
                continue
            diffs = {key: [by[v][s][key] - by[base][s][key] for s in seeds]
                     for key in ("dev_f1", "test_f1")}
            lines.append(f"| {v} | " + " | ".join(paired_cell_p(d, 2) for d in diffs.values())
                         + " |")
    kinds = sorted({k for r in records for k in r["test"].get("by_type", {})})
    if kinds:
        lines += ["", "Test F1 by entity type (mean +- sd over seeds):", "",
                  "| head | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
        for v in variants:
            runs = [r for r in by[v].values() if "by_type" in r["test"]]
            lines.append(f"| {v} | " + " | ".join(
                fmt([r["test"]["by_type"][k]["f1"] for r in runs if k in r["test"]["by_type"]])
                for k in kinds) + " |")
    settings, = {settings_text(r["hparams"]) for r in records}
    lines += ["", "Dev scores are of the checkpoint that dev F1 selected (optimistic); test is "
              "held out and scored once, on that checkpoint."]
    lines += ["", f"Settings: {settings}, encoder "
              + ", ".join(sorted({r["encoder"] for r in records})) + ", device "
              + ", ".join(sorted({r["device"] for r in records})) + "."]
    lines += ["", *(f"- {line}" for line in dictionary_lines(records, label=lambda r: r["variant"]))]
    return "\n".join(lines) + "\n", by, variants


def settings_text(hparams):
    extra = " ".join(hparams.get("extra") or [])
    return (f"lr {hparams['lr']:g}, batch {hparams['batch_size']}, {hparams['epochs']} epochs"
            + (f", extra `{extra}`" if extra else ""))


def draw(by, variants, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    width = 0.38
    for i, key in enumerate(("dev_f1", "test_f1")):
        means, sds = zip(*(mean_sd([r[key] for r in by[v].values()]) for v in variants))
        xs = [j + (i - 0.5) * width for j in range(len(variants))]
        ax.bar(xs, means, width, yerr=sds, capsize=3, label=key.replace("_f1", ""))
    ax.set_xticks(range(len(variants)), variants)
    low = min(r[k] for v in variants for r in by[v].values() for k in ("dev_f1", "test_f1"))
    ax.set_ylim(max(0, low - 5), None)
    ax.set_ylabel("entity F1 (CoNLL-2003)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--plot")
    p.add_argument("--lr", type=float, help="only the runs with this learning rate")
    args = p.parse_args(argv)
    records = [r for r in read_results(args.results)
               if args.lr is None or r["hparams"]["lr"] == args.lr]
    settings = {settings_text(r["hparams"]) for r in records}
    if len(settings) != 1:
        raise SystemExit(f"{args.results}: expected the runs of one setting (choose with --lr), "
                         f"found {len(settings)}: {sorted(settings)}")
    text, by, variants = report(records)
    write_report(args.out, text)
    print(text)
    if args.plot:
        draw(by, variants, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
