"""``span-predict``: predictions of a fine-tuned checkpoint, for the task it records.

    # span_classification / sentence_prediction: GLUE submission files
    span-predict --checkpoint runs/RTE/checkpoints/checkpoint_best.pt \\
        --split valid test --output dev/RTE.tsv submission/RTE.tsv
    # span_tagging / span_labeling: entity P/R/F1, CoNLL files with the predicted tags
    span-predict --checkpoint runs/ner/checkpoints/checkpoint_best.pt \\
        --split valid test --conll-out dev.conll test.conll --results results.json
    # span_pair_classification: phrase-pair (and sentence-pair) labels of a JSON Lines file
    span-predict --checkpoint runs/transfer-MRPC/checkpoints/checkpoint_best.pt \\
        --input pairs.jsonl --output predictions.jsonl
    # span_qa: the official predictions.json (id -> answer), n-best, EM/F1
    span-predict --checkpoint runs/squad/checkpoints/checkpoint_best.pt \\
        --input dev-v1.1.json --output predictions.json --nbest nbest.json --results scores.json

Sentence checkpoints: rows come from the data folder's ``raw/{split}.input*`` text (the
folder the checkpoint was trained on, or ``--data``; default split ``test``): ``valid``,
``test``, MNLI's ``valid1`` and ``test1``, or any split of a ``span-preprocess table``
folder. With ``--glue-dir DIR --task TASK`` they come from ``DIR/TASK/{split}.tsv``
instead (MNLI ``test_matched``), read with the column rules of ``span-preprocess glue``.
Classification writes label names as the data spells them; regression writes the value
times the folder's label scale (STS-B: 5, ``--regression-scale``), clipped to its range.

Tagging checkpoints: the tagging folder's splits (default ``valid``) against its gold
tags; ``--conll-out`` writes the CoNLL source file with a predicted tag appended to every
word line (conlleval's input); ``--spans-out`` the entities as JSON Lines; ``--results``
the scores as JSON. ``--token-decoding`` (tagging heads) and ``--overlap nested``
``--span-threshold`` (span labeling; JSON Lines output only) choose the decoding.

Span-pair checkpoints: ``--input`` in the format of docs/SPAN_PAIRS.md, ``--output``
one JSON object a line (see :mod:`span_plugin.inference.pair_files`).

QA checkpoints: questions of ``--input`` (SQuAD 1.1/2.0 JSON, MRQA JSON Lines) or of the
folder's ``--split`` (default valid); ``--output`` the official predictions.json,
``--nbest`` the n-best answers, ``--results`` EM/F1 when the questions have answers;
``--null-threshold`` (SQuAD 2.0): a number, or ``tune`` for the F1-best one on these
questions (see :mod:`span_plugin.inference.qa_files`); ``--answer-boundaries word|token``
decodes otherwise than the checkpoint records.

The encoder (BPE files, n-gram dictionary, segmentation) is the one the checkpoint's
data record names; encoder options given here are checked against it (files by their
content) and a difference is an error naming both. Checkpoints without a record need
them. A flag of another task's output is an error.
"""

import argparse
import logging
import os
import sys

# The flags of each task's output (all default to None: given or not).
GLUE_FLAGS = ("split", "output", "glue_dir", "task", "regression_scale", "batch_size",
              "from_validation")
CONLL_FLAGS = ("split", "conll_out", "results", "batch_size", "spans_out", "token_decoding",
               "overlap", "span_threshold")
PAIR_FLAGS = ("input", "output")
QA_FLAGS = ("input", "split", "output", "nbest", "results", "null_threshold", "n_best",
            "batch_size", "answer_boundaries")


