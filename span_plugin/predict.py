"""``span-predict``: GLUE test predictions of a fine-tuned roberta_span checkpoint, in
the submission format (``index<TAB>prediction`` with a header, one row per test row).

    span-predict --checkpoint MRPC-ckpt/checkpoint_best.pt --data MRPC-bin \\
        --glue-dir glue_data --task MRPC --output submission/MRPC.tsv \\
        --gpt2-encoder-json gpt2_bpe/encoder.json --gpt2-vocab-bpe gpt2_bpe/vocab.bpe

The test TSV is read with the column rules of ``span-preprocess glue``; BPE and
segmentation run on the fly (pass the BPE files, n-gram dictionary and segmentation
the training folder was made with). Classification writes label names as the train
TSV spells them; STS-B writes the score times ``--regression-scale`` (default 5 for
STS-B, whose folders hold score / 5), clipped to [0, 5].
"""

import argparse
import os
import sys


def build_parser():
    p = argparse.ArgumentParser(prog="span-predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="fine-tuned checkpoint_*.pt")
    p.add_argument("--data", help="task folder with input0/dict.txt and label/dict.txt "
                   "(default: the path stored in the checkpoint)")
    p.add_argument("--glue-dir", required=True, help="glue_data folder")
    p.add_argument("--task", required=True, help="GLUE task name (CoLA, SST-2, MRPC, ...)")
    p.add_argument("--split", default="test", help="TSV to predict, without .tsv "
                   "(test; MNLI: test_matched / test_mismatched)")
    p.add_argument("--output", required=True, help="submission file to write")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--regression-scale", type=float,
                   help="multiply regression outputs by this (default: 5 for STS-B, else 1)")
    g = p.add_argument_group("text encoder (local files; the training folder's settings)")
    g.add_argument("--bpe", default="gpt2", choices=("gpt2", "sentencepiece", "fastbpe", "wordpiece"))
    g.add_argument("--gpt2-encoder-json")
    g.add_argument("--gpt2-vocab-bpe")
    g.add_argument("--sentencepiece-model")
    g.add_argument("--bpe-codes")
    g.add_argument("--bpe-vocab")
    g.add_argument("--wordpiece", help="tokenizer.json, vocab.txt or a span-convert folder")
    g.add_argument("--ngrams", help="n-gram dictionary (default: the packaged one)")
    g.add_argument("--ngrams-top-k", type=int)
    g.add_argument("--segmentation", default="greedy")
    return p


def read_test_rows(glue_dir, task_name, split):
    """The input columns of a GLUE test TSV: list of str (single) or tuples (pairs)."""
    from .preprocess.glue import TASKS, read_split

    if task_name not in TASKS:
        raise SystemExit(f"span-predict: unknown task {task_name!r}; one of {sorted(TASKS)}")
    path = os.path.join(glue_dir, task_name, split + ".tsv")
    if not os.path.exists(path):
        raise SystemExit(f"span-predict: {path} not found")
    rows = read_split(TASKS[task_name], path, split)
    columns = rows.inputs
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def format_predictions(predictions, regression_scale=1.0):
    """Submission lines (header first) for the dicts of SpanHubInterface.predict."""
    lines = ["index\tprediction"]
    for i, p in enumerate(predictions):
        if "score" in p:
            value = min(5.0, max(0.0, p["score"] * regression_scale))
            lines.append(f"{i}\t{value:.3f}")
        else:
            lines.append(f"{i}\t{p['label']}")
    return lines


def main(argv=None):
    a = build_parser().parse_args(argv)
    from .hub import SpanHubInterface

    hub = SpanHubInterface.from_pretrained(
        a.checkpoint, data=a.data, bpe=a.bpe, gpt2_encoder_json=a.gpt2_encoder_json,
        gpt2_vocab_bpe=a.gpt2_vocab_bpe, sentencepiece_model=a.sentencepiece_model,
        bpe_codes=a.bpe_codes, bpe_vocab=a.bpe_vocab, wordpiece=a.wordpiece, ngrams=a.ngrams,
        ngrams_top_k=a.ngrams_top_k, segmentation=a.segmentation,
    )
    examples = read_test_rows(a.glue_dir, a.task, a.split)
    predictions = hub.predict(examples, batch_size=a.batch_size)
    scale = a.regression_scale if a.regression_scale is not None else (5.0 if a.task == "STS-B" else 1.0)
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    with open(a.output, "w", encoding="utf-8") as h:
        h.write("\n".join(format_predictions(predictions, scale)) + "\n")
    print(f"{a.output}: {len(predictions)} predictions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
