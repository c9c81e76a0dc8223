"""Segmentation statistics by dictionary size (the paper's Figure 3): average spans per
sentence and the span-length histogram (in words), as a table and a PNG plot."""

import glob
import itertools
import os

import numpy as np

from span_plugin.formats.lines import open_text
from span_plugin.tokenizers import words as W
from span_plugin.preprocess.segmentation.ngrams import NgramDict, default_ngrams_path, load_ngrams
from span_plugin.preprocess.segmentation.segment import Segmenter

MAX_LEN = 5  # histogram bins 1..5 words (longer n-grams, if any, go in the last bin)


def read_sentences(texts=(), folders=(), max_lines=None):
    """Lines of text files, and of ``raw/*.input*`` in task folders."""
    paths = list(texts or [])
    for folder in folders or []:
        found = sorted(glob.glob(os.path.join(folder, "raw", "*.input*")))
        if not found:
            raise FileNotFoundError(f"{folder}: no raw/*.input* text (made by "
                                    f"`span-preprocess glue`)")
        paths += found
    out = []
    for p in paths:
        with open_text(p, "r", errors="replace") as f:
            out += [line.rstrip("\r\n") for line in itertools.islice(f, max_lines)]
    return out


def sentence_keys(sentences, words):
    """Matching keys per sentence in the word scheme ``words`` of a dictionary."""
    split = W.splitter(words)
    return [W.match_keys(split(s)) for s in sentences]


def segment_stats(keys_list, dictionary):
    """keys_list: matching keys per sentence. Returns a dict with ``spans_per_sentence``,
    ``words_per_sentence``, ``hist`` (fraction of spans of 1..MAX_LEN words, [MAX_LEN])
    and ``multiword_words`` (fraction of words inside multi-word spans)."""
    seg = Segmenter(dictionary, "greedy")
    counts = np.zeros(MAX_LEN + 1, dtype=np.int64)
    n_sent = n_spans = n_words = 0
    for keys in keys_list:
        if not keys:
            continue
        lengths = seg(keys)
        n_sent += 1
        n_spans += len(lengths)
        n_words += len(keys)
        counts += np.bincount(np.minimum(lengths, MAX_LEN), minlength=MAX_LEN + 1)
    hist = counts[1:] / max(1, counts.sum())
    multi = (counts[2:] * np.arange(2, MAX_LEN + 1)).sum() / max(1, n_words)
    return {"sentences": n_sent, "spans_per_sentence": n_spans / max(1, n_sent),
            "words_per_sentence": n_words / max(1, n_sent), "hist": hist,
            "multiword_words": multi}


def _sizes(spec, total):
    out = []
    for s in str(spec).split(","):
        s = s.strip().lower()
        if s:
            out.append(total if s == "all" else min(int(float(s)), total))
    return sorted(set(out))


def run_stats(texts=(), folders=(), ngrams_path=None, sizes="1000,5000,20000,all",
              plot=None, max_lines=None, out=print):
    path = ngrams_path or default_ngrams_path()
    full = load_ngrams(path)
    ranked = sorted(full.counts.items(), key=lambda gc: (-gc[1], gc[0]))
    sentences = read_sentences(texts, folders, max_lines)
    keys_list = sentence_keys(sentences, full.words)
    rows = []
    for k in _sizes(sizes, len(ranked)):
        st = segment_stats(keys_list, NgramDict.from_counts(ranked[:k]))
        rows.append((k, st))
    none = segment_stats(keys_list, NgramDict())
    out(f"dictionary: {path} ({len(ranked)} n-grams); sentences: {none['sentences']}, "
        f"{none['words_per_sentence']:.2f} words each")
    head = "| dict size | spans/sentence | words in multi-word spans | " + \
        " | ".join(f"len {i}" for i in range(1, MAX_LEN)) + f" | len {MAX_LEN}+ |"
    out(head)
    out("|" + "---|" * (3 + MAX_LEN))
    for k, st in [(0, none)] + rows:
        out(f"| {k} | {st['spans_per_sentence']:.2f} | {100 * st['multiword_words']:.1f}% | "
            + " | ".join(f"{100 * h:.1f}%" for h in st["hist"]) + " |")
    if plot:
        _plot(rows, none, plot)
        out(f"plot: {plot}")
    return rows


def _plot(rows, none, path):
    from span_plugin.requires import require

    require("matplotlib", "--plot", "pip install matplotlib (or 'span_plugin[train]')")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    ks = [k for k, _ in rows]
    a.plot(ks, [st["spans_per_sentence"] for _, st in rows], "o-", label="greedy spans")
    a.axhline(none["spans_per_sentence"], color="gray", ls="--", label="words (no n-grams)")
    a.set_xscale("log")
    a.set_xlabel("dictionary size (top-K n-grams)")
    a.set_ylabel("average spans per sentence")
    a.legend()
    width = 0.8 / max(1, len(rows))
    x = np.arange(1, MAX_LEN + 1)
    for i, (k, st) in enumerate(rows):
        b.bar(x + (i - (len(rows) - 1) / 2) * width, 100 * st["hist"], width, label=f"{k}")
    b.set_xticks(x, [str(i) for i in range(1, MAX_LEN)] + [f"{MAX_LEN}+"])
    b.set_xlabel("span length (words)")
    b.set_ylabel("% of spans")
    b.set_yscale("log")
    b.legend(title="dictionary size", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
