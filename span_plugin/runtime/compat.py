"""Fixes that let fairseq 0.12 run on the current stack (torch >= 2.6, hydra 1.3).

Applied once, when the plugin is imported: that happens in every process fairseq
starts, because each worker imports ``--user-dir`` / ``common.user_dir`` itself.
"""

import argparse
import importlib.util
import logging
import os
import sys
import types

import numpy as np
import torch
from omegaconf import OmegaConf

from span_plugin.convert.safe_load import (DamagedCheckpointError, allow_checkpoint_types,
                                           check_structure, load_error)
from span_plugin.files.atomic import atomic_link, atomic_write
from span_plugin.runtime import (checkpoints, distributed, rank_agreement, training_guard,
                                 update_reads)
from span_plugin.runtime.patching import replace as _replace

logger = logging.getLogger(__name__)


def allow_fairseq_checkpoints():
    """Let fairseq read its checkpoints with the allow-list, and nothing else.

    torch >= 2.6 loads with ``weights_only=True`` by default and refuses fairseq's
    ``argparse.Namespace``: exactly the classes of
    :data:`span_plugin.convert.safe_load.CHECKPOINT_SAFE_GLOBALS` join its allow-list.
    Every file fairseq loads (``--restore-file``, ``--finetune-from-model``, a resumed
    ``checkpoint_last.pt``, ``load_model_ensemble_and_task``, the hub) is first read by
    the package's safe loader, whatever torch's default (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``):
    tensors memory-mapped, so it costs little. A file that is not a checkpoint, is
    damaged (cut short, a zip CRC that does not match, entries fairseq cannot use:
    :func:`span_plugin.convert.safe_load.check_structure`) or holds an object outside the allow-list stops there, with its error
    naming the file, before fairseq's own ``torch.load`` reads it.
    """
    allow_checkpoint_types()

    from fairseq import checkpoint_utils

    def wrap(load):
        def load_checkpoint_to_cpu(path, *args, **kwargs):
            if not _is_local(path):  # other storage: fairseq fetches it, torch's default loads it
                return load(path, *args, **kwargs)
            # raises the file's error; then the entries fairseq reads must be there
            check_structure(path, checkpoints.load_mapped(path))
            try:
                return load(path, *args, **kwargs)
            except Exception as err:  # noqa: BLE001 - a file error gets its clear message
                sorted_err = load_error(path, err)
                if sorted_err is None:
                    raise
                if isinstance(sorted_err, DamagedCheckpointError):
                    sorted_err = checkpoints.damaged_error(path, sorted_err.detail)
                raise sorted_err from err

        return load_checkpoint_to_cpu

    _replace(checkpoint_utils, "load_checkpoint_to_cpu", wrap)


def _is_local(path):
    return "://" not in str(path)


def atomic_checkpoints():
    """Write every checkpoint file atomically (span_plugin.runtime.checkpoints).

    fairseq renames its first file into place but copies it to the other names
    (checkpoint_last.pt, ...) in place, so a kill during the copy leaves a cut-off
    checkpoint. Both paths go through ``atomic_write`` here, for local files; other
    storage (PathManager URLs) and asynchronous writes are left to fairseq.
    """
    from fairseq import checkpoint_utils

    def wrap_save(save):
        def torch_persistent_save(obj, filename, async_write=False):
            if async_write or not _is_local(filename):
                return save(obj, filename, async_write)
            atomic_write(
                filename, lambda f: checkpoint_utils._torch_persistent_save(obj, f))

        return torch_persistent_save

    _replace(checkpoint_utils, "torch_persistent_save", wrap_save)

    inner = checkpoint_utils.PathManager
    if getattr(inner, "_span_plugin_wrapped", False):
        return

    class AtomicCopyPathManager:
        """fairseq's PathManager, with ``copy`` of local files made atomic (and a hard
        link where possible: the copies of a save hold the same bytes)."""

        _span_plugin_wrapped = True

        def __getattr__(self, name):
            return getattr(inner, name)

        @staticmethod
        def copy(src_path, dst_path, overwrite=False):
            if not (_is_local(src_path) and _is_local(dst_path)):
                return inner.copy(src_path, dst_path, overwrite)
            if os.path.exists(dst_path) and not overwrite:
                return False
            # A hard link: every checkpoint writer here replaces files by rename.
            atomic_link(src_path, dst_path)
            return True

    # Only checkpoint_utils' own name is rebound: save_checkpoint copies through it.
    checkpoint_utils.PathManager = AtomicCopyPathManager()


