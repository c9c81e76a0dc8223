"""Report of the masking ablation (experiments/masking_ablation.py): a table of the final
held-out losses and one figure with every curve.

    .venv/bin/python experiments/masking_report.py

Writes experiments/RESULTS_MASKING_MINILM.md (keeping the hand-written part above its
first ``---`` line) and docs/figures/masking_ablation.png.
"""

import argparse
from pathlib import Path

from grid_lib import ROOT, dictionary_lines, read_results, write_report

ORDER = ["span+sbo", "span", "whole-word", "token"]
COLORS = {"span+sbo": "tab:red", "span": "tab:orange", "whole-word": "tab:blue", "token": "tab:green",
          "token-dm": "tab:olive"}


def latest(records):
    """The last record of each condition, in ORDER."""
    by = {r["condition"]: r for r in records}
    return [by[c] for c in ORDER if c in by]


def plot(runs, path, title="masking ablation"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schemes = list(runs[0]["fixed_curve"][0].keys() - {"num_updates"})
    schemes.sort(key=["token", "whole-word", "span"].index)
    fig, axes = plt.subplots(1, 1 + len(schemes), figsize=(4.6 * (1 + len(schemes)), 4.0))
    ax = axes[0]
    for r in runs:
        c = COLORS[r["condition"]]
        t = r["train_curve"]
        ax.plot([x["num_updates"] for x in t], [x["mlm_loss"] for x in t], color=c, alpha=0.25, lw=0.8)
        v = r["valid_curve"]
        ax.plot([x["num_updates"] for x in v], [x["mlm_loss"] for x in v], "o-", color=c,
                label=f"{r['condition']} MLM")
        if any("sbo_loss" in x for x in v):
            ax.plot([x["num_updates"] for x in v], [x["sbo_loss"] for x in v], "s--", color=c,
                    label=f"{r['condition']} SBO")
    ax.set_title("own masking (not comparable across runs)\nheld-out (points), train (faint)", fontsize=9)
    ax.set_xlabel("updates")
    ax.set_ylabel("loss, bits per masked token")
    ax.legend(fontsize=7)
    lo = min(min(x["mlm_loss"] for x in r["valid_curve"]) for r in runs)
    ax.set_ylim(lo - 0.5, lo + 6)
    for ax, scheme in zip(axes[1:], schemes):
        for r in runs:
            f = r["fixed_curve"]
            ax.plot([x["num_updates"] for x in f], [x[scheme] for x in f], "o-",
                    color=COLORS[r["condition"]], label=r["condition"])
        ax.set_title(f"same fixed {scheme} masking of the held-out text\n(MLM loss, every run)", fontsize=9)
        ax.set_xlabel("updates")
        ax.legend(fontsize=7)
    fig.suptitle(f"Continued pre-training of all-MiniLM-L6-v2 on Wikipedia: {title} "
                 f"({runs[0]['updates']} updates of {runs[0]['batch']} blocks of "
                 f"<= {runs[0]['tokens_per_sample']} tokens)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def table(runs):
    schemes = [s for s in ("token", "whole-word", "span") if s in runs[0]["fixed_curve"][-1]]
    head = ("| condition | --masking | --sbo-weight | own masking: MLM | own: SBO | "
            + " | ".join(f"fixed {s} masking: MLM" for s in schemes)
            + " | train min (wall / CPU) | eval min (wall / CPU) |")
    rows = [head, "|" + "---|" * (7 + len(schemes))]
    best = {s: min(r["fixed_curve"][-1][s] for r in runs) for s in schemes}
    for r in runs:
        v, f = r["valid_curve"][-1], r["fixed_curve"][-1]
        fixed = [f"**{f[s]:.3f}**" if f[s] == best[s] else f"{f[s]:.3f}" for s in schemes]
        sbo = f"{v['sbo_loss']:.3f}" if "sbo_loss" in v else "-"
        cpu = "unknown" if r["train_cpu_min"] is None else r["train_cpu_min"]  # a launch killed from outside
        cells = [r["condition"], r["masking"], r["sbo_weight"], f"{v['mlm_loss']:.3f}", sbo, *fixed,
                 f"{r['train_wall_min']} / {cpu}", f"{r['eval_wall_min']} / {r['eval_cpu_min']}"]
        rows.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(rows), schemes


def curves_table(runs, schemes):
    updates = [x["num_updates"] for x in runs[0]["fixed_curve"]]
    rows = ["| condition | fixed masking | " + " | ".join(str(u) for u in updates) + " |",
            "|---|---|" + "---|" * len(updates)]
    for s in schemes:
        for r in runs:
            rows.append(f"| {r['condition']} | {s} | "
                        + " | ".join(f"{x[s]:.3f}" for x in r["fixed_curve"]) + " |")
    return "\n".join(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "masking_ablation.jsonl"))
    p.add_argument("--out", default=str(ROOT / "experiments" / "RESULTS_MASKING_MINILM.md"))
    p.add_argument("--figure", default=str(ROOT / "docs" / "figures" / "masking_ablation.png"))
    args = p.parse_args()
    runs = latest(read_results(args.results))
    if not runs:
        raise SystemExit(f"{args.results}: no finished run yet (experiments/masking_ablation.py)")
    plot(runs, Path(args.figure))
    r0 = runs[0]
    main_table, schemes = table(runs)
    d = r0["data"]
    dictionaries = "\n".join(f"- {line}" for line in dictionary_lines(runs, label=lambda r: r["condition"]))
    first = {r["condition"]: r["train_curve"][0]["mlm_loss"] for r in runs if r["train_curve"]}
    text = f"""## Setup

- Model: {r0['model']}, `--arch {r0['arch']}` (the SBO head is built in every run and
  trained only with `--sbo-weight 1`); the converted model has no trained masked-LM
  head (sentence-transformers drops it): span-convert gives it a fresh one, so the first
  train_inner MLM losses are {', '.join(f'{v:.1f}' for v in first.values())} bits.
- Data: train = the first {d['train']['paragraphs']} paragraphs ({d['train']['articles']} whole
  articles) of `{d['train']['file']}`; held out = the first {d['valid']['paragraphs']}
  paragraphs ({d['valid']['articles']} articles) of `{d['valid']['file']}` (other articles).
  MiniLM's WordPiece, `--sample-break-mode {r0['break_mode']}`, blocks of at most
  {r0['tokens_per_sample']} tokens.
{dictionaries}
- Training: {r0['updates']} updates of {r0['batch']} blocks, Adam, lr {r0['lr']} (warm-up
  {r0['warmup']}, linear decay to 0), dropout 0.1, seed {r0['seed']}, CPU, {r0['threads']}
  thread(s); held-out validation and a checkpoint every {r0['interval']} updates.
- Fixed held-out maskings: {', '.join(schemes)} masking of the held-out blocks with seed
  {r0['eval_seed']} (80/10/10 as in training; {', '.join(f"{k}: {v} masked tokens" for k, v in r0['eval_masked_tokens'].items())}),
  the same positions and replacements for every checkpoint of every run.

## Final held-out losses (bits per masked token, after {r0['updates']} updates)

"Own masking" is fairseq's validation with the run's own scheme (different positions in
each run: not comparable across rows). The fixed columns are comparable across rows
(best in bold).

{main_table}

Fixed-masking MLM loss at every checkpoint:

{curves_table(runs, schemes)}

![masking ablation](../docs/figures/masking_ablation.png)

Generated by `experiments/masking_report.py` from `experiments/results/masking_ablation.jsonl`.
"""
    write_report(args.out, text)
    print(f"wrote {args.out} and {args.figure}")


if __name__ == "__main__":
    main()
