"""Report of the powered grid (experiments/sf_grid.py): does Span Fine-tuning help?

    python experiments/sf_report.py --out experiments/RESULTS_SF_MINILM.md \\
        --plot docs/figures/sf_grid_minilm.png

- the learning-rate selection (CoLA seed 0, never reported);
- per task and variant: median over the reported seeds, min-max, mean +- sd, and runs
  that collapsed to one class (CoLA MCC <= 5) flagged;
- paired differences to the plain head (same task and seed): mean with a 95% t
  interval, a two-sided sign test, and the power of those pairs: the smallest true
  difference a two-sided paired t test (5%) would detect with 80% probability, given the
  observed sd of the differences;
- the same for SF minus each of its controls (random, chunker and no segmentation, no
  <s>, other dictionary sizes): whether the n-gram segmentation itself matters;
- the paper's Figure 4 on CoLA (no <s>, dictionary sizes, random and no segmentation);
- the earlier 3-seed grid (dictionary counted on GLUE training text, lr chosen on a
  reported seed) beside it, from experiments/results/glue_minilm.jsonl.
Every metric is recomputed from the stored dev predictions and checked against fairseq's.
The hand-written part of the output file (above its first ``---`` line) is kept.
"""

import argparse
import statistics
from collections import defaultdict

import numpy as np

from glue_report import metric_from_predictions
from grid_lib import ROOT, dictionary_lines, read_results, write_report
from sf_grid import LR_SEED, chosen_lrs

NAMES = {"plain": "plain head", "sf": "SF (cnn-cnn, greedy, 100k)",
         "random": "SF, random segmentation", "chunker": "SF, chunker segmentation",
         "cnn": "CNN, no segmentation", "nocat": "SF without <s>",
         "dict20k": "SF, 20k dictionary", "dict400k": "SF, 400k dictionary"}
ORDER = list(NAMES)
CONTROLS = ORDER[2:]  # each changes one thing of SF: segmentation, <s>, dictionary size
COLLAPSED = 5.0  # CoLA MCC at or below: the model predicts (nearly) one class


def paired(diffs):
    """Mean, 95% t interval, sign-test p, sd and 80%-power effect of paired differences
    (None if < 2)."""
    from scipy.stats import binomtest, t

    if len(diffs) < 2:
        return None
    d = np.asarray(diffs, dtype=float)
    sd = d.std(ddof=1)
    mean, se = d.mean(), sd / np.sqrt(len(d))
    half = t.ppf(0.975, len(d) - 1) * se
    wins, losses = int((d > 0).sum()), int((d < 0).sum())
    p = binomtest(wins, wins + losses).pvalue if wins + losses else 1.0
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "wins": wins,
            "losses": losses, "n": len(d), "p_sign": p, "sd": sd,
            "detectable": detectable_effect(sd, len(d))}


def detectable_effect(sd, n, power=0.8, alpha=0.05):
    """The true mean difference a two-sided one-sample t test at level alpha on n paired
    differences of standard deviation sd rejects with probability power (exact, from the
    noncentral t distribution). Divide it by sd to compare designs."""
    from scipy.optimize import brentq
    from scipy.stats import nct, t

    if sd == 0:
        return 0.0
    df, crit = n - 1, t.ppf(1 - alpha / 2, n - 1)

    def shortfall(effect):
        nc = effect * np.sqrt(n) / sd
        wrong_side = nct.cdf(-crit, df, nc)  # below 1e-15 where scipy returns nan for it
        return nct.sf(crit, df, nc) + np.nan_to_num(wrong_side) - power

    hi = sd
    while shortfall(hi) < 0:  # grow the bracket: n = 2 needs about 10 sd
        hi *= 2
    return brentq(shortfall, 0.0, hi, xtol=1e-9 * sd)


def fmt_paired(s):
    if s is None:  # fewer than two pairs: no interval; the five columns stay aligned
        return "- | - | - | - | -"
    return (f"{s['mean']:+.2f} [{s['lo']:+.2f}, {s['hi']:+.2f}] | {s['wins']}-{s['losses']} "
            f"| {s['p_sign']:.3f} | {s['sd']:.2f} | {s['detectable']:.2f}")


def cells(runs):
    """(task, variant) -> {seed: run}, reported seeds only."""
    by = defaultdict(dict)
    for r in runs:
        if r["seed"] != LR_SEED:
            by[(r["task"], r["variant"])][r["seed"]] = r
    return by


