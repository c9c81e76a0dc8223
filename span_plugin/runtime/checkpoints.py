"""Crash-safe checkpoints: every checkpoint file a run writes is whole or absent (written
to ``NAME.tmp``, flushed, renamed, the rename made durable), read with fairseq's
allow-listed types only, and :func:`prepare_resume` (``python -m
span_plugin.runtime.checkpoints resume SAVE_DIR``) sets a damaged ``checkpoint_last.pt``
aside before a relaunch. Why fairseq's own saves are not enough and the other commands
(``same-dictionary``, ``check``): docs/RELIABILITY.md, section "Module notes"."""

import argparse
import glob
import os
import sys


from span_plugin.convert.safe_load import (CheckpointFileError, DamagedCheckpointError,
                                           UnsafeCheckpointError, _first_line, load_checkpoint,
                                           structure_problem)
from span_plugin.files.atomic import TMP_SUFFIX, atomic_link

LAST = "checkpoint_last.pt"
# The task-state entry where the span_classification criterion keeps the latest
# validation pass's predictions (read back by span-predict --from-validation).
VALID_PREDICTIONS = "valid_predictions"


# ---------------------------------------------------------------------------------
# Reading: allow-listed types only (span_plugin.convert.safe_load), three errors


def damaged_error(path, why):
    """The error of a damaged training checkpoint: what was found (``why``, a string or
    the exception) and how to resume from the newest intact one."""
    why = why if isinstance(why, str) else _first_line(why)
    return DamagedCheckpointError(path, why, (
        f"checkpoint {path} is damaged ({why}): it was cut short, e.g. by a run killed "
        f"while writing it with a version of fairseq or span_plugin that did not write "
        f"atomically, or by a full disk. Move it away and resume from the newest intact "
        f"checkpoint: `python -m span_plugin.runtime.checkpoints resume "
        f"{os.path.dirname(os.path.abspath(path))}` does both (the recipes run it before "
        f"every launch)"))


def load_state(path, mmap=False):
    """A fairseq checkpoint file as a dict, on the CPU, with fairseq's allow-listed
    types only (``mmap``: tensors memory-mapped, not read). Raises FileNotFoundError or
    a :class:`CheckpointFileError`: :class:`NotACheckpointError`,
    :class:`DamagedCheckpointError` (with the way to resume) or
    :class:`UnsafeCheckpointError`, each naming the file."""
    try:
        return load_checkpoint(path, mmap=mmap)
    except DamagedCheckpointError as err:
        raise damaged_error(path, err.detail) from err


def load_mapped(path):
    """A checkpoint's dict with its tensors memory-mapped, not read (:func:`load_state`):
    cheap when only the small entries are wanted."""
    return load_state(path, mmap=True)


def read_updates(path):
    """``(num_updates, None)`` of a checkpoint that loads; ``(None, error)`` for one
    that does not (a :class:`CheckpointFileError`). The file is memory-mapped, so its
    tensors are not read."""
    try:
        state = load_mapped(path)
    except CheckpointFileError as err:
        return None, err
    problem = structure_problem(state)
    if problem:  # loads, but fairseq could not resume from it
        return None, DamagedCheckpointError(path, problem)
    history = state.get("optimizer_history") or [{}]
    return int(history[-1].get("num_updates") or 0), None


def size_flags(state):
    """The fairseq-train model-size flags a loaded checkpoint records (``--encoder-layers
    N ...``), or [] when its cfg or args do not say (the recipes then leave the sizes to
    fairseq)."""
    from span_plugin.convert.hf_source import ConversionError
    from span_plugin.convert.flags import train_flags

    cfg = state.get("cfg")
    model_cfg = cfg.get("model") if isinstance(cfg, dict) else None
    for source in (model_cfg, state.get("args")):
        if source is not None:
            try:
                return train_flags(source)
            except ConversionError:
                return []
    return []


def checkpoint_files(save_dir):
    """Checkpoint files of a save dir (not temporaries or damaged ones set aside)."""
    return sorted(p for p in glob.glob(os.path.join(save_dir, "checkpoint*.pt"))
                  if os.path.isfile(p))


