"""What ``span-predict`` writes for a ``span_tagging`` / ``span_labeling`` model on a
tagging folder's splits: entity P/R/F1 against the folder's gold tags, the CoNLL source
file with the predicted tag appended to every word line (conlleval's input), and JSON
Lines entities (nested ones too). Design notes: docs/NER.md, "Module notes"."""

import json
import os

from span_plugin.formats import tags as T
from span_plugin.formats.conll import DOCSTART
from span_plugin.files.atomic import atomic_file
from span_plugin.formats.flag_values import at_least_zero
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_lines
from span_plugin.portable.outputs import Batching, Flag, Output, chunks
from span_plugin.modules import entities as ner
from span_plugin.preprocess.file_records import sha256, short
from span_plugin.preprocess.progress import bar
from span_plugin.preprocess.records import provenance


def read_items(data, split):
    """Words and gold IOB2 tags of every item of a split, and its source lines
    (``(first line, word count)``), checked to hold one item a row and as many words,
    tags and source words in each: a mismatch names the file and the line."""
    raw = os.path.join(data, "raw")
    paths = [os.path.join(raw, f"{split}.{ext}") for ext in ("input0", "label", "source")]
    words = [line.split(" ") for line in _lines(paths[0])]
    gold = [line.split(" ") for line in _lines(paths[1])]
    source = [_source_line(paths[2], n, line) for n, line in enumerate(_lines(paths[2]), 1)]
    for path, rows in zip(paths[1:], (gold, source)):
        if len(rows) != len(words):
            raise BadInputError(f"{path}: {len(rows)} lines but {paths[0]} has {len(words)}; "
                                f"line {min(len(rows), len(words)) + 1} has no partner: "
                                f"rebuild {data} (span-preprocess conll)")
    for n, (w, g, (_, count)) in enumerate(zip(words, gold, source), start=1):
        if not len(w) == len(g) == count:
            raise BadInputError(f"{paths[0]}:{n}: {len(w)} words, but {paths[1]} line {n} "
                                f"has {len(g)} tags and {paths[2]} line {n} {count}: "
                                f"rebuild {data} (span-preprocess conll)")
    return words, gold, source


def _source_line(path, n, line):
    """``(first line, word count)`` of one line of ``raw/{split}.source``."""
    fields = line.split()
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        raise BadInputError(f"{path}:{n}: {line[:40]!r}, expected 'LINE WORDS' (two numbers)")
    return int(fields[0]), int(fields[1])


def _lines(path):
    return read_lines(path, 0, os.path.getsize(path))


def source_file(data, split):
    """The CoNLL file that split ``split`` of the folder ``data`` was built from, as the
    folder's own record names it, and unchanged since (its recorded sha256): the file
    whose lines ``raw/{split}.source`` numbers. Whatever record the model holds is that
    of the folder it was trained on, which need not be this one."""
    record = provenance.read_record(data) or {}
    entry = (record.get("source") or {}).get(split)
    if not isinstance(entry, dict) or not entry.get("path"):
        raise FileNotFoundError(f"{data}: its record names no source file of {split}: no "
                                f"CoNLL output (--spans-out writes the entities without one)")
    path = entry["path"]
    if not os.path.isfile(path):
        raise FileNotFoundError(f"the source file of {split} of {data} ({path}) is not "
                                f"here: no CoNLL output")
    if entry.get("sha256") and sha256(path) != entry["sha256"]:
        raise BadInputError(f"{path}: changed since {data} was built from it (sha256 "
                            f"{short(sha256(path))}, recorded {short(entry['sha256'])}): its "
                            f"lines are no longer the folder's sentences; no CoNLL output "
                            f"(rebuild the folder, or give --spans-out)")
    return path


def predicted_entities(hub, words, gold, batch_size=32, mode="default", order="length",
                       **decoding):
    """Predicted entities per item (``decoding``: the predictor's :meth:`decoding` keywords;
    ``order``: batches by length or in file order), the gold entities read in metric
    ``mode``, and the scores of one against the other."""
    entities = []
    with bar(len(words), "items", unit="rows") as progress:  # on a terminal only
        for chunk in chunks(words):
            entities += hub.predict_words(chunk, batch_size=batch_size, order=order,
                                          **decoding)
            progress.update(len(chunk))
    gold_entities = [ner.entities_of(g, mode) for g in gold]
    return entities, gold_entities, scores(entities, gold_entities)


