"""What fairseq-train checks through the plugin before it trains.

- One run per ``--save-dir``: the directory is locked for the life of the run
  (:func:`span_plugin.files.outputs.hold`), so a second run into it stops, naming the
  first one's PID and command, instead of both saving over each other's checkpoints.
- A resumed run trains on the data its checkpoint was trained on: before a checkpoint
  is loaded (fairseq's own resume of ``checkpoint_last.pt``, ``--restore-file``, a
  recipe's relaunch), the data record it holds (:mod:`span_plugin.runtime.data_record`)
  is compared with the record of the folder the task reads now. A folder rebuilt with
  another label order, dictionary or encoder settings would otherwise be trained on as
  if it were the same, and the next checkpoint would record it as if it always had
  been. A run that starts over from the checkpoint's weights (``--reset-optimizer
  --reset-meters``, as ``--finetune-from-model`` does) is a new run and is not checked.

Either problem ends the command with one line on stderr and exit status 2.
"""

import os
import sys

from span_plugin.files.outputs import OutputBusyError, hold
from span_plugin.preprocess.file_records import short
from span_plugin.preprocess.records.provenance import comparable
from span_plugin.runtime import checkpoints
from span_plugin.runtime.data_record import checkpoint_record, task_record
from span_plugin.runtime.patching import replace

# Parts of a record that say nothing about the data trained on: where and by which
# command it was made, by which plugin version, from which input paths.
NOT_COMPARED = ("format", "plugin_version", "command", "task", "source", "data_dir",
                "bad_utf8")


def stop(message):
    """End fairseq-train with ``message`` and exit status 2 (a user's mistake)."""
    print(f"{os.path.basename(sys.argv[0]) or 'fairseq-train'}: error: {message}",
          file=sys.stderr, flush=True)
    raise SystemExit(2)


# How fairseq's training commands are started: their console scripts, or the modules.
TRAINING_COMMANDS = ("fairseq-train", "fairseq-hydra-train", "train.py", "hydra_train.py")


def refuse(message):
    """A setting that cannot train: in fairseq-train, the command's one line and exit
    status 2 (:func:`stop`); elsewhere (the hub, span-predict, a script) a ValueError,
    which those report in one line."""
    if os.path.basename(sys.argv[0] if sys.argv else "") in TRAINING_COMMANDS:
        stop(message)
    raise ValueError(message)


def _shown(value):
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return f"sha256 {short(value)}"
    return repr(value)


def record_differences(trained, now):
    """``[(key, trained value, current value)]`` where two data records differ, keys
    dotted (``labels.names``, ``files.input0/dict.txt``). A key that one of them lacks
    (a record of another plugin version) is not compared."""
    out = []

    def walk(a, b, key):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in a:
                if k in b and not (not key and k in NOT_COMPARED):
                    walk(a[k], b[k], f"{key}.{k}" if key else k)
        elif a != b:
            out.append((key, a, b))

    walk(comparable(trained), comparable(now), "")
    return out


def check_resumed_data(checkpoint, task):
    """Stop (exit 2) when ``checkpoint`` records other data than the folder ``task``
    reads now; pass when either has no record (nothing to compare)."""
    now = task_record(task)
    if now is None or not os.path.isfile(checkpoint):
        return
    trained = checkpoint_record(checkpoints.load_mapped(checkpoint))
    if trained is None:
        return
    differences = record_differences(trained, now)
    if not differences:
        return
    key, was, is_now = differences[0]
    more = (f" (and {len(differences) - 1} more: "
            f"{', '.join(k for k, _, _ in differences[1:4])}{', ...' if len(differences) > 4 else ''})"
            if len(differences) > 1 else "")
    folder = now.get("data_dir") or getattr(task.cfg, "data", "the data folder")
    stop(f"{checkpoint} was trained on other data than {folder} holds now: its {key} is "
         f"{_shown(was)}, the folder's is {_shown(is_now)}{more}; the folder was rebuilt "
         f"since. Resuming would go on training as if the data were the same. Start a new "
         f"run in another --save-dir (a recipe: another OUT_DIR, or remove this one), or "
         f"start over from the checkpoint's weights with --reset-optimizer --reset-meters "
         f"--reset-dataloader")


def guard_training():
    """Lock fairseq-train's --save-dir and check a resumed checkpoint's data (installed
    by :func:`span_plugin.runtime.compat.apply`, once however often the plugin is
    imported)."""
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    def wrap_verify(verify):
        def verify_checkpoint_directory(save_dir):
            try:
                hold(save_dir)  # until the run ends: the lock goes with the process
            except OutputBusyError as err:
                stop(f"--save-dir {save_dir}: {err}")
            return verify(save_dir)

        return verify_checkpoint_directory

    def wrap_load(load):
        def load_checkpoint(self, filename, reset_optimizer=False, reset_lr_scheduler=False,
                            optimizer_overrides=None, reset_meters=False):
            if not (reset_optimizer and reset_meters) and "://" not in str(filename):
                check_resumed_data(filename, self.task)
            return load(self, filename, reset_optimizer, reset_lr_scheduler,
                        optimizer_overrides, reset_meters=reset_meters)

        return load_checkpoint

    replace(checkpoint_utils, "verify_checkpoint_directory", wrap_verify)
    replace(Trainer, "load_checkpoint", wrap_load)
