"""What int8 costs, measured: a model's predictions of a labelled split in float32 and
in int8, the task's metric of each and how often the two agree; int8 refused when its
metric falls more than ``max_drop`` points below float32's.

A *predictor* is anything with the fairseq hub's prediction methods: a hub
(``SpanHubInterface``, possibly answered by an ONNX graph,
:mod:`span_plugin.export.onnx_quantize`) or a portable model
(:func:`span_plugin.portable.load_model`). The examples are a split of a prepared task
folder (default ``valid``: the data record's folder, or ``--data``) or a file the user
names (``--input``): a GLUE TSV of the record's GLUE task, a CoNLL file, a SQuAD / MRQA
file, or span pairs' JSON Lines with phrase labels.

Metrics, in points (percent): the GLUE task's own (MRPC and QQP F1 of the positive
class, CoLA Matthews correlation, STS-B Pearson; accuracy for the others and for tables),
entity F1 (tagging, span labeling, in the model's metric mode), SQuAD F1 (QA), phrase
label accuracy (span pairs). Agreement: the share of examples whose int8 prediction is
the float32 one (the label, the set of entities, the answer text, every phrase label);
regression: the Pearson correlation of the two predictions; the drop's 95% interval
(:mod:`span_plugin.export.paired_metrics`) beside it.
"""

import json
import math
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from span_plugin.convert.hf_source import ConversionError
from span_plugin.export import paired_metrics as paired
from span_plugin.portable.tasks import TASKS

DEFAULT_MAX_DROP = 0.5  # points of the task's metric


@dataclass(frozen=True)
class GuardSettings:
    """What the accuracy guard predicts and how it judges: the ``split`` of the data
    folder (or the file ``input_path``), the largest drop of the task's metric it lets
    through (``max_drop`` points), ``force`` (keep int8 past it, said so), and the least
    agreement of the two predictions it lets through (``min_agreement`` points; None:
    not judged): a metric can hold while many answers change both ways."""

    max_drop: float = DEFAULT_MAX_DROP
    split: str = "valid"
    input_path: Optional[str] = None
    force: bool = False
    min_agreement: Optional[float] = None
GLUE_METRICS = {"MRPC": "f1", "QQP": "f1", "CoLA": "mcc", "STS-B": "pearson"}


def agreement_of(task):
    """What the guard compares for ``task`` (the task table's ``agreement``), or None."""
    served = TASKS.get(task)
    return served.agreement if served else None


class Int8Refused(ConversionError):
    """int8's metric fell more than the allowed points below float32's."""


@dataclass
class Examples:
    """A labelled split: ``inputs`` as the task's predictor takes them, ``gold`` one per
    input (QA: the examples themselves), ``source`` what was read, for messages."""

    task: str
    inputs: list
    gold: list
    source: str
    extra: dict = field(default_factory=dict)


def task_of(predictor):
    """The fairseq task name the predictor's model was trained with."""
    return predictor.task_name


def _record(predictor):
    return getattr(predictor, "record", None) or {}


def _lines(path):
    from span_plugin.formats.lines import read_file_lines

    return list(read_file_lines(path))


def recorded_data(record):
    """The task folder the data record names (``data_dir``: where the model was trained),
    when it is still a folder here; else None."""
    path = (record or {}).get("data_dir")
    return path if isinstance(path, str) and os.path.isdir(path) else None


def read_examples(predictor, split="valid", input_path=None):
    """The labelled examples the guard predicts: ``input_path`` when given, else split
    ``split`` of ``predictor.data`` (its task folder). A split or file without gold
    labels is a ValueError naming it."""
    task = task_of(predictor)
    if agreement_of(task) is None:
        covered = [t for t in TASKS if agreement_of(t)]
        raise ValueError(f"task {task!r}: the int8 check covers {', '.join(covered)}")
    if input_path is None:
        data = getattr(predictor, "data", None)
        if not data:
            raise ValueError("no labelled examples to measure int8 on: the data record's "
                             "folder is not here; give --data FOLDER (the task folder whose "
                             "split to predict) or --input FILE")
        return _folder_examples(predictor, task, data, split)
    return _file_examples(predictor, task, os.fspath(input_path))


def _folder_examples(predictor, task, data, split):
    where = f"split {split} of {data}"
    if task == "span_classification":
        from span_plugin.portable.glue_files import read_folder_rows

        rows = read_folder_rows(data, split)
        # class names in raw/; regression targets stay as text in label/
        paths = [os.path.join(data, d, f"{split}.label") for d in ("raw", "label")]
        path = next((p for p in paths if os.path.isfile(p)), paths[0])
        if not os.path.isfile(path):
            raise ValueError(f"{path}: missing: {where} has no gold labels to score int8 on")
        gold = _lines(path)
        if len(gold) != len(rows):
            raise ValueError(f"{path}: {len(gold)} labels for the {len(rows)} rows of {where}")
        return Examples(task, list(rows), gold, where)
    if task in ("span_tagging", "span_labeling"):
        from span_plugin.portable.conll_files import read_items

        words, tags, _ = read_items(data, split)
        return Examples(task, words, tags, where)
    if task == "span_qa":
        from span_plugin.portable.qa_files import read_questions

        examples, version, _ = read_questions(predictor, split=split)
        return _qa_examples(task, examples, version, where)
    path = os.path.join(data, f"{split}.jsonl")
    source = (((_record_of_folder(data) or {}).get("source") or {}).get(split) or {})
    path = source.get("path") if isinstance(source, dict) and source.get("path") else path
    if not os.path.isfile(path):
        raise ValueError(f"{where}: the span pairs it was built from ({path}) are not here; "
                         f"give --input PAIRS.jsonl (phrase pairs with their labels)")
    return _pair_examples(task, path)


