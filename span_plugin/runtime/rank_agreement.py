"""Every rank trains on the same data with the same code, checked before training: each
rank digests its data folders (by their records), the versions of span_plugin, fairseq
and torch, and the model / task / criterion arguments; the ranks exchange the digests
and any difference ends every rank with one line naming the ranks, the file or value
and both values (exit 2). Installed as :class:`AgreeFirst`. What is digested and how it
is exchanged: docs/DISTRIBUTED.md, section "Module notes"."""

import logging
import os
import socket
from argparse import Namespace

logger = logging.getLogger(__name__)

# Arguments of the model, task and criterion that may differ from node to node.
PER_NODE = {"data", "user_dir", "save_dir", "restore_file", "finetune_from_model",
            "tensorboard_logdir", "log_file", "device_id", "distributed_rank", "local_rank",
            "num_workers", "encoder_json", "wandb_project", "azureml_logging"}
PER_NODE_SUFFIXES = ("_dir", "_path", "_file", "_json")
# Parts of a data record that say nothing about the data: where and by which command it
# was made, by which plugin version, from which paths (as training_guard.NOT_COMPARED).
RECORD_NOT_COMPARED = ("format", "plugin_version", "command", "source", "data_dir", "files")
MAX_SHOWN = 4  # further differences are counted and named, not shown


def node_rank(rank, env=os.environ):
    """This process's node: torchrun's GROUP_RANK, else the global rank over
    LOCAL_WORLD_SIZE, else the global rank."""
    for text in (env.get("GROUP_RANK"),):
        if text and text.isdigit():
            return int(text)
    local = env.get("LOCAL_WORLD_SIZE")
    if local and local.isdigit() and int(local) > 0:
        return rank // int(local)
    return rank


