"""Text the preprocessing benchmarks time: the input sentences of the GLUE training
files, read by the project's own GLUE reader (what ``span-preprocess glue`` reads)."""

import os


def glue_sentences(glue_dir, tasks=None):
    """Every input field of every ``TASK/train.tsv`` under ``glue_dir`` whose task the
    reader knows, task by task in name order; only ``tasks`` when given (quick runs)."""
    from span_plugin.formats.glue import TASKS, read_split

    for name in sorted(tasks or TASKS):
        path = os.path.join(glue_dir, name, "train.tsv")
        if not os.path.exists(path):
            continue
        rows = read_split(TASKS[name], path, "train", bad_rows="default")
        for column in rows.inputs:
            yield from column