def scores(predicted, gold):
    """Entity-level precision, recall, F1 (percent) over all types and per type, of
    entity lists already read from tags."""
    def prf(pred, gold_):
        tp, n_pred, n_gold = ner.match_counts(pred, gold_)
        return dict(zip(("precision", "recall", "f1"),
                        (round(100 * x, 2) for x in ner.prf(tp, n_pred, n_gold))),
                    entities=n_gold)

    kinds = sorted({e[2] for items in (predicted, gold) for es in items for e in es})
    by_type = {k: prf([[e for e in es if e[2] == k] for es in predicted],
                      [[e for e in es if e[2] == k] for es in gold]) for k in kinds}
    return {**prf(predicted, gold), "by_type": by_type}


def write_conll(source_path, out_path, source, tags, words=None, rows_path="the folder"):
    """The source file with a predicted tag appended to each word line. A sentence the
    folder does not hold (left out by ``--unknown-labels skip``) is left out, with the
    blank line that ends it. Every item is checked against the lines it goes to first
    (``source``: ``(first line, word count)`` per item; ``words``, when given, the
    item's words, which must be those lines' first columns): a mismatch is an error
    naming the file and line, and nothing is written. Returns the word lines written."""
    lines = read_lines(source_path, 0, os.path.getsize(source_path))
    if len(tags) != len(source):
        raise BadInputError(f"{len(tags)} predicted items for the {len(source)} of "
                            f"{rows_path}: nothing written to {out_path}")
    by_line = {}
    for n, ((first, count), item_tags) in enumerate(zip(source, tags), start=1):
        item_words = words[n - 1] if words is not None else None
        if count != len(item_tags):
            raise BadInputError(f"{rows_path}:{n}: {count} words but {len(item_tags)} "
                                f"predicted tags: nothing written to {out_path}")
        for k, tag in enumerate(item_tags):
            number = first + k
            fields = lines[number - 1].split() if 0 < number <= len(lines) else []
            if (not fields or fields[0] == DOCSTART or number in by_line
                    or item_words is not None and fields[0] != item_words[k]):
                found = (f"{fields[0]!r}" if fields else "no word") if number <= len(lines) \
                    else "past its end"
                want = f"word {item_words[k]!r}" if item_words is not None else "a word line"
                raise BadInputError(
                    f"{source_path}:{number}: {found}, but item {n} of {rows_path} puts "
                    f"{want} there: the file is not the one the predicted words come "
                    f"from; nothing written to {out_path}")
            by_line[number] = tag
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    left_out = False  # inside (or just after) a sentence the folder does not hold
    with atomic_file(out_path, text=True) as f:
        for number, line in enumerate(lines, start=1):
            fields = line.split()
            if number in by_line:
                f.write(f"{line} {by_line[number]}\n")
            elif fields and fields[0] != DOCSTART:
                left_out = True
            elif not fields and left_out:
                left_out = False
            else:
                f.write(line + "\n")
    return len(by_line)


def write_spans(path, words, source, predicted, gold):
    """One JSON object a line per item: ``{"item", "line", "words", "entities", "gold"}``;
    ``line`` is the source line of its first word, each entity ``{"start", "end",
    "type", "text"}`` with word offsets (end exclusive) into ``words``, in order (nested
    entities included). Returns the items written."""
    def spans(ents, ws):
        return [{"start": a, "end": b, "type": t, "text": " ".join(ws[a:b])}
                for a, b, t in sorted(ents)]

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_file(path, text=True) as f:
        for k, (ws, (first, _), pred, g) in enumerate(zip(words, source, predicted, gold)):
            f.write(json.dumps({"item": k, "line": first, "words": ws, "entities": spans(pred, ws),
                                "gold": spans(g, ws)}, ensure_ascii=False) + "\n")
    return len(words)


