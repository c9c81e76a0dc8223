"""The data record (:mod:`span_plugin.preprocess.records.provenance`) in fairseq's task state.

A task puts the record of its data folder into its state with :func:`attach`; fairseq
saves the state in every checkpoint as ``task_state``, under :data:`STATE_KEY`. A task
loaded from a checkpoint holds the checkpoint's copy (:func:`task_record`), and the hub
reads it from a loaded checkpoint (:func:`checkpoint_record`). This layer sits below the
tasks and the criterions, which both attach the record.
"""

import logging
import os

from span_plugin.preprocess.file_records import sha256, short
from span_plugin.preprocess.records.provenance import (RECORD_NAME, ProvenanceError, is_dictionary,
                                               read_record, verify_files)

logger = logging.getLogger(__name__)

STATE_KEY = "span_plugin_data_record"  # in the task state, hence in checkpoints

_WARNED = set()


def attach(task):
    """Read the record of the task's data folder, check its dictionaries, and put the
    record (with the folder's absolute path as ``data_dir``) into the task state, which
    fairseq saves in every checkpoint. A folder without a record gets a warning."""
    folder = getattr(getattr(task, "cfg", None), "data", None)
    state = getattr(task, "state", None)
    if not folder or state is None or STATE_KEY in state.state_dict:
        return
    record = read_record(folder)
    if record is None:
        if os.path.abspath(folder) not in _WARNED:
            _WARNED.add(os.path.abspath(folder))
            logger.warning(
                "%s has no %s (made before span_plugin 0.2, or by hand): it trains, but "
                "checkpoints will not record its encoder, n-gram dictionary and "
                "segmentation, so inference cannot check them. Rebuild it with "
                "span-preprocess to get one.", folder, RECORD_NAME)
        return
    verify_files(folder, record, only=is_dictionary)
    state.merge_state_dict({STATE_KEY: dict(record, data_dir=os.path.abspath(folder))})


def task_record(task):
    """The record a task holds (from its folder or a checkpoint), or None."""
    state = getattr(task, "state", None)
    return state.state_dict.get(STATE_KEY) if state is not None else None


def checkpoint_record(state):
    """The record a loaded checkpoint holds, or None (trained on a folder without one,
    or not by a span_plugin task)."""
    return (state.get("task_state") or {}).get(STATE_KEY)


def check_checkpoint_dictionary(checkpoint, srcdict, state):
    """Raise :class:`ProvenanceError` when ``checkpoint`` was trained on a folder
    tokenized with another dictionary than ``srcdict``. A checkpoint of a span_plugin
    task (a GLUE run, a transfer run, its stripped encoder) records its folder's
    dict.txt; with the same number of entries but other content, loading would succeed
    and every embedding row would stand for another token. A checkpoint without a
    record (pretrained, converted) passes: there is nothing to compare. ``state``: the
    checkpoint, loaded (:func:`span_plugin.runtime.checkpoints.load_state`)."""
    record = checkpoint_record(state) or {}
    trained = (record.get("encoder") or {}).get("srcdict")
    if trained is None or trained["sha256"] == sha256(srcdict):
        return
    raise ProvenanceError(
        f"{checkpoint} was trained on {record.get('data_dir', 'a folder')} tokenized with "
        f"{trained['path']} (sha256 {short(trained['sha256'])}), not with {srcdict} "
        f"(sha256 {short(sha256(srcdict))}): its embedding rows stand for other tokens. "
        f"Start from it with the dictionary (BPE_DIR or MODEL_DIR) it was trained with.")
