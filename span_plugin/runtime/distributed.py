"""Several processes resume as one: rank 0's checkpoint decides for every rank.

fairseq writes checkpoints on rank 0 only, but each rank looks for
``checkpoint_last.pt`` in its own ``--save-dir`` to choose what to load: on nodes
without a shared disk, the other ranks would start from the pretrained model (reset
optimizer, scheduler and data position) while rank 0 resumes, and their collectives
would no longer pair up. Here rank 0's answer (does it have the file?) is sent to every
rank before fairseq chooses, and the checkpoint's content is broadcast by fairseq as it
already does (``Trainer.load_checkpoint``). A single process is left alone.

That broadcast pickles the checkpoint as fairseq loaded it, its ``cfg`` an omegaconf
``DictConfig``, which torch >= 2.6 refuses to unpickle by default: the other ranks read it
with omegaconf's container classes allowed too (rank 0 read the file itself through the
allow-list, :func:`span_plugin.runtime.compat.allow_fairseq_checkpoints`).
"""

import contextlib
import os

from span_plugin.runtime.patching import replace


@contextlib.contextmanager
def _seen_as(path, exists):
    """fairseq's PathManager.exists and isfile answer ``exists`` for ``path``."""
    from fairseq.file_io import PathManager

    saved = {name: PathManager.__dict__[name] for name in ("exists", "isfile")}
    real = os.path.abspath(path)

    def answer(original):
        return staticmethod(lambda p: exists if os.path.abspath(p) == real else original(p))

    for name in saved:
        setattr(PathManager, name, answer(getattr(PathManager, name)))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(PathManager, name, method)


def _omegaconf_types():
    import collections
    import typing

    from omegaconf import AnyNode, DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata

    return [DictConfig, ListConfig, AnyNode, ContainerMetadata, Metadata, typing.Any,
            collections.defaultdict, dict, list, int]


def resume_as_rank_zero():
    """Install the wrappers of ``checkpoint_utils.load_checkpoint`` and of fairseq's
    object broadcast (by :func:`span_plugin.runtime.compat.apply`)."""
    import torch
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    def wrap_broadcast(broadcast):
        def _broadcast_object_slow(*args, **kwargs):
            # the tensors travel apart, each replaced by fairseq's placeholder
            with torch.serialization.safe_globals(
                    [*_omegaconf_types(), distributed_utils._TensorPlaceholder]):
                return broadcast(*args, **kwargs)

        return _broadcast_object_slow

    def wrap(load):
        def load_checkpoint(cfg, trainer, **passthrough):
            if trainer.data_parallel_world_size <= 1 or cfg.restore_file != "checkpoint_last.pt":
                return load(cfg, trainer, **passthrough)
            last = os.path.join(cfg.save_dir, f"checkpoint_last{trainer.checkpoint_suffix}.pt")
            here = os.path.isfile(last)
            there = distributed_utils.broadcast_object(
                here, src_rank=0, group=trainer.data_parallel_process_group,
                dist_device=trainer.device)
            if here == there:
                return load(cfg, trainer, **passthrough)
            with _seen_as(last, there):
                return load(cfg, trainer, **passthrough)

        return load_checkpoint

    replace(checkpoint_utils, "load_checkpoint", wrap)
    replace(distributed_utils, "_broadcast_object_slow", wrap_broadcast)