def build_parser():
    from span_plugin.tokenizers import TOKENIZERS, file_options
    from span_plugin.tokenizers.options import add_arguments

    p = argparse.ArgumentParser(prog="span-predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="fine-tuned checkpoint_*.pt")
    p.add_argument("--data", help="the task folder it was trained on (default: the one "
                   "its record names; its dict.txt files are checked)")
    p.add_argument("--split", nargs="+",
                   help="splits to predict (sentence tasks, default test; tagging, default "
                   "valid): of the data folder (valid, test, valid1, test1, ...) or, with "
                   "--glue-dir, TSV names without .tsv")
    p.add_argument("--output", nargs="+",
                   help="sentence tasks: one submission file per --split, in the same order; "
                   "span pairs: the predictions file (JSON Lines)")
    p.add_argument("--batch-size", type=int, help="examples per forward pass (default 32)")
    g = p.add_argument_group("sentence tasks (GLUE)")
    g.add_argument("--glue-dir", help="read the rows from DIR/TASK/SPLIT.tsv (GLUE layout)")
    g.add_argument("--task", help="GLUE task name, with --glue-dir (CoLA, SST-2, MRPC, ...)")
    g.add_argument("--regression-scale", type=float,
                   help="multiply regression outputs by this (default: the folder's label "
                   "scale: 5 for STS-B, else 1)")
    g.add_argument("--from-validation", action="store_true", default=None,
                   help="split valid: write what fairseq-train's own validation predicted "
                   "with these weights (the span_classification criterion keeps it in "
                   "the checkpoint), without loading the model or a pass over the rows; "
                   "when the checkpoint cannot give every row (no stored pass, "
                   "several validation subsets, a multi-process run), it says why and "
                   "predicts as usual")
    g = p.add_argument_group("tagging (CoNLL)")
    g.add_argument("--conll-out", nargs="+", help="one CoNLL prediction file per --split")
    g.add_argument("--results", help="write {split: {precision, recall, f1, by_type}} here (JSON)")
    g.add_argument("--spans-out", nargs="+", help="one JSON Lines file per --split: each "
                   "item's words, predicted and gold entities (word offsets); the only "
                   "output of --overlap nested")
    g.add_argument("--token-decoding", choices=("argmax", "viterbi"),
                   help="tagging checkpoints: viterbi, the best well-formed IOB2 tags; "
                   "argmax, each word's best tag (default: the checkpoint's --token-decoding)")
    g.add_argument("--overlap", choices=("flat", "nested"),
                   help="span-labeling checkpoints: flat, the best non-overlapping entities "
                   "(default; CoNLL's); nested, every span whose best type has probability "
                   ">= --span-threshold, nested ones kept, crossing ones dropped for the "
                   "more probable")
    g.add_argument("--span-threshold", type=float,
                   help="with --overlap nested: the least probability of a kept span's type "
                   "(default 0.5)")
    g = p.add_argument_group("span pairs")
    g.add_argument("--input", help="sentence pairs with phrase pairs (JSON Lines)")
    g = p.add_argument_group("question answering (SQuAD, MRQA)")
    g.add_argument("--nbest", help="write the n-best answers of every question here (JSON)")
    g.add_argument("--n-best", type=int, help="answers kept per question (default 20)")
    g.add_argument("--null-threshold",
                   help="SQuAD 2.0: answer '' when the no-answer score beats the best answer "
                   "by more than this; 'tune': the F1-best threshold on these questions; "
                   "default: the model's (--null-threshold of training)")
    g.add_argument("--answer-boundaries", choices=("word", "token"),
                   help="word: answers start and end on word boundaries of the context; "
                   "token: any token span; default: the checkpoint's (--answer-boundaries "
                   "of training; token for checkpoints made before the option)")
    g = p.add_argument_group("text encoder (default: the checkpoint's record; given "
                             "again, checked against it)")
    g.add_argument("--bpe", choices=TOKENIZERS.keys())
    add_arguments(g, file_options().values())  # each tokenizer's files (--gpt2-encoder-json, ...)
    g.add_argument("--ngrams", help="n-gram dictionary")
    g.add_argument("--ngrams-top-k", type=int)
    g.add_argument("--segmentation")
    g.add_argument("--seed", type=int, help="seed of segmentation random")
    return p


def encoder_files(a):
    """The tokenizer files given on the command line, by EncoderSpec field (a hub
    keyword each)."""
    from span_plugin.tokenizers import file_options

    return {field: getattr(a, field) for field in file_options() if getattr(a, field) is not None}


def predict_glue(hub, a):
    from span_plugin.inference.glue_files import write_submissions

    splits = a.split or ["test"]
    if not a.output or len(a.output) != len(splits):
        raise ValueError(f"{len(splits)} --split but {len(a.output or [])} --output; give "
                         f"one output file per split")
    if a.glue_dir and not a.task:
        raise ValueError("--glue-dir needs --task")
    write_submissions(hub, splits, a.output, a.glue_dir, a.task, a.regression_scale,
                      a.batch_size or 32)


def predict_conll(hub, a):
    from span_plugin.inference.conll_files import write_conll_predictions

    splits = a.split or ["valid"]
    for flag, files in (("--conll-out", a.conll_out), ("--spans-out", a.spans_out)):
        if files and len(files) != len(splits):
            raise ValueError(f"{len(splits)} --split but {len(files)} {flag}; give "
                             f"one {flag} per --split")
    write_conll_predictions(hub, splits, a.conll_out or (), a.results, a.checkpoint,
                            a.batch_size or 32, a.spans_out or (),
                            token_decoding=a.token_decoding, overlap=a.overlap,
                            span_threshold=a.span_threshold)


def predict_pairs(hub, a):
    from span_plugin.inference.pair_files import write_pair_predictions

    if not a.input or not a.output or len(a.output) != 1:
        raise ValueError("give --input PAIRS.jsonl and one --output file")
    rows = write_pair_predictions(hub, a.input, a.output[0])
    print(f"{a.output[0]}: {rows} predictions", file=sys.stderr)


def predict_qa(hub, a):
    from span_plugin.inference.qa_files import (first_occurrences, read_questions,
                                                report_notes, write_qa_predictions)

    if not a.output or len(a.output) != 1:
        raise ValueError("give one --output file (the official predictions.json)")
    if a.input and a.split:
        raise ValueError("give --input FILE or --split of the folder, not both")
    splits = a.split or ["valid"]
    if len(splits) != 1:
        raise ValueError(f"one --split at a time, got {splits}")
    threshold = "default"
    if a.null_threshold is not None:
        threshold = a.null_threshold if a.null_threshold == "tune" else float(a.null_threshold)
    examples, version, notes = read_questions(hub, a.input, splits[0])
    report_notes(notes, a.input)
    scores = write_qa_predictions(hub, examples, version, a.output[0], a.nbest, a.results,
                                  threshold, a.n_best or 20, a.batch_size or 16, notes,
                                  a.answer_boundaries)
    summary = ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in scores.items())
    ids = len(first_occurrences(examples))
    questions = "" if ids == len(examples) else f" for {len(examples)} questions"
    print(f"{a.output[0]}: {ids} answers{questions}" + (f"; {summary}" if summary else ""),
          file=sys.stderr)


