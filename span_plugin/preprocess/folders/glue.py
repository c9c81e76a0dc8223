"""GLUE (and SNLI) task folders laid out as fairseq's RoBERTa recipe lays them out:
``prepare_task("RTE", glue_dir, out, FolderOptions(spec, dict_txt))`` reads
``glue_dir/RTE/*.tsv`` (:mod:`span_plugin.formats.glue`) and writes the folder of
:mod:`span_plugin.preprocess.folders.folder`, with the task's F1 positive class. The
folder's files: docs/GLUE.md, section "Module notes"."""

import logging
import os

from span_plugin.formats.glue import TASKS, read_split
from span_plugin.preprocess.folders.folder import whole_folder, write_task_folder

logger = logging.getLogger(__name__)


def prepare_task(task_name, glue_dir, out_dir, options, bad_rows="default"):
    """Build the binarized folder of one task (and its data record) with ``options``
    (:class:`~span_plugin.preprocess.folders.options.FolderOptions`; the record's task
    name is the task's own). Returns {split: rows written}."""
    task = TASKS[task_name]
    src = os.path.join(glue_dir, task.name)
    if not os.path.isdir(src):
        raise FileNotFoundError(f"{src}: no such task folder (expected glue_data layout)")
    splits = []
    for raw_split, split in task.splits:
        path = os.path.join(src, raw_split + ".tsv")
        if not os.path.exists(path):
            logger.warning("%s: %s missing, split %s skipped", task.name, path, split)
            continue
        splits.append((split, path, read_split(task, path, raw_split, bad_rows,
                                               options.bad_utf8)))
    if not splits:
        raise FileNotFoundError(f"{src}: none of the split files "
                                f"{[s + '.tsv' for s, _ in task.splits]} exist")
    with whole_folder(out_dir) as tmp:  # whole or absent
        return write_task_folder(
            tmp, splits, options, task=task.name, regression=task.regression,
            positive=task.positive, label_scale=5.0 if task.regression else 1.0,
            label_range=[0.0, 5.0] if task.regression else None)