def summary_rows(by, tasks):
    lines = ["| task | variant | seeds | median | min-max | mean +- sd | collapsed |",
             "|---|---|---|---|---|---|---|"]
    for t in tasks:
        for v in ORDER:
            runs = by.get((t, v))
            if not runs:
                continue
            vals = [r["value"] for r in runs.values()]
            flat = [s for s, r in sorted(runs.items())
                    if r["metric"] == "mcc" and r["value"] <= COLLAPSED]
            sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
            lines.append(f"| {t} | {NAMES[v]} | {len(vals)} | {statistics.median(vals):.2f} | "
                         f"{min(vals):.2f}-{max(vals):.2f} | {np.mean(vals):.2f} +- {sd:.2f} | "
                         f"{', '.join(f'seed {s}' for s in flat) or '-'} |")
    return lines


def paired_rows(by, tasks, pairs, header, named):
    """One row per task and (a, b) in pairs with both arms run: a - b paired by seed,
    the row named after ``named(a, b)`` (the arm that is not the same in every row)."""
    lines = [f"| task | {header} | pairs | mean [95% t interval] | wins-losses | "
             "sign test p | sd of differences | detectable at 80% power |",
             "|---|---|---|---|---|---|---|---|"]
    for t in tasks:
        for a, b in pairs:
            ra, rb = by.get((t, a), {}), by.get((t, b), {})
            diffs = [ra[s]["value"] - rb[s]["value"] for s in sorted(ra) if s in rb]
            if diffs:
                lines.append(f"| {t} | {NAMES[named(a, b)]} | {len(diffs)} | "
                             f"{fmt_paired(paired(diffs))} |")
    return lines


def selection_rows(runs):
    lrs = chosen_lrs(runs)
    got = defaultdict(dict)
    for r in runs:
        if r["seed"] == LR_SEED:
            got[r["variant"]][r["hparams"]["lr"]] = r["value"]
    all_lrs = sorted({lr for g in got.values() for lr in g})
    lines = ["| variant | " + " | ".join(f"lr {lr:g}" for lr in all_lrs) + " | chosen |",
             "|---" * (len(all_lrs) + 2) + "|"]
    for v in ORDER:
        if v in got:
            lines.append(f"| {NAMES[v]} | " + " | ".join(
                f"{got[v][lr]:.2f}" if lr in got[v] else "-" for lr in all_lrs)
                + f" | {lrs.get(v) or '-'} |")
    return lines


def old_grid_rows(path):
    """The earlier grid: per task, plain vs sf means and the paired interval."""
    runs = read_results(path)
    by = defaultdict(dict)
    for r in runs:
        by[(r["task"], r["variant"])][r["seed"]] = r
    lines = ["| task | plain (mean, 3 seeds) | SF (mean) | SF - plain [95% t interval] |",
             "|---|---|---|---|"]
    for t in sorted({r["task"] for r in runs}):
        base, sf = by.get((t, "plain"), {}), by.get((t, "sf"), {})
        diffs = [sf[s]["value"] - base[s]["value"] for s in sorted(sf) if s in base]
        s = paired(diffs)
        interval = f"{s['mean']:+.2f} [{s['lo']:+.2f}, {s['hi']:+.2f}]" if s else "-"
        lines.append(f"| {t} | {np.mean([r['value'] for r in base.values()]):.2f} | "
                     f"{np.mean([r['value'] for r in sf.values()]):.2f} | {interval} |")
    return lines + [""] + [f"- {line}" for line in dictionary_lines(runs)]


