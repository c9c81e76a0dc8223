"""``span-predict`` output of a ``span_qa`` checkpoint: the official SQuAD
``predictions.json`` (question id -> answer text), an n-best file (id -> list of
``text``, ``start``, ``end``, ``score``, ``probability``), and when the questions carry
answers, the official exact match and F1 (v2.0: HasAns/NoAns, and the no-answer
threshold that maximizes F1 on these questions).

Questions come from a SQuAD / MRQA file (``--input``; questions without answers, as in
the official test files, are predicted and not scored) or a split of the folder the
checkpoint was trained on (``raw/{split}.jsonl``). Scores (``--results``, a tuned
threshold) need every question labelled: otherwise an error says which is not, before
anything is predicted.
"""

import json
import os

from span_plugin.formats.files import atomic_write
from span_plugin.formats.squad import read_qa
from span_plugin.formats.squad_metrics import best_null_threshold, squad_scores
from span_plugin.preprocess.qa import read_records


def read_questions(hub, input_path=None, split=None):
    """``(examples, version)`` of ``input_path`` or of the folder's ``split``."""
    if input_path:
        data = read_qa(input_path, require_answers=False)
        return data.examples, data.version
    path = os.path.join(hub.data, "raw", f"{split}.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such split in the checkpoint's folder; give "
                                f"--input FILE (SQuAD JSON or MRQA JSON Lines)")
    versions = hub.task.qa_labels.get("versions") or {}
    return read_records(path), versions.get(split, "1.1")


def write_qa_predictions(hub, examples, version, output, nbest=None, results=None,
                         null_threshold="default", n_best=20, batch_size=16):
    """Predict ``examples`` and write the files; returns the scores (or {} without gold).

    null_threshold: "default" (the model's), None (never ""), a number, or "tune" (v2.0:
    the threshold that maximizes F1 on these questions, reported in the scores).
    """
    tune = null_threshold == "tune"
    unlabelled = [ex for ex in examples if not ex.labelled]
    if unlabelled and (tune or results):
        raise ValueError(
            f"{unlabelled[0].where}: question {unlabelled[0].id!r} has no answers "
            f"({len(unlabelled)} of {len(examples)} questions have none); "
            f"{'--null-threshold tune' if tune else '--results'} needs every question's "
            f"gold answers (or is_impossible)")
    answers = hub.predict_examples(examples, n_best, None if tune else null_threshold,
                                   batch_size)
    predictions = {ex.id: a["text"] for ex, a in zip(examples, answers)}
    scores = {}
    has_gold = not unlabelled
    if tune:
        margins = {ex.id: a["null_margin"] for ex, a in zip(examples, answers)}
        threshold, _, _ = best_null_threshold(predictions, margins, examples, "2.0")
        predictions = {k: ("" if margins[k] > threshold else v) for k, v in predictions.items()}
        scores["null_threshold"] = threshold
    if has_gold:
        scores.update(squad_scores(predictions, examples,
                                   "2.0" if version == "2.0" or tune else "1.1"))
    _write_json(output, predictions)
    if nbest:
        _write_json(nbest, {ex.id: a["nbest"] for ex, a in zip(examples, answers)})
    if results and scores:
        _write_json(results, scores)
    return scores


def _write_json(path, value):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = json.dumps(value, ensure_ascii=False, indent=1) + "\n"
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