def prepare_resume(save_dir, log=print):
    """Make ``checkpoint_last.pt`` of ``save_dir`` the newest intact checkpoint (most
    updates; on a tie, checkpoint_last.pt itself), so that fairseq resumes from it.

    Stale ``*.tmp`` files (a save that was cut off) are removed; a damaged
    ``checkpoint_last.pt`` (cut short, a zip CRC that does not match, entries fairseq
cannot use: :func:`structure_problem`; or one that is no checkpoint) is moved to
    ``checkpoint_last.pt.damaged``. Returns the path fairseq will resume from, or None
    (nothing to resume: a first launch). A checkpoint holding an object outside the
    allow-list (any global: ``os.system`` as ``eval``) raises
    :class:`UnsafeCheckpointError` before anything is moved: no file is set aside and no
    run resumes while it is there.
    """
    if not os.path.isdir(save_dir):
        return None
    for tmp in glob.glob(os.path.join(save_dir, "*" + TMP_SUFFIX)):
        os.remove(tmp)
        log(f"removed {tmp}, left by a run stopped while writing it")
    last = os.path.join(save_dir, LAST)
    best, best_updates = None, -1
    read = [(path, *read_updates(path)) for path in checkpoint_files(save_dir)]
    for _, _, err in read:  # before anything moves: the user must look at it
        if isinstance(err, UnsafeCheckpointError):
            raise err
    for path, updates, err in read:
        if err is not None:  # damaged, or not a checkpoint at all
            why = (f"{path} is damaged ({err.detail})" if isinstance(err, DamagedCheckpointError)
                   else str(err))
            if path == last:
                os.replace(last, last + ".damaged")
                log(f"{why}; moved to {last}.damaged")
            else:
                log(f"{why}; not resumed from")
            continue
        if updates > best_updates or (updates == best_updates and path == last):
            best, best_updates = path, updates
    if best is None:
        if os.path.exists(last + ".damaged"):
            log(f"no intact checkpoint in {save_dir}: the run starts afresh")
        return None
    if best != last:
        atomic_link(best, last)
        log(f"resuming from {best} ({best_updates} updates), copied to {last}")
    return last


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m span_plugin.runtime.checkpoints",
        description="resume: make SAVE_DIR/checkpoint_last.pt the newest intact checkpoint; "
        "same-dictionary: CHECKPOINT was trained with the fairseq dict.txt DICT")
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("resume", help="prepare a save dir for a relaunch")
    q.add_argument("save_dir")
    q = sub.add_parser("same-dictionary", help="refuse a starting checkpoint of another "
                       "vocabulary (same size or not)")
    q.add_argument("checkpoint")
    q.add_argument("srcdict")
    q = sub.add_parser("check", help="CHECKPOINT loads with the allow-list (else its error, "
                       "exit 2); prints its model-size flags when it records them")
    q.add_argument("checkpoint")
    args = p.parse_args(argv)
    if args.cmd == "check":
        try:
            print(" ".join(size_flags(load_state(args.checkpoint, mmap=True))))
        except (OSError, CheckpointFileError) as err:
            print(f"span_plugin.runtime.checkpoints: {err}", file=sys.stderr)
            return 2
        return 0
    if args.cmd == "same-dictionary":
        from span_plugin.preprocess.records.provenance import ProvenanceError
        from span_plugin.runtime.data_record import check_checkpoint_dictionary

        try:
            check_checkpoint_dictionary(args.checkpoint, args.srcdict, load_state(args.checkpoint, mmap=True))
        except (OSError, ProvenanceError, CheckpointFileError) as err:
            print(f"span_plugin.runtime.checkpoints: {err}", file=sys.stderr)
            return 2
        return 0
    from span_plugin.files.outputs import OutputBusyError, locked

    try:
        with locked(args.save_dir):  # not under a run that is writing it
            prepare_resume(args.save_dir, log=lambda m: print(
                f"span_plugin.runtime.checkpoints: {m}", file=sys.stderr))
    except (OSError, CheckpointFileError, OutputBusyError) as err:
        print(f"span_plugin.runtime.checkpoints: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