def report(runs, old_path, plot=None):
    if not runs:
        return "No runs yet.\n"
    worst = max(abs(metric_from_predictions(r) - r["value"]) for r in runs)
    by = cells(runs)
    tasks = [t for t in ("CoLA", "MRPC") if any(k[0] == t for k in by)]
    out = [f"Runs: {len(runs)} ({sum(r['seed'] == LR_SEED for r in runs)} for the learning "
           f"rate); encoder: {', '.join(sorted({r['encoder'] for r in runs}))}; devices: "
           f"{', '.join(sorted({r['device'] for r in runs}))}. Every metric recomputed from the "
           f"stored dev predictions agrees with fairseq's within {worst:.2f} points.", "",
           *(f"- {line}" for line in dictionary_lines(runs, label=lambda r: r["variant"])), "",
           "### Learning rate (CoLA dev MCC, seed 0, not reported)", "",
           *selection_rows(runs), "", "### Dev results (reported seeds)", "",
           *summary_rows(by, tasks), "",
           "### Paired differences to the plain head (same seed)", "",
           *paired_rows(by, tasks, [(v, "plain") for v in ORDER[1:]], "variant - plain",
                        named=lambda a, b: a), "",
           "### The controls: SF minus each variant (same seed)", "",
           "Does the greedy n-gram segmentation itself matter? Positive: SF (greedy, 100k, "
           "with <s>) ahead of the control.", "",
           *paired_rows(by, tasks, [("sf", v) for v in CONTROLS], "SF - variant",
                        named=lambda a, b: b), "",
           "### The earlier grid (3 seeds; dictionary counted on GLUE training text; lr "
           "chosen on a reported seed)", "", *old_grid_rows(old_path), ""]
    if plot:
        draw(by, plot)
    return "\n".join(out)


DICT_SIZES = (("dict20k", 20_000), ("sf", 100_000), ("dict400k", 400_000))


def draw(by, path):
    """Left: every CoLA run by variant (dots) with medians. Right, the paper's Figure 4:
    CoLA MCC against the dictionary size (the seeds shared by the three sizes, median
    and runs), beside random and no segmentation and the plain head (their medians over
    the same seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [v for v in ("plain", "sf", "dict20k", "dict400k", "nocat", "random", "cnn",
                         "chunker") if by.get(("CoLA", v))]
    fig, (ax, fig4) = plt.subplots(1, 2, figsize=(12, 3.8), width_ratios=(2, 1))
    for i, v in enumerate(shown):
        vals = [r["value"] for r in by[("CoLA", v)].values()]
        ax.scatter([i] * len(vals), vals, alpha=0.6)
        ax.hlines(statistics.median(vals), i - 0.3, i + 0.3, color="black")
    ax.set_xticks(range(len(shown)), [NAMES[v] for v in shown], rotation=25, ha="right",
                  fontsize=8)
    ax.set_ylabel("CoLA dev MCC")
    ax.set_title("all-MiniLM-L6-v2: runs (dots) and medians (bars)")

    sizes = [(v, n) for v, n in DICT_SIZES if by.get(("CoLA", v))]
    seeds = sorted(set.intersection(*(set(by[("CoLA", v)]) for v, _ in sizes))) if sizes else []
    if seeds:
        xs = [n for _, n in sizes]
        for s in seeds:
            fig4.plot(xs, [by[("CoLA", v)][s]["value"] for v, _ in sizes], color="grey",
                      alpha=0.3, marker=".")
        fig4.plot(xs, [statistics.median(by[("CoLA", v)][s]["value"] for s in seeds)
                       for v, _ in sizes], color="black", marker="o", label="greedy SF (median)")
        for v, style, colour in (("random", "--", "tab:red"), ("cnn", ":", "tab:red"),
                                 ("plain", "-.", "tab:blue")):
            runs = by.get(("CoLA", v), {})
            shared = [runs[s]["value"] for s in seeds if s in runs]
            if shared:
                fig4.axhline(statistics.median(shared), linestyle=style, color=colour,
                             label=f"{NAMES[v]} (median)")
        fig4.set_xscale("log")
        fig4.set_xticks(xs, [f"{n // 1000}k" for n in xs])
        fig4.minorticks_off()
        fig4.legend(fontsize=7)
    fig4.set_xlabel("n-gram dictionary size")
    fig4.set_title("Figure 4 on CoLA (" + (f"seed{'s' * (len(seeds) > 1)} "
                   f"{', '.join(map(str, seeds))}" if seeds else "no seed yet") + ")", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "sf_minilm.jsonl"))
    p.add_argument("--old-results",
                   default=str(ROOT / "experiments" / "results" / "glue_minilm.jsonl"))
    p.add_argument("--out", help="markdown (default: print)")
    p.add_argument("--plot", help="PNG")
    args = p.parse_args(argv)
    text = report(read_results(args.results), args.old_results, args.plot)
    if args.out:
        write_report(args.out, text)
    else:
        print(text)


if __name__ == "__main__":
    main()