def _output_of(hub):
    """(the flags it takes, the function writing its predictions) of the hub's adapter."""
    from span_plugin.inference.ner import NerHubInterface
    from span_plugin.inference.pairs import PairHubInterface
    from span_plugin.inference.qa import QAHubInterface
    from span_plugin.inference.sentence import SentenceHubInterface

    outputs = {SentenceHubInterface: (GLUE_FLAGS, predict_glue),
               NerHubInterface: (CONLL_FLAGS, predict_conll),
               PairHubInterface: (PAIR_FLAGS, predict_pairs),
               QAHubInterface: (QA_FLAGS, predict_qa)}
    return outputs[type(hub)]


def _from_validation(a):
    """--from-validation: write split valid of the folder from the checkpoint's stored
    validation predictions. Removes what it wrote from ``a.split`` / ``a.output``;
    returns whether splits remain to predict."""
    from span_plugin.inference.glue_files import write_validation_predictions

    splits, outputs = a.split or ["test"], a.output or []
    if a.glue_dir or "valid" not in splits or len(outputs) != len(splits):
        return True  # nothing it can stand in for; the usual checks follow
    k = splits.index("valid")
    why = write_validation_predictions(a.checkpoint, a.data, outputs[k], a.task,
                                       a.regression_scale)
    if why is not None:
        print(f"span-predict: split valid is predicted: {why}", file=sys.stderr)
        return True
    a.split, a.output = splits[:k] + splits[k + 1:], outputs[:k] + outputs[k + 1:]
    return bool(a.split)


def _quiet_logging():
    """fairseq configures the root logger at import (one of its modules at DEBUG);
    keep its INFO chatter out of this command's output."""
    level = os.environ.get("LOGLEVEL", "WARNING").upper()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    logging.getLogger("fairseq").setLevel(max(logging.WARNING, logging.getLogger().level))


def main(argv=None):
    a = build_parser().parse_args(argv)
    from span_plugin.inference.hub import SpanHubInterface
    from span_plugin.runtime.checkpoints import DamagedCheckpointError

    _quiet_logging()
    try:
        if a.from_validation and not _from_validation(a):
            return 0  # every split written from the checkpoint
        hub = SpanHubInterface.from_pretrained(
            a.checkpoint, data=a.data, bpe=a.bpe, ngrams=a.ngrams, ngrams_top_k=a.ngrams_top_k,
            segmentation=a.segmentation, seed=a.seed, **encoder_files(a))
        flags, predict = _output_of(hub)
        wrong = [d for d in dict.fromkeys(GLUE_FLAGS + CONLL_FLAGS + PAIR_FLAGS + QA_FLAGS)
                 if d not in flags and getattr(a, d) is not None]
        if wrong:
            raise ValueError(
                f"{'--' + wrong[0].replace('_', '-')} does not apply to a {hub.task.cfg._name} "
                f"checkpoint ({a.checkpoint}); it takes "
                f"{', '.join('--' + d.replace('_', '-') for d in flags)}")
        predict(hub, a)
    except (ValueError, FileNotFoundError, DamagedCheckpointError) as err:
        # Settings that differ from the checkpoint's, a damaged checkpoint, a pair
        # model given single sentences, a flag of another task: one line, no traceback.
        print(f"span-predict: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
