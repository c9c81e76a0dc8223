"""Predictions of a sentence checkpoint written as GLUE submission files
(``index<TAB>prediction`` with a header, one row per input row, in order).

Rows come from the data folder's ``raw/{split}.input*`` text (``valid``, ``test``,
MNLI's ``valid1`` and ``test1``, or any split of a ``span-preprocess table`` folder), or
from a GLUE TSV ``DIR/TASK/{split}.tsv`` read with the column rules of
``span-preprocess glue``.
"""

import os
import sys


def read_test_rows(glue_dir, task_name, split):
    """The input columns of a GLUE TSV: list of str (single) or tuples (pairs)."""
    from span_plugin.formats.glue import TASKS, read_split

    if task_name not in TASKS:
        raise ValueError(f"unknown GLUE task {task_name!r}; one of {sorted(TASKS)}")
    path = os.path.join(glue_dir, task_name, split + ".tsv")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found")
    rows = read_split(TASKS[task_name], path, split, bad_rows="default")
    columns = rows.inputs
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def read_folder_rows(data, split):
    """The raw text of a split of a prepared folder: list of str or tuples."""
    paths = [p for p in (os.path.join(data, "raw", f"{split}.input{k}") for k in range(2))
             if os.path.exists(p)]
    if not paths:
        raise FileNotFoundError(
            f"{data}/raw/{split}.input0 not found: the folder has no raw text of split "
            f"{split!r} (give --glue-dir and --task to read a GLUE TSV instead)")
    columns = []
    for path in paths:
        with open(path, encoding="utf-8", newline="\n") as f:
            columns.append(f.read().split("\n")[:-1])
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def format_predictions(predictions, regression_scale=1.0, clip=None):
    """Submission lines (header first) for the dicts of ``SentenceHubInterface.predict``."""
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


def write_submissions(hub, splits, outputs, glue_dir=None, task=None, regression_scale=None,
                      batch_size=32):
    """Predict each split into its output file. Regression values are multiplied by
    ``regression_scale`` (default: the folder's label scale, STS-B 5) and clipped to
    the folder's label range (STS-B [0, 5])."""
    labels = (hub.record or {}).get("labels") or {}
    if regression_scale is not None:
        scale = regression_scale
    elif "scale" in labels:
        scale = labels["scale"]
    else:  # a folder without a record: STS-B folders hold score / 5
        scale = 5.0 if task == "STS-B" else 1.0
    clip = labels.get("range") if hub.record else ([0.0, 5.0] if task == "STS-B" else None)
    for split, output in zip(splits, outputs):
        if glue_dir:
            examples = read_test_rows(glue_dir, task, split)
        else:
            examples = read_folder_rows(hub.data, split)
        predictions = hub.predict(examples, batch_size=batch_size)
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w", encoding="utf-8") as h:
            h.write("\n".join(format_predictions(predictions, scale, clip)) + "\n")
        print(f"{output}: {len(predictions)} predictions", file=sys.stderr)