def _record_of_folder(data):
    from span_plugin.preprocess.records import provenance

    return provenance.read_record(data)


def _file_examples(predictor, task, path):
    if task == "span_classification":
        from span_plugin.formats.glue import TASKS, read_split

        name = _record(predictor).get("task")
        if name not in TASKS:
            raise ValueError(f"--input {path}: a sentence model of {name!r}, not a GLUE task "
                             f"whose TSV columns are known; give --data FOLDER (a split of a "
                             f"prepared folder) instead")
        rows = read_split(TASKS[name], path, "dev", bad_rows="default")
        if not rows.labels:
            raise ValueError(f"--input {path}: no labelled rows of {name}")
        columns = rows.inputs
        inputs = columns[0] if len(columns) == 1 else list(zip(*columns))
        return Examples(task, list(inputs), list(rows.labels), path)
    if task in ("span_tagging", "span_labeling"):
        from span_plugin.formats.conll import read_conll

        sentences = read_conll(path).sentences
        return Examples(task, [s.words for s in sentences], [s.tags for s in sentences], path)
    if task == "span_qa":
        from span_plugin.formats.squad import read_qa

        data = read_qa(path, require_answers=True, official=True)
        return _qa_examples(task, data.examples, data.version, path)
    return _pair_examples(task, path)


def _qa_examples(task, examples, version, where):
    unlabelled = [ex for ex in examples if not ex.labelled]
    if unlabelled:
        raise ValueError(f"{unlabelled[0].where}: question {unlabelled[0].id!r} has no "
                         f"answers: the int8 check scores every question of {where}")
    return Examples(task, list(examples), list(examples), where, {"version": version})


def _pair_examples(task, path):
    inputs, gold = [], []
    for n, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            phrases = row["phrases"]
            labels = [p["label"] for p in phrases]
            inputs.append((row["sentence1"], row["sentence2"],
                           [{"source": p["source"], "target": p["target"]} for p in phrases]))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}:{n}: expected sentence1, sentence2 and phrases with "
                             f"source, target and label ({type(err).__name__}: {err})") from None
        gold.append([str(x) for x in labels])
    return Examples(task, inputs, gold, path)


# ---- predictions and metrics -----------------------------------------------------------


def predict(predictor, examples):
    """One prediction per example, comparable across float32 and int8: a label or a
    score (sentences), a sorted tuple of entities, an answer text, a tuple of phrase
    labels."""
    task = examples.task
    if task == "span_classification":
        out = predictor.predict(examples.inputs, batch_size=32)
        return [p["score"] if "score" in p else p["label"] for p in out]
    if task in ("span_tagging", "span_labeling"):
        return [tuple(sorted(e)) for e in predictor.predict_words(examples.inputs, batch_size=32)]
    if task == "span_qa":
        from span_plugin.portable.qa_files import first_occurrences

        asked = first_occurrences(examples.inputs)
        answers = predictor.predict_examples(asked, 20, "default", 16)
        by_id = {ex.id: a["text"] for ex, a in zip(asked, answers)}
        return [by_id[ex.id] for ex in examples.inputs]
    return [tuple(p["label"] for p in predictor.predict_pairs(*x)["phrases"])
            for x in examples.inputs]


def metric(predictor, examples, predicted):
    """``(name, points, counts)`` of the task's metric of ``predicted`` against the gold:
    ``counts`` ``[N, K]``, per example, whose sum the metric is a function of
    (:mod:`span_plugin.export.paired_metrics`)."""
    task, gold = examples.task, examples.gold
    if task == "span_classification":
        record = _record(predictor)
        if predictor.regression:
            name, positive, gold = "pearson", None, [float(g) for g in gold]
        else:
            name = GLUE_METRICS.get(record.get("task"), "accuracy")
            positive = (record.get("labels") or {}).get("positive")
            if name == "pearson" or name == "f1" and positive is None:
                name = "accuracy"
        counts = paired.labels_counts(predicted, gold, name, None if positive is None
                                      else str(positive), getattr(predictor, "labels", ()))
        return name, paired.points(name, counts), counts
    if task in ("span_tagging", "span_labeling"):
        from span_plugin.modules import entities as ner

        mode = predictor.metric_mode
        counts = np.asarray([ner.match_counts([list(p)], [ner.entities_of(g, mode)])
                             for p, g in zip(predicted, gold)], dtype=np.float64)
        return "entity f1", paired.points("entity f1", counts), counts
    if task == "span_qa":
        from span_plugin.formats.squad_metrics import gold_texts, score_answer, scored_questions

        by_id = dict(zip((ex.id for ex in examples.inputs), predicted))
        version = examples.extra.get("version") or (
            "2.0" if any(ex.impossible for ex in examples.inputs) else "1.1")
        # the official scripts' F1 (squad_scores), question by question
        counts = np.asarray([[score_answer(by_id[q.id], gold_texts(q), version)[1], 1]
                             for q in scored_questions(examples.inputs, version)])
        return "squad f1", paired.points("squad f1", counts), counts
    counts = np.asarray([[sum(p == g for p, g in zip(ps, gs)), len(gs)]
                         for ps, gs in zip(predicted, gold)], dtype=np.float64).reshape(-1, 2)
    return "phrase accuracy", paired.points("phrase accuracy", counts), counts