def _plain(value):
    """A config value as JSON-like data (omegaconf, Namespace, tuples, enums)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            try:
                value = OmegaConf.to_container(value, resolve=True)
            except Exception:
                value = OmegaConf.to_container(value, resolve=False)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, Namespace):
        value = vars(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _per_node(key):
    return key in PER_NODE or key.endswith(PER_NODE_SUFFIXES)


def arguments(cfg):
    """``{"model": ..., "task": ..., "criterion": ...}``: the arguments that define them,
    per-node ones left out. A model config given as an argparse Namespace (fairseq's
    legacy architectures) holds every argument: those of the other config groups
    (common, dataset, optimization, ...) are left out of it."""
    groups = {name: _plain(cfg.get(name) if hasattr(cfg, "get") else getattr(cfg, name, None))
              for name in ("model", "task", "criterion")}
    others = set()
    for name in (cfg.keys() if hasattr(cfg, "keys") else ()):
        if name not in groups:
            part = _plain(cfg.get(name))
            if isinstance(part, dict):
                others |= set(part)
    declared = _model_arguments(groups["model"])
    out = {}
    for name, part in groups.items():
        if not isinstance(part, dict):
            out[name] = part
            continue
        skip = others | (set(groups["task"] or {}) | set(groups["criterion"] or {})
                         if name == "model" else set())
        out[name] = {k: v for k, v in sorted(part.items()) if not _per_node(k) and (
            k not in skip or k in ("_name", "arch") or (name == "model" and k in declared))}
    return out


def _model_arguments(model):
    """The argument names the model class of ``model``'s architecture declares (its
    ``add_args``): an argparse model config shares some with other groups."""
    import argparse

    try:
        from fairseq.models import ARCH_MODEL_REGISTRY

        cls = ARCH_MODEL_REGISTRY[model.get("arch") or model.get("_name")]
        parser = argparse.ArgumentParser(add_help=False)
        cls.add_args(parser)
        return {a.dest for a in parser._actions}
    except Exception:  # noqa: BLE001 - no registry entry, a dataclass model: none
        return set()


def folder_digest(folder):
    """``{"record": ..., "files": {relative path: sha256 or "missing"}}`` of a data
    folder (module docstring). A folder whose files all match its record is marked
    verified, so that the task does not hash them again when it loads."""
    from span_plugin.preprocess.file_records import sha256
    from span_plugin.preprocess.records import provenance

    if not os.path.isdir(folder):
        return {"folder": "missing"}
    try:
        record = provenance.read_record(folder)
    except provenance.ProvenanceError as err:
        return {"record": f"unreadable ({err})"}
    listed = list(record["files"]) if record and isinstance(record.get("files"), dict) \
        else provenance.folder_files(folder)
    files = {}
    for rel in listed:
        path = os.path.join(folder, rel)
        files[rel] = sha256(path) if os.path.isfile(path) else "missing"
    if record is None:
        return {"record": None, "files": files}
    if files == record["files"]:
        provenance._VERIFIED.add(os.path.abspath(folder))
    return {"record": {k: provenance.comparable(v) for k, v in record.items()
                       if k not in RECORD_NOT_COMPARED},
            "files": files}


def digest(cfg):
    """What this rank sends: ``{"about": (not compared), "compared": {...}}``."""
    import fairseq
    import torch

    from span_plugin.version import __version__

    data = cfg.task.get("data") if hasattr(cfg.task, "get") else getattr(cfg.task, "data", None)
    folders = [f for f in str(data or "").split(os.pathsep) if f]
    compared = {
        "versions": {"span_plugin": __version__, "fairseq": fairseq.__version__,
                     "torch": torch.__version__},
        "arguments": arguments(cfg),
        "data": {str(k): folder_digest(f) for k, f in enumerate(folders)},
    }
    return {"about": {"folders": [os.path.abspath(f) for f in folders],
                      "host": socket.gethostname()},
            "compared": compared}


def _flat(value, key=""):
    if isinstance(value, dict) and value:
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{key}\x00{k}" if key else str(k)))
        return out
    return {key: value}


def _what(key, about):
    """A flattened key in words: ``file label/train.bin of data folder data-bin/RTE``."""
    parts = key.split("\x00")
    if parts[0] == "data" and len(parts) >= 3:
        index = int(parts[1])
        folder = about["folders"][index] if index < len(about["folders"]) else f"#{index}"
        where = f"data folder {folder}" + (f" ({index + 1} of {len(about['folders'])} in --data)"
                                            if len(about["folders"]) > 1 else "")
        if parts[2] == "files" and len(parts) >= 4:
            return f"file {'/'.join(parts[3:])} of {where}"
        if parts[2] == "record" and len(parts) >= 4:
            return f"{'.'.join(parts[3:])} in the data record of {where}"
        return f"{' '.join(parts[2:])} of {where}"
    if parts[0] == "versions":
        return f"{parts[1]} version"
    if parts[0] == "arguments":
        return f"{parts[1]} argument {'.'.join(parts[2:])}" if len(parts) > 2 else parts[1]
    return ".".join(parts)


def _shown(value):
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return f"sha256 {value[:12]}"
    if value is None:
        return "nothing"
    return "no such file" if value == "missing" else repr(value)


def _who(ranks, nodes, hosts):
    """``node rank 1 (global ranks 2, 3; host h)`` for a set of global ranks."""
    by_node = {}
    for r in sorted(ranks):
        by_node.setdefault(nodes[r], []).append(r)
    out = []
    for node, members in sorted(by_node.items()):
        names = sorted({hosts[r] for r in members})
        out.append(f"node rank {node} (global rank{'s' if len(members) > 1 else ''} "
                   f"{', '.join(map(str, members))}; {', '.join(names)})")
    return " and ".join(out)


def disagreement(digests, nodes):
    """The one line that names what differs between the ranks' ``digests`` (indexed by
    global rank; ``nodes``: each rank's node rank), or None when they agree."""
    flat = [_flat(d["compared"]) for d in digests]
    hosts = [d["about"]["host"] for d in digests]
    keys = sorted(set().union(*flat))
    missing = object()
    differing = []
    for key in keys:
        values = [f.get(key, missing) for f in flat]
        if any(v != values[0] for v in values):
            differing.append((key, values))
    if not differing:
        return None

    def split(values):
        """(the odd ranks, their value, the others' ranks, value): the value most ranks
        hold is the others' (a tie: global rank 0's)."""
        groups = {}
        for r, v in enumerate(values):
            groups.setdefault(repr(v), []).append(r)
        common = max(groups.values(), key=lambda g: (len(g), 0 in g))
        odd = [r for r in range(len(values)) if r not in common]
        return odd, common

    key, values = differing[0]
    odd, common = split(values)
    first_odd = odd[0]
    shown = lambda v: "nothing" if v is missing else _shown(v)  # noqa: E731
    odd_values = sorted({repr(values[r]) for r in odd})
    line = (f"the ranks differ before training: {_what(key, digests[first_odd]['about'])}: "
            f"{_who(odd, nodes, hosts)} "
            + ("has " + shown(values[first_odd]) if len(odd_values) == 1 else
               "have " + ", ".join(shown(values[r]) for r in odd))
            + f", {_who(common, nodes, hosts)} ha{'s' if len(common) == 1 else 've'} "
            f"{shown(values[common[0]])}")
    if len(differing) > 1:
        rest = [_what(k, digests[split(v)[0][0]]["about"]) for k, v in differing[1:MAX_SHOWN]]
        more = len(differing) - 1
        line += (f" (and {more} more difference{'s' if more > 1 else ''}: {'; '.join(rest)}"
                 f"{'; ...' if more >= MAX_SHOWN else ''})")
    return (line + ". Every rank stops: give every node the same data folders, plugin, "
            "fairseq and torch, and the same arguments (a stale copy of the data on one node "
            "is the common case; docs/DISTRIBUTED.md)")


