"""``span-predict``: predictions of a fine-tuned checkpoint, in the GLUE submission format
(``index<TAB>prediction`` with a header, one row per input row, in order).

    span-predict --checkpoint runs/RTE/checkpoints/checkpoint_best.pt \\
        --split valid test --output dev/RTE.tsv submission/RTE.tsv

Rows come from the data folder's ``raw/{split}.input*`` text (the folder the
checkpoint was trained on, or ``--data``): ``valid``, ``test``, MNLI's ``valid1`` and
``test1``, or any split of a ``span-preprocess table`` folder. With ``--glue-dir DIR
--task TASK`` they come from ``DIR/TASK/{split}.tsv`` instead (``--split test``; MNLI
``test_matched``), read with the column rules of ``span-preprocess glue``.

The encoder (BPE files, n-gram dictionary, segmentation) is the one the checkpoint's
data record names; encoder options given here are checked against it (files by their
content) and a difference is an error naming both. Checkpoints without a record need
them. Classification writes label names as the data spells them; regression writes
the value times the folder's label scale (STS-B: 5, ``--regression-scale``), clipped
to its range (STS-B: [0, 5]).
"""

import argparse
import logging
import os
import sys


def build_parser():
    p = argparse.ArgumentParser(prog="span-predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="fine-tuned checkpoint_*.pt")
    p.add_argument("--data", help="the task folder it was trained on (default: the one "
                   "its record names; its dict.txt files are checked)")
    p.add_argument("--split", nargs="+", default=["test"],
                   help="splits to predict: of the data folder (valid, test, valid1, "
                   "test1, ...) or, with --glue-dir, TSV names without .tsv")
    p.add_argument("--output", nargs="+", required=True,
                   help="one submission file per --split, in the same order")
    p.add_argument("--glue-dir", help="read the rows from DIR/TASK/SPLIT.tsv (GLUE layout)")
    p.add_argument("--task", help="GLUE task name, with --glue-dir (CoLA, SST-2, MRPC, ...)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--regression-scale", type=float,
                   help="multiply regression outputs by this (default: the folder's label "
                   "scale: 5 for STS-B, else 1)")
    g = p.add_argument_group("text encoder (default: the checkpoint's record; given "
                             "again, checked against it)")
    g.add_argument("--bpe", choices=("gpt2", "sentencepiece", "fastbpe", "wordpiece"))
    g.add_argument("--gpt2-encoder-json")
    g.add_argument("--gpt2-vocab-bpe")
    g.add_argument("--sentencepiece-model")
    g.add_argument("--bpe-codes")
    g.add_argument("--bpe-vocab")
    g.add_argument("--wordpiece", help="tokenizer.json, vocab.txt or a span-convert folder")
    g.add_argument("--ngrams", help="n-gram dictionary")
    g.add_argument("--ngrams-top-k", type=int)
    g.add_argument("--segmentation")
    g.add_argument("--seed", type=int, help="seed of segmentation random")
    return p


def read_test_rows(glue_dir, task_name, split):
    """The input columns of a GLUE TSV: list of str (single) or tuples (pairs)."""
    from span_plugin.preprocess.glue import TASKS, read_split

    if task_name not in TASKS:
        raise SystemExit(f"span-predict: unknown task {task_name!r}; one of {sorted(TASKS)}")
    path = os.path.join(glue_dir, task_name, split + ".tsv")
    if not os.path.exists(path):
        raise SystemExit(f"span-predict: {path} not found")
    rows = read_split(TASKS[task_name], path, split, bad_rows="default")
    columns = rows.inputs
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def read_folder_rows(data, split):
    """The raw text of a split of a prepared folder: list of str or tuples."""
    paths = []
    for k in range(2):
        path = os.path.join(data, "raw", f"{split}.input{k}")
        if os.path.exists(path):
            paths.append(path)
    if not paths:
        raise SystemExit(f"span-predict: {data}/raw/{split}.input0 not found: the folder "
                         f"has no raw text of split {split!r} (give --glue-dir and --task "
                         f"to read a GLUE TSV instead)")
    columns = []
    for path in paths:
        with open(path, encoding="utf-8", newline="\n") as f:
            columns.append(f.read().split("\n")[:-1])
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def format_predictions(predictions, regression_scale=1.0, clip=None):
    """Submission lines (header first) for the dicts of SpanHubInterface.predict."""
    lines = ["index\tprediction"]
    for i, p in enumerate(predictions):
        if "score" in p:
            value = p["score"] * regression_scale
            if clip is not None:
                value = min(clip[1], max(clip[0], value))
            lines.append(f"{i}\t{value:.3f}")
        else:
            lines.append(f"{i}\t{p['label']}")
    return lines


def _quiet_logging():
    """fairseq configures the root logger at import (one of its modules at DEBUG);
    keep its INFO chatter out of this command's output."""
    level = os.environ.get("LOGLEVEL", "WARNING").upper()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    logging.getLogger("fairseq").setLevel(max(logging.WARNING, logging.getLogger().level))


def main(argv=None):
    a = build_parser().parse_args(argv)
    if len(a.output) != len(a.split):
        raise SystemExit(f"span-predict: {len(a.split)} --split but {len(a.output)} "
                         f"--output; give one output file per split")
    if a.glue_dir and not a.task:
        raise SystemExit("span-predict: --glue-dir needs --task")
    from span_plugin.runtime.checkpoints import DamagedCheckpointError
    from span_plugin.inference.hub import SpanHubInterface

    _quiet_logging()
    try:
        return _predict(a, SpanHubInterface)
    except (ValueError, FileNotFoundError, DamagedCheckpointError) as err:
        # Settings that differ from the checkpoint's, a damaged checkpoint, a pair
        # model given single sentences, ...: one line, no traceback.
        print(f"span-predict: error: {err}", file=sys.stderr)
        return 2


def _predict(a, SpanHubInterface):
    hub = SpanHubInterface.from_pretrained(
        a.checkpoint, data=a.data, bpe=a.bpe, gpt2_encoder_json=a.gpt2_encoder_json,
        gpt2_vocab_bpe=a.gpt2_vocab_bpe, sentencepiece_model=a.sentencepiece_model,
        bpe_codes=a.bpe_codes, bpe_vocab=a.bpe_vocab, wordpiece=a.wordpiece, ngrams=a.ngrams,
        ngrams_top_k=a.ngrams_top_k, segmentation=a.segmentation, seed=a.seed,
    )
    labels = (hub.record or {}).get("labels") or {}
    if a.regression_scale is not None:
        scale = a.regression_scale
    elif "scale" in labels:
        scale = labels["scale"]
    else:  # a folder without a record: STS-B folders hold score / 5
        scale = 5.0 if a.task == "STS-B" else 1.0
    clip = labels.get("range") if hub.record else ([0.0, 5.0] if a.task == "STS-B" else None)
    for split, output in zip(a.split, a.output):
        if a.glue_dir:
            examples = read_test_rows(a.glue_dir, a.task, split)
        else:
            examples = read_folder_rows(hub.data, split)
        predictions = hub.predict(examples, batch_size=a.batch_size)
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w", encoding="utf-8") as h:
            h.write("\n".join(format_predictions(predictions, scale, clip)) + "\n")
        print(f"{output}: {len(predictions)} predictions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