def agreement(examples, fp32, int8):
    """Points: the share of examples predicted alike (regression: Pearson of the two)."""
    if fp32 and isinstance(fp32[0], float):
        return paired.points("pearson", paired.labels_counts(fp32, int8, "pearson"))
    return 100 * float(np.mean([a == b for a, b in zip(fp32, int8)])) if fp32 else 100.0


def outcome(predictor, examples):
    """``(metric name, points, counts, predictions)`` of ``predictor`` on ``examples``
    (:func:`metric`)."""
    if not examples.inputs:
        raise ValueError(f"{examples.source}: no examples to measure int8 on")
    predicted = predict(predictor, examples)
    return (*metric(predictor, examples, predicted), predicted)


def measure(fp32, int8, examples, method):
    """Predict ``examples`` with both predictors: the record written into the folder
    (``method``: how int8 was made), without the verdict (:func:`judge`)."""
    return compare(examples, method, outcome(fp32, examples), outcome(int8, examples))


def compare(examples, method, fp32, int8):
    """The record of two :func:`outcome` results (float32's first)."""
    name, score32, counts32, a = fp32
    _, score8, counts8, b = int8
    return {"method": method, "examples": len(examples.inputs), "source": examples.source,
            "metric": name, "fp32": round(score32, 2), "int8": round(score8, 2),
            "drop": round(score32 - score8, 2),
            "drop_interval": paired.drop_interval(name, counts32, counts8),
            "agreement": round(agreement(examples, a, b), 2),
            "agreement_of": "pearson of the scores" if a and isinstance(a[0], float)
            else agreement_of(examples.task)}


def judge(record, max_drop=DEFAULT_MAX_DROP, force=False, where="int8", min_agreement=None):
    """``record`` with the thresholds and the verdict; :class:`Int8Refused` (one line
    naming both figures) when int8's metric is more than ``max_drop`` points below
    float32's, or the two agree on fewer than ``min_agreement`` points of the examples,
    unless ``force``."""
    thresholds = {"--max-drop": max_drop}
    if min_agreement is not None:
        thresholds["--min-agreement"] = min_agreement
    for flag, value in thresholds.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value)):
            raise ValueError(f"{flag} {value!r}: expected a finite number of points")
    over = record["fp32"] - record["int8"] > max_drop
    apart = min_agreement is not None and record["agreement"] < min_agreement
    if (over or apart) and not force:
        why = (f"a drop of {record['drop']:.2f} points, more than --max-drop {max_drop:g}" if over
               else f"{record['agreement_of']} agreeing {record['agreement']:.2f}%, less than "
                    f"--min-agreement {min_agreement:g}")
        raise Int8Refused(
            f"{where}: int8 {record['metric']} {record['int8']:.2f} against float32 "
            f"{record['fp32']:.2f} on {record['source']} ({record['examples']} examples): "
            f"{why}; nothing written (--force-int8 keeps it)")
    if over or apart:
        verdict = f"forced past {'max_drop' if over else 'min_agreement'}"
    else:
        verdict = "within max_drop" if min_agreement is None else "within max_drop and min_agreement"
    return dict(record, max_drop=max_drop, min_agreement=min_agreement, accepted=verdict)


def summary(record):
    """One line of the figures, for the command's output and the model card."""
    return (f"int8 ({record['method']}): {record['metric']} {record['int8']:.2f} against "
            f"float32 {record['fp32']:.2f} (drop {record['drop']:.2f}{_interval(record)}, allowed "
            f"{record['max_drop']:g}; {record['accepted']}), {record['agreement_of']} "
            f"agreeing {record['agreement']:.2f}%"
            + ("" if record.get("min_agreement") is None else f" (least allowed {record['min_agreement']:g})")
            + f", on {record['examples']} examples of {record['source']}")


def _interval(record):
    """`` (95% interval a to b)`` of the drop, when the record has one."""
    low_high = record.get("drop_interval")
    return "" if not low_high else f", 95% interval {low_high[0]:.2f} to {low_high[1]:.2f}"
