"""What ``span-predict`` writes for a ``span_qa`` model: the official SQuAD
``predictions.json``, an n-best file, and the official scores when the questions carry
answers (``--null-threshold tune``: the best no-answer threshold). Files are read as the
official scripts read them. Design notes: docs/QA.md, "Module notes"."""

import json
import os
import sys
from typing import NamedTuple, Optional

from span_plugin.files.atomic import atomic_write
from span_plugin.formats.flag_values import number_or, positive
from span_plugin.formats.squad import NOTE_KINDS, read_qa
from span_plugin.formats.squad_metrics import best_null_threshold, squad_scores
from span_plugin.portable.outputs import Batching, Flag, Output, chunks
from span_plugin.preprocess.folders.qa import read_records
from span_plugin.preprocess.progress import bar
from span_plugin.preprocess.records import provenance

SHOWN = 20  # notes printed per kind; the results file holds every one

_TOLD = {"duplicate id": "reused question ids (one prediction per id, every occurrence "
                         "scored as the official script scores it)",
         "unplaced answer": "gold answers whose offsets do not place their text (scored "
                            "by their text, as the official script reads them)",
         "mrqa text": "MRQA detected answers whose text differs from their span (the "
                      "span is the answer)",
         "is_impossible": "v2.0 questions whose is_impossible disagrees with their answers "
                          "(read from the answers, as the official script reads them)"}


def read_questions(hub, input_path=None, split=None):
    """``(examples, version, notes)`` of ``input_path`` or of the folder's ``split``
    (notes: :class:`~span_plugin.formats.squad.QANote`; a folder's were reported when it
    was built)."""
    if input_path:
        data = read_qa(input_path, require_answers=False, official=True)
        return data.examples, data.version, data.notes
    path = os.path.join(hub.data, "raw", f"{split}.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such split in the checkpoint's folder; give "
                                f"--input FILE (SQuAD JSON or MRQA JSON Lines)")
    # the versions of the folder read (--data), not of the one the model was trained on
    record = provenance.read_record(hub.data)
    labels = (record.get("labels") or {}) if record else hub.qa_labels
    versions = labels.get("versions") or {}
    return read_records(path), versions.get(split, "1.1"), []


def report_notes(notes, source, stream=None, shown=SHOWN):
    """Print how many notes of each kind ``source`` gave and the first ``shown`` of
    each, one line each (place, id, what), to ``stream`` (the current ``sys.stderr``)."""
    stream = stream or sys.stderr
    for kind in NOTE_KINDS:
        of_kind = [n for n in notes if n.kind == kind]
        if not of_kind:
            continue
        print(f"span-predict: warning: {source}: {len(of_kind)} {_TOLD[kind]}:", file=stream)
        for n in of_kind[:shown]:
            print(f"  {n.where}: {n.message}", file=stream)
        if len(of_kind) > shown:
            print(f"  ... and {len(of_kind) - shown} more (every one in the --results file)",
                  file=stream)


def first_occurrences(examples):
    """The first question of each id, in order: the ones predicted."""
    seen = set()
    return [ex for ex in examples if not (ex.id in seen or seen.add(ex.id))]


class QAPaths(NamedTuple):
    """The files a QA prediction writes: the official predictions.json, the n-best answers
    and the scores (each but the first: None, not written)."""

    output: str
    nbest: Optional[str] = None
    results: Optional[str] = None


class QADecoding(NamedTuple):
    """How answers are decoded: ``n_best`` kept, ``null_threshold`` ("default", the
    model's; None, never ""; a number; or "tune": v2.0's threshold that maximizes F1 on
    these questions, reported in the scores), ``answer_boundaries`` (None: the
    checkpoint's; "word" or "token")."""

    n_best: int = 20
    null_threshold: object = "default"
    answer_boundaries: Optional[str] = None


