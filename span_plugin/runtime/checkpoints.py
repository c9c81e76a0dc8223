"""Crash-safe checkpoints: every checkpoint file a run writes is whole or absent.

fairseq 0.12 writes the first file of a save to ``NAME.tmp`` and renames it (without
``fsync``), then *copies* it to the other names (``checkpoint_last.pt``,
``checkpoint_best.pt``, ...) in place: a run killed during such a copy leaves a cut-off
file under the final name, which later fails to load with ``OSError: [Errno 22]
Invalid argument`` or a zip error that names no file. With the plugin loaded
(:func:`span_plugin.runtime.compat.apply`):

- every checkpoint file, the first and the copies (hard links where the file system
  allows: no file is changed in place), is written to ``NAME.tmp``,
  flushed to disk, renamed over ``NAME`` and the rename made durable
  (:func:`span_plugin.formats.files.atomic_write`);
- loading a damaged checkpoint raises :class:`DamagedCheckpointError`, naming the file
  and what to do;
- :func:`prepare_resume` (``python -m span_plugin.runtime.checkpoints resume SAVE_DIR``, run by
  the recipes before every relaunch) removes stale ``*.tmp`` files, moves a damaged
  ``checkpoint_last.pt`` aside and, when another intact checkpoint has more updates
  (a save cut off between its files) or ``checkpoint_last.pt`` is gone, puts the newest
  intact one in its place, so that fairseq resumes from it.

``python -m span_plugin.runtime.checkpoints same-dictionary CHECKPOINT DICT`` (run by the
recipes on ROBERTA_PATH before a first launch) refuses a starting checkpoint trained
with another dictionary than DICT (:func:`span_plugin.preprocess.provenance.check_checkpoint_dictionary`).
"""

import argparse
import errno
import glob
import os
import pickle
import sys


# atomic_write is imported from here by runtime.compat and runtime.transfer.
from span_plugin.formats.files import TMP_SUFFIX, atomic_copy, atomic_link, atomic_write  # noqa: F401

LAST = "checkpoint_last.pt"
# The task-state entry where the span_classification criterion keeps the latest
# validation pass's predictions (read back by span-predict --from-validation).
VALID_PREDICTIONS = "valid_predictions"


class DamagedCheckpointError(RuntimeError):
    """A checkpoint file that is cut short or corrupt."""


# ---------------------------------------------------------------------------------
# Reading


def is_damage(err):
    """Whether an exception from ``torch.load`` means a cut-off or corrupt file."""
    if isinstance(err, EOFError):
        return True
    if isinstance(err, OSError) and err.errno == errno.EINVAL:
        return True  # torch reading a file shorter than its header
    if isinstance(err, pickle.UnpicklingError):
        return "WeightsUnpickler" not in str(err)  # the allow-list refusal is not damage
    if isinstance(err, RuntimeError):
        text = str(err)
        return any(s in text for s in ("PytorchStreamReader", "zip archive", "unexpected EOF"))
    return False


def damaged_error(path, err):
    return DamagedCheckpointError(
        f"checkpoint {path} is damaged ({type(err).__name__}: {str(err).splitlines()[0][:160]}): "
        f"it was cut short, e.g. by a run killed while writing it with a version of fairseq "
        f"or span_plugin that did not write atomically, or by a full disk. Move it away "
        f"and resume from the newest intact checkpoint: `python -m span_plugin.runtime.checkpoints "
        f"resume {os.path.dirname(os.path.abspath(path))}` does both (the recipes run it "
        f"before every launch)")


def load_state(path):
    """A fairseq checkpoint file as a dict, on the CPU (fairseq's allow-listed types)."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def load_mapped(path):
    """A checkpoint's dict with its tensors memory-mapped, not read (fairseq's
    allow-listed types only): cheap when only the small entries are wanted."""
    import torch

    from span_plugin.convert.bert import allow_checkpoint_types

    allow_checkpoint_types()
    try:
        return torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except RuntimeError as err:
        if "mmap can only be used" not in str(err):
            raise
        # An old (non-zip) torch.save format, or an empty file: read it whole.
        return torch.load(path, map_location="cpu", weights_only=True)


def read_updates(path):
    """``(num_updates, None)`` of a checkpoint that loads; ``(None, why)`` for a damaged
    one; ``(-1, why)`` for one that cannot be inspected here but is not damaged (it
    holds types outside the allow-list: fairseq's own loader decides). The file is
    memory-mapped, so its tensors are not read."""
    try:
        state = load_mapped(path)
    except Exception as err:  # noqa: BLE001 - sorted below
        text = str(err).splitlines()[0][:160] if str(err) else ""
        return (None if is_damage(err) else -1), f"{type(err).__name__}: {text}"
    if not isinstance(state, dict) or "model" not in state:
        return None, "not a fairseq checkpoint (no 'model' entry)"
    history = state.get("optimizer_history") or [{}]
    return int(history[-1].get("num_updates") or 0), None


def checkpoint_files(save_dir):
    """Checkpoint files of a save dir (not temporaries or damaged ones set aside)."""
    return sorted(p for p in glob.glob(os.path.join(save_dir, "checkpoint*.pt"))
                  if os.path.isfile(p))


def prepare_resume(save_dir, log=print):
    """Make ``checkpoint_last.pt`` of ``save_dir`` the newest intact checkpoint (most
    updates; on a tie, checkpoint_last.pt itself), so that fairseq resumes from it.

    Stale ``*.tmp`` files (a save that was cut off) are removed; a damaged
    ``checkpoint_last.pt`` is moved to ``checkpoint_last.pt.damaged``. Returns the
    path fairseq will resume from, or None (nothing to resume: a first launch).
    """
    if not os.path.isdir(save_dir):
        return None
    for tmp in glob.glob(os.path.join(save_dir, "*" + TMP_SUFFIX)):
        os.remove(tmp)
        log(f"removed {tmp}, left by a run stopped while writing it")
    last = os.path.join(save_dir, LAST)
    best, best_updates = None, -1
    for path in checkpoint_files(save_dir):
        updates, why = read_updates(path)
        if updates == -1:  # not damaged, not inspectable: leave it to fairseq
            log(f"{path}: not inspected ({why}); left as it is")
            if path == last:
                return last
            continue
        if why is not None:
            if path == last:
                os.replace(last, last + ".damaged")
                log(f"{last} is damaged ({why}); moved to {last}.damaged")
            else:
                log(f"{path} is damaged ({why}); not resumed from")
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
    a = p.parse_args(argv)
    if a.cmd == "same-dictionary":
        from span_plugin.preprocess.provenance import ProvenanceError, check_checkpoint_dictionary

        try:
            check_checkpoint_dictionary(a.checkpoint, a.srcdict, load_state(a.checkpoint))
        except (OSError, ProvenanceError) as err:
            print(f"span_plugin.runtime.checkpoints: {err}", file=sys.stderr)
            return 2
        return 0
    prepare_resume(a.save_dir, log=lambda m: print(f"span_plugin.runtime.checkpoints: {m}",
                                                   file=sys.stderr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