def _exchange_group():
    """The group to exchange over and its timeout: the default one on gloo; beside
    another backend (NCCL) a gloo group with the default group's timeout."""
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "gloo":
        return None, _timeout(None)
    timeout = _timeout(torch.device("cuda") if torch.cuda.is_available() else None)
    return dist.new_group(backend="gloo", timeout=timeout), timeout


def _timeout(device):
    import torch
    from torch.distributed import distributed_c10d as c10d

    try:
        pg = c10d._get_default_group()
        return pg._get_backend(device or torch.device("cpu")).options._timeout
    except Exception:  # another torch: its default
        return None


def agree(cfg):
    """Exchange the digests and stop every rank when they differ (module docstring)."""
    import torch.distributed as dist

    from span_plugin.runtime.training_guard import stop

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    rank = dist.get_rank()
    try:
        mine = digest(cfg)
    except Exception as err:  # noqa: BLE001 - sent to the others, who stop with this rank
        mine = {"about": {"folders": [], "host": socket.gethostname()},
                "compared": {"digest": f"failed on this rank: {type(err).__name__}: {err}"}}
    mine["about"]["node"] = node_rank(rank)
    group, timeout = _exchange_group()
    everyone = [None] * dist.get_world_size()
    try:
        dist.all_gather_object(everyone, mine, group=group)
    except Exception as err:  # noqa: BLE001 - a rank that never came, or died
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        wait = f" within {int(timeout.total_seconds())} s" if timeout is not None else ""
        stop(f"global rank {rank} (node rank {node_rank(rank)}) could not compare its data "
             f"and code with the other ranks{wait}: {reason} (a rank ended or never came; "
             f"its own log names why)")
    finally:
        if group is not None:
            dist.destroy_process_group(group)
    line = disagreement(everyone, [d["about"]["node"] for d in everyone])
    if line:
        stop(line)
    logger.info(f"{len(everyone)} ranks agree on their data, code and arguments")


class AgreeFirst:
    """fairseq's ``main`` run after :func:`agree` (a class, not a closure: fairseq's
    spawned workers receive it pickled)."""

    def __init__(self, main):
        self.main = main

    @classmethod
    def around(cls, main):
        return main if isinstance(main, cls) else cls(main)

    def __call__(self, cfg, **kwargs):
        agree(cfg)
        return self.main(cfg, **kwargs)