def write_qa_predictions(hub, examples, version, paths, decoding=QADecoding(),
                         batching=Batching(16), notes=()):
    """Predict ``examples`` (one prediction per id: its first occurrence) and write the
    files ``paths`` (:class:`QAPaths`); returns the scores over every occurrence, as the
    official script of ``version`` counts them (or {} without gold). ``notes``: what
    reading the file reported, written to the results (``input_notes``)."""
    output, nbest, results = paths
    n_best, null_threshold, answer_boundaries = decoding
    tune = null_threshold == "tune"
    unlabelled = [ex for ex in examples if not ex.labelled]
    if unlabelled and (tune or results):
        raise ValueError(
            f"{unlabelled[0].where}: question {unlabelled[0].id!r} has no answers "
            f"({len(unlabelled)} of {len(examples)} questions have none); "
            f"{'--null-threshold tune' if tune else '--results'} needs every question's "
            f"gold answers (or is_impossible)")
    asked = first_occurrences(examples)
    boundaries = answer_boundaries or hub.answer_boundaries
    answers = []
    with bar(len(asked), "questions", unit="rows") as progress:  # on a terminal only
        for chunk in chunks(asked):
            answers += hub.predict_examples(chunk, n_best, None if tune else null_threshold,
                                            batching.size, boundaries, batching.order)
            progress.update(len(chunk))
    if len(answers) != len(asked):
        raise ValueError(f"{len(answers)} answers for {len(asked)} questions (the first "
                         f"{asked[0].where if asked else ''}): nothing written to {output}")
    predictions = {ex.id: a["text"] for ex, a in zip(asked, answers)}
    scores = {}
    has_gold = not unlabelled
    if tune:
        margins = {ex.id: a["null_margin"] for ex, a in zip(asked, answers)}
        threshold, _, _ = best_null_threshold(predictions, margins, examples, "2.0")
        predictions = {k: ("" if margins[k] > threshold else v) for k, v in predictions.items()}
        scores["best_f1_thresh"] = threshold
    if has_gold:
        scores.update(squad_scores(predictions, examples,
                                   "2.0" if version == "2.0" or tune else "1.1"))
    _write_json(output, predictions)
    if nbest:
        _write_json(nbest, {ex.id: a["nbest"] for ex, a in zip(asked, answers)})
    if results and scores:
        _write_json(results, dict(scores, answer_boundaries=boundaries, input_notes={
            "counts": {k: sum(n.kind == k for n in notes) for k in NOTE_KINDS},
            "notes": [{"kind": n.kind, "where": n.where, "id": n.id, "message": n.message}
                      for n in notes]}))
    return scores


def _write_json(path, value):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = json.dumps(value, ensure_ascii=False, indent=1) + "\n"
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def write_output(hub, args):
    """``span-predict`` on a QA checkpoint: predictions.json, n-best and scores."""
    if not args.output or len(args.output) != 1:
        raise ValueError("give one --output file (the official predictions.json)")
    if args.input and args.split:
        raise ValueError("give --input FILE or --split of the folder, not both")
    splits = args.split or ["valid"]
    if len(splits) != 1:
        raise ValueError(f"one --split at a time, got {splits}")
    threshold = "default"
    if args.null_threshold is not None:
        threshold = (args.null_threshold if args.null_threshold == "tune"
                     else float(args.null_threshold))
    examples, version, notes = read_questions(hub, args.input, splits[0])
    report_notes(notes, args.input)
    scores = write_qa_predictions(
        hub, examples, version, QAPaths(args.output[0], args.nbest, args.results),
        QADecoding(args.n_best or 20, threshold, args.answer_boundaries),
        Batching.of(args, 16), notes)
    summary = ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in scores.items())
    ids = len(first_occurrences(examples))
    questions = "" if ids == len(examples) else f" for {len(examples)} questions"
    print(f"{args.output[0]}: {ids} answers{questions}" + (f"; {summary}" if summary else ""),
          file=sys.stderr)


OUTPUT = Output(
    title="question answering (SQuAD, MRQA): span_qa",
    usage="""\
    span-predict --checkpoint runs/squad/checkpoints/checkpoint_best.pt \\
        --input dev-v1.1.json --output predictions.json --nbest nbest.json --results scores.json

Questions of --input (SQuAD 1.1/2.0 JSON, MRQA JSON Lines) or of the folder's --split
(default valid); --output the official predictions.json, --nbest the n-best answers,
--results EM/F1 when the questions have answers.""",
    common=("input", "split", "output", "results", "batch_size", "batch_order"),
    flags=(
        Flag("--nbest", path="writes",
             help="write the n-best answers of every question here (JSON)"),
        Flag("--n-best", type=positive, help="answers kept per question (default 20)"),
        Flag("--null-threshold", type=number_or("tune"),
             help="SQuAD 2.0: answer '' when the no-answer score beats the best answer "
             "by more than this; 'tune': the F1-best threshold on these questions; "
             "default: the model's (--null-threshold of training)"),
        Flag("--answer-boundaries", choices=("word", "token"),
             help="word: answers start and end on word boundaries of the context; "
             "token: any token span; default: the checkpoint's (--answer-boundaries "
             "of training; token for checkpoints made before the option)"),
    ),
    write=write_output,
)
