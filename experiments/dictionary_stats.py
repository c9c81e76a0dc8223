"""The paper's Figure 3 on our dictionaries: spans per sentence and words per span against
dictionary size, for CoLA and MRPC train and dev, in both word schemes.

    python experiments/dictionary_stats.py \
        --dict bert=runs/dictionaries/wiki.bert.txt.gz \
        --dict gpt2=runs/dictionaries/wiki.gpt2.txt.gz \
        --out docs/DICTIONARY_STATS.md --plot docs/figures/dictionary_size.png

The sizes are prefixes of each dictionary (its most frequent K n-grams), as
``--ngrams-top-k K`` uses them. Sentences are the input fields of the GLUE TSVs.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from span_plugin.formats.glue import TASKS, read_split  # noqa: E402
from span_plugin.preprocess.ngrams import NgramDict, load_ngrams, read_header  # noqa: E402
from span_plugin.preprocess.stats import segment_stats, sentence_keys  # noqa: E402

SIZES = (20_000, 50_000, 100_000, 200_000, 400_000, None)  # None: every entry
DATASETS = (("CoLA", "train"), ("CoLA", "dev"), ("MRPC", "train"), ("MRPC", "dev"))


def glue_sentences(glue_dir, task, split):
    rows = read_split(TASKS[task], os.path.join(glue_dir, task, split + ".tsv"), split)
    return [s for col in rows.inputs for s in col]


def measure(dicts, glue_dir):
    """-> {(scheme, task, split): [(size, stats)]}, with size 0 = no dictionary."""
    out = {}
    for scheme, path in dicts.items():
        full = load_ngrams(path)
        ranked = sorted(full.counts.items(), key=lambda gc: (-gc[1], gc[0]))
        prefixes = [(0, NgramDict())] + [
            (len(ranked) if k is None else k, NgramDict.from_counts(ranked[:k]))
            for k in SIZES if k is None or k < len(ranked)]
        for task, split in DATASETS:
            keys = sentence_keys(glue_sentences(glue_dir, task, split), full.words)
            out[(scheme, task, split)] = [(k, segment_stats(keys, d)) for k, d in prefixes]
            print(f"{scheme} {task} {split}: done", flush=True)
    return out


def table(results, dicts):
    lines = []
    for scheme, path in dicts.items():
        head = read_header(path)
        lines += [f"### Word scheme `{scheme}`", "",
                  f"Dictionary `{os.path.basename(path)}`: corpus {head.get('corpus', '?')}, "
                  f"{head.get('corpus_tokens', '?')} words, n = {head.get('n', '?')}, count >= "
                  f"{head.get('min_count', '?')}.", "",
                  "| data | dict size | spans / sentence | words / span | "
                  "words in multi-word spans |", "|---|---|---|---|---|"]
        for task, split in DATASETS:
            for k, st in results[(scheme, task, split)]:
                wps = st["words_per_sentence"] / max(st["spans_per_sentence"], 1e-9)
                lines.append(f"| {task} {split} | {k if k else 'none'} | "
                             f"{st['spans_per_sentence']:.2f} | {wps:.3f} | "
                             f"{100 * st['multiword_words']:.1f}% |")
        lines.append("")
    return "\n".join(lines)


def plot(results, dicts, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    styles = {"bert": "-", "gpt2": "--"}
    for (scheme, task, split), rows in sorted(results.items()):
        rows = [(k, st) for k, st in rows if k]
        ks = [k for k, _ in rows]
        label = f"{task} {split} ({scheme})"
        axes[0].plot(ks, [st["spans_per_sentence"] for _, st in rows], styles.get(scheme, ":"),
                     marker="o", label=label)
        axes[1].plot(ks, [st["words_per_sentence"] / st["spans_per_sentence"] for _, st in rows],
                     styles.get(scheme, ":"), marker="o", label=label)
    for ax, name in zip(axes, ("spans per sentence", "words per span")):
        ax.set_xscale("log")
        ax.set_xlabel("dictionary size (most frequent K n-grams)")
        ax.set_ylabel(name)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dict", action="append", required=True, metavar="SCHEME=PATH")
    p.add_argument("--glue-dir", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                      "shared", "data", "glue"))
    p.add_argument("--out", help="markdown table (default: print)")
    p.add_argument("--plot", help="PNG")
    a = p.parse_args(argv)
    dicts = dict(d.split("=", 1) for d in a.dict)
    results = measure(dicts, a.glue_dir)
    text = table(results, dicts)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        print(text)
    if a.plot:
        plot(results, dicts, a.plot)


if __name__ == "__main__":
    main()