def write_conll_predictions(hub, splits, outs=((), ()), results=None, checkpoint=None,
                            batching=Batching(), **decoding):
    """Score each split (printed), write its CoNLL predictions and/or its JSON Lines
    entities (``outs``: the CoNLL files and the JSON Lines files, one per split, each
    when given) and ``{"checkpoint", "metric_mode",
    "decoding", "dev": {split: {precision, recall, f1, entities, items, by_type[,
    unseen_types]}}}`` to ``results`` (JSON, when given). ``decoding``: the keywords of
    the predictor's :meth:`~span_plugin.portable.ner.NerPredictor.decoding`."""
    conll_outs, spans_outs = outs
    settings = hub.decoding(**decoding)  # the checkpoint's, with the ones given; checked
    if settings.get("overlap") == "nested" and conll_outs:
        raise ValueError("a CoNLL file holds one IOB2 tag per word, which cannot represent "
                         "nested entities (overlap nested): write them with --spans-out "
                         "(JSON Lines) instead")
    # the record of the folder predicted (--data), not the one the model was trained on
    record = provenance.read_record(hub.data) or {}
    stats = (record.get("labels") or {}).get("stats") or {}
    mode = hub.metric_mode
    described = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in settings.items()
                          if v is not None)
    found = {}
    for n, split in enumerate(splits):
        words, gold, source = read_items(hub.data, split)
        entities, gold_entities, found[split] = predicted_entities(
            hub, words, gold, batching.size, mode, batching.order, **settings)
        if len(entities) != len(words):
            raise ValueError(f"{len(entities)} predicted items for the {len(words)} of "
                             f"{os.path.join(hub.data, 'raw', split + '.input0')}: nothing "
                             f"written")
        found[split]["items"] = len(words)
        print(f"{split}: " + ", ".join(f"{k} {v}" for k, v in found[split].items()
                                       if k != "by_type") + f" (metric mode {mode}, {described})")
        if settings.get("overlap") == "nested":
            print("    nested output scored against the folder's flat gold: spans nested in "
                  "or around a gold entity count as false positives")
        print("    " + "; ".join(f"{k} F1 {v['f1']}" for k, v in found[split]["by_type"].items()))
        unseen = (stats.get(split) or {}).get("unseen_types") or {}
        if unseen and (record.get("labels") or {}).get("unknown_labels") == "map-to-o":
            found[split]["unseen_types"] = unseen
            print("    not counted: gold entities of types the training split lacks, read "
                  "as O in the folder: " + ", ".join(f"{k} {v}" for k, v in unseen.items()))
        if conll_outs:
            tags = [T.tags_of(e, len(w)) for e, w in zip(entities, words)]
            written = write_conll(source_file(hub.data, split), conll_outs[n], source, tags,
                                  words, os.path.join(hub.data, "raw", f"{split}.input0"))
            print(f"{conll_outs[n]}: {written} word lines with predictions")
        if spans_outs:
            written = write_spans(spans_outs[n], words, source, entities, gold_entities)
            print(f"{spans_outs[n]}: {written} items with their entities (JSON Lines)")
    if results:
        with atomic_file(results, text=True) as f:
            json.dump({"checkpoint": os.path.abspath(checkpoint), "metric_mode": mode,
                       "decoding": settings, "dev": found}, f, indent=1)


def write_output(hub, args):
    """``span-predict`` on a tagging checkpoint: scores, CoNLL and JSON Lines files per split."""
    splits = args.split or ["valid"]
    for flag, files in (("--conll-out", args.conll_out), ("--spans-out", args.spans_out)):
        if files and len(files) != len(splits):
            raise ValueError(f"{len(splits)} --split but {len(files)} {flag}; give "
                             f"one {flag} per --split")
    write_conll_predictions(hub, splits, (args.conll_out or (), args.spans_out or ()),
                            args.results, args.checkpoint, Batching.of(args, 32),
                            token_decoding=args.token_decoding, overlap=args.overlap,
                            span_threshold=args.span_threshold)


OUTPUT = Output(
    title="tagging (CoNLL): span_tagging, span_labeling",
    usage="""\
    span-predict --checkpoint runs/ner/checkpoints/checkpoint_best.pt \\
        --split valid test --conll-out dev.conll test.conll --results results.json

The tagging folder's splits (default valid) against its gold tags; --conll-out writes the
CoNLL source file with a predicted tag appended to every word line (conlleval's input);
--spans-out the entities as JSON Lines; --results {split: {precision, recall, f1,
by_type}}. --token-decoding (tagging heads) and --overlap nested --span-threshold (span
labeling; JSON Lines output only) choose the decoding.""",
    common=("split", "results", "batch_size", "batch_order"),
    flags=(
        Flag("--conll-out", path="writes", nargs="+",
             help="one CoNLL prediction file per --split"),
        Flag("--spans-out", path="writes", nargs="+", help="one JSON Lines file per --split: each "
             "item's words, predicted and gold entities (word offsets); the only "
             "output of --overlap nested"),
        Flag("--token-decoding", choices=("argmax", "viterbi"),
             help="tagging checkpoints: viterbi, the best well-formed IOB2 tags; "
             "argmax, each word's best tag (default: the checkpoint's --token-decoding)"),
        Flag("--overlap", choices=("flat", "nested"),
             help="span-labeling checkpoints: flat, the best non-overlapping entities "
             "(default; CoNLL's); nested, every span whose best type has probability "
             ">= --span-threshold, nested ones kept, crossing ones dropped for the "
             "more probable"),
        Flag("--span-threshold", type=at_least_zero,
             help="with --overlap nested: the least probability of a kept span's type "
             "(default 0.5)"),
    ),
    write=write_output,
)
