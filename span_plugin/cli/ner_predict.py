"""Predictions of a ``span_tagging`` / ``span_labeling`` checkpoint on a tagging folder's
splits: entity P/R/F1 against the folder's gold tags, and the CoNLL source file with the
predicted tag appended to every word line (conlleval's input format: ``word ... gold
predicted``; blank and ``-DOCSTART-`` lines as they are).

    python -m span_plugin.cli.ner_predict --checkpoint runs/ner/checkpoints/checkpoint_best.pt \\
        --split valid test --conll-out dev.conll test.conll --results results.json

Items come from ``raw/{split}.input0`` (the words the model was trained on) and go back
to their source lines through ``raw/{split}.source``; items cut from one long sentence
are joined again. The predicted column holds the IOB2 tags of the predicted entities
(for tagging heads, the entities conlleval reads from the raw predicted tags; so
conlleval on the file gives the figures printed here).
"""

import argparse
import json
import os
import sys

from span_plugin.modules import entities as ner

from span_plugin.formats import tags as T
from span_plugin.preprocess.binarize import read_lines


def read_items(data, split):
    """Words and gold IOB2 tags of every item of a split, and its source lines."""
    raw = os.path.join(data, "raw")
    words = [line.split(" ") for line in _lines(os.path.join(raw, f"{split}.input0"))]
    gold = [line.split(" ") for line in _lines(os.path.join(raw, f"{split}.label"))]
    source = [tuple(map(int, line.split())) for line in _lines(os.path.join(raw, f"{split}.source"))]
    return words, gold, source


def _lines(path):
    return read_lines(path, 0, os.path.getsize(path))


def predicted_tags(hub, words, gold):
    """IOB2 tags of the predicted entities per item, and the scores against ``gold``."""
    entities = hub.predict_words(words)
    tags = [T.tags_of(e, len(w)) for e, w in zip(entities, words)]
    return tags, scores(entities, [T.entities(g) for g in gold])


def scores(predicted, gold):
    """Entity-level precision, recall, F1 (percent) over all types and per type."""
    def prf(pred, gold_):
        tp, n_pred, n_gold = ner.match_counts(pred, gold_)
        return dict(zip(("precision", "recall", "f1"),
                        (round(100 * x, 2) for x in ner.prf(tp, n_pred, n_gold))),
                    entities=n_gold)

    kinds = sorted({e[2] for items in (predicted, gold) for es in items for e in es})
    by_type = {k: prf([[e for e in es if e[2] == k] for es in predicted],
                      [[e for e in es if e[2] == k] for es in gold]) for k in kinds}
    return {**prf(predicted, gold), "by_type": by_type}


def write_conll(source_path, out_path, source, tags):
    """The source file with a predicted tag appended to each word line."""
    by_line = {}
    for (first, count), item_tags in zip(source, tags):
        assert count == len(item_tags)
        for k, tag in enumerate(item_tags):
            by_line[first + k] = tag
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    lines = read_lines(source_path, 0, os.path.getsize(source_path))
    with open(out_path, "w", encoding="utf-8") as f:
        for number, line in enumerate(lines, start=1):
            f.write(f"{line} {by_line[number]}\n" if number in by_line else line + "\n")
    return len(by_line)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", help="the tagging folder (default: the checkpoint's record)")
    p.add_argument("--split", nargs="+", default=["valid"])
    p.add_argument("--conll-out", nargs="*", default=[],
                   help="one CoNLL prediction file per --split (optional)")
    p.add_argument("--results", help="write {split: {precision, recall, f1, by_type}} here (JSON)")
    a = p.parse_args(argv)
    if a.conll_out and len(a.conll_out) != len(a.split):
        p.error("give one --conll-out per --split")
    from span_plugin.inference.hub import SpanHubInterface

    hub = SpanHubInterface.from_pretrained(a.checkpoint, data=a.data)
    if not hasattr(hub, "predict_words"):
        p.error(f"{a.checkpoint} is not a span_tagging or span_labeling checkpoint")
    sources = {k: v["path"] for k, v in (hub.record or {}).get("source", {}).items()}
    results = {}
    for n, split in enumerate(a.split):
        words, gold, source = read_items(hub.data, split)
        tags, results[split] = predicted_tags(hub, words, gold)
        results[split]["items"] = len(words)
        print(f"{split}: " + ", ".join(f"{k} {v}" for k, v in results[split].items()
                                       if k != "by_type"))
        print("    " + "; ".join(f"{k} F1 {v['f1']}" for k, v in results[split]["by_type"].items()))
        if a.conll_out:
            if split not in sources or not os.path.exists(sources[split]):
                raise SystemExit(f"the source file of {split} ({sources.get(split)}) is not here: "
                                 f"no CoNLL output")
            written = write_conll(sources[split], a.conll_out[n], source, tags)
            print(f"{a.conll_out[n]}: {written} word lines with predictions")
    if a.results:
        with open(a.results, "w", encoding="utf-8") as f:
            json.dump({"checkpoint": os.path.abspath(a.checkpoint), "dev": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