def explain_missing_best_metric():
    """``--best-checkpoint-metric NAME`` that validation did not report: fairseq raises a
    bare ``KeyError: 'NAME'`` after the first validation; say what was reported and why
    (f1 needs a positive label)."""
    train = sys.modules.get("fairseq_cli.train")
    if train is None:
        return

    def wrap(get_valid_stats):
        def checked_valid_stats(cfg, trainer, stats, tracking_best):
            metric = cfg.checkpoint.best_checkpoint_metric
            if metric not in stats:
                hint = (" f1 needs the positive label: pass --positive-label NAME, or "
                        "prepare the folder with span-preprocess (its record names it)"
                        if metric == "f1" else "")
                raise ValueError(
                    f"--best-checkpoint-metric {metric}: validation reported no {metric!r} "
                    f"(it reported: {', '.join(sorted(k for k in stats if k not in ('num_updates',)))})."
                    + hint)
            return get_valid_stats(cfg, trainer, stats, tracking_best)

        return checked_valid_stats

    _replace(train, "get_valid_stats", wrap)


def _hydra_original_cwd():
    """The directory ``fairseq-hydra-train`` was started in, or None outside hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return HydraConfig.get().runtime.cwd
    except ImportError:  # pragma: no cover - hydra is a fairseq dependency
        return None
    # Workers started by fairseq's own spawn inherit hydra's run directory but not
    # its singleton; hydra leaves the original directory in .hydra/hydra.yaml there.
    saved = os.path.join(".hydra", "hydra.yaml")
    if os.path.isfile(saved):
        from omegaconf import OmegaConf

        return OmegaConf.select(OmegaConf.load(saved), "hydra.runtime.cwd")
    return None


def restore_hydra_cwd():
    """Undo hydra's change of directory so relative paths mean what they mean in
    ``fairseq-train``: data, ``--restore-file``, ``save_dir`` and tensorboard paths
    are all taken from the directory the command was started in. Hydra's own
    ``.hydra`` logs stay in its run directory."""
    original = _hydra_original_cwd()
    if original and os.path.abspath(original) != os.path.abspath(os.getcwd()):
        logger.info("fairseq-hydra-train changed directory; returning to %s", original)
        os.chdir(original)


def allow_cpu_pytorch_ddp():
    """Let ``--ddp-backend pytorch_ddp`` (fairseq's default) wrap a CPU model.

    fairseq always passes ``device_ids=[device_id]`` to torch's DDP, which torch
    rejects for CPU modules, so multi-process CPU (gloo) runs failed unless they
    chose ``legacy_ddp``. For CPU devices the wrapper is built as fairseq builds it,
    without device ids; every other case goes to fairseq unchanged.
    """
    from fairseq import models
    from fairseq.distributed import DistributedTimeoutWrapper, ModuleProxyWrapper
    from torch.nn.parallel import DistributedDataParallel

    def wrap(build):
        def DistributedFairseqModel(args, model, process_group, device):
            if torch.device(device).type != "cpu" or args.ddp_backend not in {"c10d", "pytorch_ddp"}:
                return build(args, model, process_group, device)
            wrapped = ModuleProxyWrapper(
                DistributedDataParallel(
                    module=model.to(device),
                    broadcast_buffers=args.broadcast_buffers,
                    bucket_cap_mb=args.bucket_cap_mb,
                    process_group=process_group,
                    find_unused_parameters=args.find_unused_parameters,
                    gradient_as_bucket_view=args.gradient_as_bucket_view,
                )
            )
            if getattr(args, "heartbeat_timeout", -1) > 0:
                wrapped = DistributedTimeoutWrapper(wrapped, timeout=args.heartbeat_timeout)
            return wrapped

        return DistributedFairseqModel

    _replace(models, "DistributedFairseqModel", wrap)


def keep_last_batch():
    """Stop fairseq from dropping the last batch of every epoch.

    ``data_utils.batch_by_size`` drops the final batch when its size is not a multiple
    of ``--required-batch-size-multiple`` (8 by default; fairseq issue 5036), so
    validation and test metrics silently skip up to 7 examples. Batches are
    consecutive runs of ``indices``, so whatever follows the last one is that dropped
    batch: it is put back.
    """
    from fairseq.data import data_utils

    def wrap(batch_by_size):
        def batch_by_size_keeping_tail(
            indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None,
            max_sentences=None, required_batch_size_multiple=1, fixed_shapes=None,
        ):
            batches = batch_by_size(
                indices, num_tokens_fn, num_tokens_vec, max_tokens, max_sentences,
                required_batch_size_multiple, fixed_shapes,
            )
            covered = sum(len(b) for b in batches)
            if fixed_shapes is None and covered < len(indices):
                batches.append(np.asarray(indices[covered:], dtype=np.int64))
            return batches

        return batch_by_size_keeping_tail

    _replace(data_utils, "batch_by_size", wrap)


def nan_detector_on_leaves():
    """Let fairseq's ``NanDetector`` report a non-finite gradient instead of failing.

    When a gradient is inf or NaN, fairseq's trainer re-runs the batch under
    ``NanDetector`` to name the first module where it appears, then raises
    ``FloatingPointError``. The detector puts a (non-full) backward hook on every module;
    torch 2 looks for a tensor in each module's output to hook, and the Transformer
    encoder returns a dict of lists: ``StopIteration`` from torch's internals replaced the
    report. Backward hooks go on leaf modules only here (their outputs are tensors, and
    the first non-finite gradient is found at the finest grain); forward hooks on all.
    """
    from fairseq.nan_detector import NanDetector

    def wrap(add_hooks):
        def add_hooks_on_leaves(self, module):
            backward = self.backward
            self.backward = backward and next(module.children(), None) is None
            try:
                add_hooks(self, module)
            finally:
                self.backward = backward

        return add_hooks_on_leaves

    _replace(NanDetector, "add_hooks", wrap)


# Notices that fairseq 0.12 on hydra 1.3 and torch 2.x prints on every command; none is
# about the user's run. Matched by their exact text, so any other warning still shows.
STACK_NOTICES = [
    (UserWarning, r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental"),
    (UserWarning, r"\s*The version_base parameter is not specified"),
    (UserWarning, r"In 'config': Usage of deprecated keyword in package header"),
    (UserWarning, r"\s*'config' is validated against ConfigStore schema"),
    (UserWarning, r"\s*The strict flag in the compose API is deprecated"),
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found"),
    (FutureWarning, r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated"),
]


def quiet_stack_notices():
    """Keep the stack's own notices out of every command's output.

    - the warnings above;
    - fairseq's wav2vec2 module calls ``logging.basicConfig(level=DEBUG)`` when fairseq
      is imported, so commands that configure logging after that import
      (fairseq-validate) print hydra's DEBUG lines: the root level goes back to
      ``$LOGLEVEL`` (INFO, fairseq's default) unless DEBUG was asked for.

    The tensorboardX notice of fairseq's speech tasks is gone by installing
    tensorboardX (requirements.txt): it is printed before any plugin can act.
    """
    import warnings

    for category, message in STACK_NOTICES:
        warnings.filterwarnings("ignore", message=message, category=category)
    wanted = os.environ.get("LOGLEVEL", "INFO").upper()
    root = logging.getLogger()
    if root.level == logging.DEBUG and wanted != "DEBUG":
        root.setLevel(getattr(logging, wanted, logging.INFO))


def bf16_without_xla():
    """Let ``fairseq-train --bf16`` (and ``--memory-efficient-bf16``) train on a GPU or
    the CPU: :func:`bf16_off_tpu` runs first in fairseq's ``call_main``, before any of
    fairseq reads the flag (``fairseq-hydra-train`` never sets it). The same wrapper has
    every process of a distributed run compare its data, code and arguments with the
    others before fairseq's ``main`` (:mod:`span_plugin.runtime.rank_agreement`)."""
    from fairseq.distributed import utils as distributed_utils

    def wrap(call_main):
        def wrapped(cfg, main, **kwargs):
            bf16_off_tpu(cfg)
            return call_main(cfg, rank_agreement.AgreeFirst.around(main), **kwargs)

        return wrapped

    _replace(distributed_utils, "call_main", wrap)


def bf16_off_tpu(cfg):
    """fairseq 0.12's argument parser turns ``--tpu`` on with ``--bf16`` (bf16 was a TPU
    feature then), so the Trainer asks torch_xla for its device and fails without it.
    Where torch_xla is not installed no TPU run can start anyway: turn the flag off in
    every section of ``cfg`` that copied it (common, distributed_training, optimizer,
    the model's namespace). The run is then fairseq's bf16 path on the device ``--cpu``
    or CUDA gives: model and batches in bfloat16, ``FP16Optimizer`` without a loss
    scaler. Returns whether it changed ``cfg``."""
    common = cfg.common
    if not (common.bf16 and common.tpu) or importlib.util.find_spec("torch_xla") is not None:
        return False
    for key in cfg:
        section = cfg[key]
        if (OmegaConf.is_config(section) and "tpu" in section) or isinstance(section, argparse.Namespace):
            section.tpu = False
    logger.info("--bf16 without torch_xla: bfloat16 on %s, not a TPU",
                "the CPU" if common.cpu or not torch.cuda.is_available() else "CUDA")
    return True


def numpy_compat_long():
    """fairseq 0.12 reads ``np.compat.long`` where it cuts blocks at sentence ends
    (TokenBlockDataset, ``--sample-break-mode eos``) and in LanguagePairDataset; numpy 2
    removed ``numpy.compat``. Give back that one name, with numpy 1's value (``int``)."""
    if not hasattr(np, "compat"):
        np.compat = types.SimpleNamespace(long=int)


def apply():
    quiet_stack_notices()
    numpy_compat_long()
    allow_fairseq_checkpoints()
    atomic_checkpoints()
    explain_missing_best_metric()
    restore_hydra_cwd()
    allow_cpu_pytorch_ddp()
    keep_last_batch()
    bf16_without_xla()
    update_reads.install()
    nan_detector_on_leaves()
    training_guard.guard_training()  # one run per --save-dir; a resumed run checks its data
    distributed.resume_as_rank_zero()  # every rank resumes what rank 0 has (no shared disk)
