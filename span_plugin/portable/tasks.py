"""The one table of the tasks a predictor serves: for each fairseq task, its predictor
class, what ``span-predict`` writes for it (an :class:`~span_plugin.portable.outputs.Output`),
the head it predicts with unless told, the kinds of data folder it reads (with the check
that refuses a folder of another kind by name before any of it is read), and what the
model card and the int8 guard say of it.

A folder's kind is told by what ``span-preprocess`` writes into it, so folders without a
data record are told too.
"""

import os
from dataclasses import dataclass

from span_plugin.portable import conll_files, glue_files, pair_files, qa_files
from span_plugin.portable.ner import NerPredictor
from span_plugin.portable.outputs import Output
from span_plugin.portable.pairs import PairPredictor
from span_plugin.portable.qa import QAPredictor
from span_plugin.portable.sentence import SentencePredictor


@dataclass(frozen=True)
class ServedTask:
    """How one fairseq task is predicted: ``predictor`` (a
    :class:`~span_plugin.portable.base.Predictor` subclass), ``output`` (span-predict's
    options and writer), ``head`` (the default head), ``reads`` (folder kinds, keys of
    :data:`KINDS`; the first is named in errors), ``words`` (what the model card calls
    it), ``example`` (a call of its predictor for the card; by number of inputs when it
    differs), ``agreement`` (what the int8 guard compares: None, not measured)."""

    predictor: type
    output: Output
    head: str
    reads: tuple
    words: str = ""
    example: object = "model.predict(...)"
    agreement: object = None


_SENTENCE = dict(
    predictor=SentencePredictor, output=glue_files.OUTPUT, head="sentence_classification_head",
    reads=("sentence", "pairs"),  # a phrase-pair folder is a table folder plus phrase pairs
    example={1: 'model.predict(["A fine, funny film."])',
             2: 'model.predict([("A man plays a flute.", "A man is playing a flute.")])'})
_TAGGING = dict(
    predictor=NerPredictor, output=conll_files.OUTPUT, head="tagging_head", reads=("tagging",),
    agreement="entities",
    example='model.predict_entities("EU rejects German call to boycott British lamb .")')
TASKS = {
    "span_classification": ServedTask(**_SENTENCE, words="sentence classification",
                                      agreement="labels"),
    "sentence_prediction": ServedTask(**_SENTENCE, words="sentence classification with "
                                                         "fairseq's own head"),
    "span_tagging": ServedTask(**_TAGGING, words="tagging (named entities)"),
    "span_labeling": ServedTask(**_TAGGING, words="span labeling (named entities)"),
    "span_qa": ServedTask(
        QAPredictor, qa_files.OUTPUT, "qa_head", ("qa",), "extractive question answering",
        'model.predict_answers([("Who wrote it?", "It was written by Ann Lee.")])', "answers"),
    "span_pair_classification": ServedTask(
        PairPredictor, pair_files.OUTPUT, "span_pair_head", ("pairs",),
        "span-pair classification",
        'model.predict_pairs("Amrozi accused his brother", "Amrozi blamed his brother", '
        '[{"source": [7, 14], "target": [7, 13]}])', "phrase labels"),
}


def build_predictor(folder, encoder, vocab, network, head=None):
    """The predictor of ``folder``'s task (:data:`TASKS`) over its parts; ``head``: the
    head to predict with (default: the one the task trained)."""
    served = TASKS[folder.task]
    return served.predictor(folder, encoder, vocab, network, head=head,
                            default_head=served.head)


def task_outputs():
    """Every output, each once, in the order of :data:`TASKS`."""
    return list({id(t.output): t.output for t in TASKS.values()}.values())

KINDS = {
    "qa": "an extractive QA folder (span-preprocess qa)",
    "tagging": "a tagging folder (span-preprocess conll)",
    "pairs": "a phrase-pair folder (span-preprocess pairs)",
    "sentence": "a sentence classification or regression folder (span-preprocess glue "
                "or table)",
}


def folder_kind(folder):
    """The kind of ``folder`` (a key of :data:`KINDS`), or None when it holds no
    ``input0/dict.txt`` (not a data folder)."""
    def has(*parts):
        return os.path.exists(os.path.join(folder, *parts))

    if has("qa"):
        return "qa"
    if has("phrase_label"):
        return "pairs"
    if has("label", "tags.txt") or has("words"):
        return "tagging"
    if has("input0", "dict.txt"):
        return "sentence"
    return None


def check_folder_kind(folder, task, checkpoint):
    """Raise ValueError when ``folder`` is not of a kind the checkpoint's ``task`` reads,
    naming both kinds. Tasks this module does not know are not checked."""
    if task not in TASKS:
        return
    reads = TASKS[task].reads
    kind = folder_kind(folder)
    if kind in reads:
        return
    what = KINDS[kind] if kind else "not a data folder (no input0/dict.txt)"
    raise ValueError(f"{folder} is {what}, but {checkpoint} was trained with task {task!r}, "
                     f"which reads {KINDS[reads[0]]}: give --data the folder it was trained "
                     f"on (or a copy of it)")
