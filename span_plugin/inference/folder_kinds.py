"""Which kind of data folder a path is, and which kind a checkpoint's task needs, so that
a folder of another kind is refused by name before any of it is read.

Pure Python (os only). A folder's kind is told by what ``span-preprocess`` writes into
it, so folders without a data record are told too.
"""

import os

KINDS = {
    "qa": "an extractive QA folder (span-preprocess qa)",
    "tagging": "a tagging folder (span-preprocess conll)",
    "pairs": "a phrase-pair folder (span-preprocess pairs)",
    "sentence": "a sentence classification or regression folder (span-preprocess glue "
                "or table)",
}

# task -> the folder kinds it reads (a phrase-pair folder is a table folder plus phrase
# pairs: sentence tasks read it too)
TASK_READS = {
    "span_qa": ("qa",),
    "span_tagging": ("tagging",),
    "span_labeling": ("tagging",),
    "span_pair_classification": ("pairs",),
    "span_classification": ("sentence", "pairs"),
    "sentence_prediction": ("sentence", "pairs"),
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
    reads = TASK_READS.get(task)
    if reads is None:
        return
    kind = folder_kind(folder)
    if kind in reads:
        return
    what = KINDS[kind] if kind else "not a data folder (no input0/dict.txt)"
    raise ValueError(f"{folder} is {what}, but {checkpoint} was trained with task {task!r}, "
                     f"which reads {KINDS[reads[0]]}: give --data the folder it was trained "
                     f"on (or a copy of it)")
