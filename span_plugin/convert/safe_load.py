"""Reading torch files from users without running code from them.

A torch file is a pickle, and unpickling calls whatever a planted object's ``__reduce__``
names. Every reader of checkpoints in the package goes through :func:`load_torch_file`:
torch's weights-only unpickler, with exactly the plain-data types fairseq checkpoints hold
added to its allow-list (:data:`CHECKPOINT_SAFE_GLOBALS`). fairseq's own loader runs
through it too (:mod:`span_plugin.runtime.compat`). A file that does not load gets one
of three errors, each naming the file:

- :class:`NotACheckpointError`: a folder, an empty file, text, random bytes, a zip
  archive without a pickle, a torch file of something else than a checkpoint;
- :class:`DamagedCheckpointError`: a torch file cut short or corrupt (a truncated zip, a
  zip entry whose CRC-32 does not match its bytes: torch checks none), or a checkpoint
  whose entries are not what fairseq reads (:func:`check_structure`);
- :class:`UnsafeCheckpointError`: a torch file holding an object outside the allow-list
  (the refused global is named).
"""

import _compat_pickle
import argparse
import errno
import io
import pickle
import pickletools
import re
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from span_plugin.formats.lines import file_kind

# What fairseq checkpoints hold besides tensors and builtin containers:
# the legacy ``args`` namespace, and numpy scalars that metrics may leave in
# ``extra_state``. All are plain data; nothing here can run code when unpickled.
# numpy's scalar reconstructor is allowed under both of its names, numpy 1's
# numpy.core.multiarray.scalar and numpy 2's numpy._core.multiarray.scalar, so a
# checkpoint loads whichever numpy wrote it (taken from a scalar's own pickle recipe:
# numpy 2 deprecates numpy.core).
_NUMPY_SCALAR = np.float64(0).__reduce__()[0]
CHECKPOINT_SAFE_GLOBALS = [
    argparse.Namespace,
    np.dtype,
    *[(_NUMPY_SCALAR, f"{module}.multiarray.scalar") for module in ("numpy.core", "numpy._core")],
    *{type(np.dtype(t)) for t in ("float64", "float32", "float16", "int64", "int32", "bool")},
]

ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since torch 1.6
# torch.save's legacy format opens with a pickled magic number (protocol 2, a LONG1).
LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."
EXPECTED = "expected a file written by torch.save (a fairseq checkpoint_*.pt, a span-convert model.pt, a pytorch_model.bin)"

# WeightsUnpickler errors that mean "an object the allow-list refuses", as opposed to
# bytes it cannot parse (torch/_weights_only_unpickler.py).
REFUSALS = ("GLOBAL", "Can only create new object", "Trying to call reduce", "Can only build")


def allow_checkpoint_types():
    """Let ``torch.load(weights_only=True)`` read fairseq checkpoints: exactly the types
    above join torch's allow-list; a checkpoint holding anything else is still refused."""
    torch.serialization.add_safe_globals(CHECKPOINT_SAFE_GLOBALS)


class CheckpointFileError(ValueError):
    """A file given as a checkpoint that cannot be loaded; the message names the file."""

    def __init__(self, path, message):
        super().__init__(message)
        self.path = str(path)


class NotACheckpointError(CheckpointFileError):
    """Not a torch file (or not a checkpoint) at all."""


class DamagedCheckpointError(CheckpointFileError, RuntimeError):
    """A torch file cut short or corrupt. ``detail`` says what the reader found."""

    def __init__(self, path, detail, message=None):
        self.detail = detail
        super().__init__(path, message or (
            f"checkpoint {path} is damaged ({detail}): it was cut short or corrupted, e.g. "
            f"by a copy or download that stopped, or a full disk. Get the file again"))


class UnsafeCheckpointError(CheckpointFileError):
    """A torch file holding an object outside the allow-list. ``refused`` names it."""

    def __init__(self, path, refused):
        self.refused = refused
        super().__init__(path, (
            f"refusing to load checkpoint {path}: it holds an object outside the allow-list "
            f"of checkpoint types ({refused}), and unpickling it could run code planted in "
            f"the file. Checkpoints written by fairseq, span_plugin and span-convert hold "
            f"only tensors, numbers, strings, containers and argparse.Namespace: this file "
            f"was made otherwise. Load it only if you know where it came from (with "
            f"torch.serialization.add_safe_globals for the global named)"))


def _first_line(err):
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:160]}" if text else type(err).__name__


def check_file(path):
    """Raise the error of a file that cannot be a torch file, before torch reads it:
    a missing file (FileNotFoundError), a folder, an empty or short file, a file that
    starts like neither torch format (NotACheckpointError), a zip archive whose end is
    missing (DamagedCheckpointError), a whole zip archive without a pickle
    (NotACheckpointError). Returns ``"zip"`` or ``"legacy"``."""
    path = Path(path)
    if path.is_dir():
        raise NotACheckpointError(path, f"{path} is not a checkpoint: it is a folder; {EXPECTED}")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    kind = file_kind(path.stat().st_mode)  # a FIFO would block the read, a device never end
    if kind:
        raise NotACheckpointError(path, f"{path} is not a checkpoint: it is {kind}; {EXPECTED}")
    with open(path, "rb") as f:
        head = f.read(len(LEGACY_MAGIC))
    if head.startswith(ZIP_MAGIC):
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError) as err:  # the central directory at its end is gone
            raise DamagedCheckpointError(path, "the end of its zip archive is missing") from err
        if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            raise NotACheckpointError(path, f"{path} is not a checkpoint: it is a zip archive "
                                      f"without torch's data.pkl; {EXPECTED}")
        bad = _bad_member(path)
        if bad:
            raise DamagedCheckpointError(path, bad)
        return "zip"
    if head == LEGACY_MAGIC:
        return "legacy"
    if not head:
        why = "it is empty"
    elif LEGACY_MAGIC.startswith(head) or ZIP_MAGIC.startswith(head):
        raise DamagedCheckpointError(path, f"only its first {len(head)} bytes are there")
    elif _looks_like_text(path):
        why = "it is text"
    else:
        why = f"it starts with bytes {head[:8].hex(' ')}, which no torch file starts with"
    raise NotACheckpointError(path, f"{path} is not a checkpoint: {why}; {EXPECTED}")


def _bad_member(path):
    """What is wrong with the bytes of a zip's entries (their CRC-32 sums, which torch
    never checks: a flipped byte in a tensor's data would load as another weight), or
    None. Reads the file once (its time: docs/RELIABILITY.md, section "Fuzz harness")."""
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError) as err:
        return f"its zip archive does not read: {_first_line(err)}"
    except OSError as err:
        if err.errno not in (None, errno.EINVAL):
            raise  # permissions, I/O: the OSError names the file
        return f"its zip archive does not read: {_first_line(err)}"
    return f"the CRC-32 of its zip entry {bad} does not match its bytes" if bad else None


def _looks_like_text(path):
    with open(path, "rb") as f:
        sample = f.read(4096)
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(sample) - 4:  # not a character cut by the sample's end
            return False
    return b"\x00" not in sample


def load_error(path, err):
    """The :class:`CheckpointFileError` that an exception raised by ``torch.load(path)``
    stands for, or None when it is not one of the file's (a missing or unreadable file,
    an error after loading)."""
    if isinstance(err, CheckpointFileError):
        return err
    text = str(err)
    if isinstance(err, pickle.UnpicklingError) and "WeightsUnpickler error" in text:
        why = re.search(r"WeightsUnpickler error: (.*)", text).group(1).strip()
        if any(s in why for s in REFUSALS):
            named = re.search(r"GLOBAL (\S+)", why)
            return UnsafeCheckpointError(path, f"Unsupported global: GLOBAL {named.group(1)}"
                                         if named else why[:200])
        return DamagedCheckpointError(path, f"its pickle does not parse: {why[:160]}")
    if isinstance(err, (EOFError, pickle.UnpicklingError, zipfile.BadZipFile)):
        return DamagedCheckpointError(path, _first_line(err))
    if isinstance(err, OSError) and err.errno == errno.EINVAL:
        return DamagedCheckpointError(path, _first_line(err))  # shorter than its header says
    if isinstance(err, RuntimeError) and any(
            s in text for s in ("PytorchStreamReader", "zip archive", "unexpected EOF",
                                "Invalid magic number", "storage")):
        return DamagedCheckpointError(path, _first_line(err))
    return None


def _python3_name(module, name):
    """``module.name`` as Python 3 (and torch's reader) resolves a protocol-2 pickle's
    names (``__builtin__.set`` is ``builtins.set``)."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    return f"{_compat_pickle.IMPORT_MAPPING.get(module, module)}.{name}"


def _globals_of(stream):
    """The globals one pickle in ``stream`` names (``module.name``), read from its
    opcodes without building anything: GLOBAL and INST name theirs; STACK_GLOBAL takes
    the two strings pushed before it (or memoized and fetched), else it is computed."""
    memo, pushed = {}, []
    for op, arg, _ in pickletools.genops(stream):
        if op.name in ("GLOBAL", "INST"):
            yield _python3_name(*arg.split(" ", 1))
        elif op.name == "STACK_GLOBAL":
            names = pushed[-2:]
            yield (".".join(names) if len(names) == 2 and all(isinstance(n, str) for n in names)
                   else "a global computed while unpickling")
        if op.name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[len(memo) if arg is None else arg] = pushed[-1] if pushed else None
        elif op.name in ("GET", "BINGET", "LONG_BINGET"):
            pushed.append(memo.get(arg))
        elif op.name != "FRAME":
            pushed.append(arg if isinstance(arg, str) else None)
        if op.name == "STOP":
            return


def refused_global(path, kind):
    """The first global of the file's pickles outside the allow-list (torch's tensor
    types and :data:`CHECKPOINT_SAFE_GLOBALS`), or None. Whatever the global (``eval``,
    ``os.system``, a module torch blocks, a class of the user's), it is unsafe, in both
    formats. Pickles that do not parse are left to torch's reader (damaged)."""
    from torch import _weights_only_unpickler as weights_only

    allowed = set(weights_only._get_allowed_globals()) | set(weights_only._get_user_allowed_globals())
    try:
        if kind == "zip":
            with zipfile.ZipFile(path) as z:
                name = next(n for n in z.namelist() if n == "data.pkl" or n.endswith("/data.pkl"))
                names = list(_globals_of(io.BytesIO(z.read(name))))
        else:  # five pickles: magic number, protocol, system info, the object, storage keys
            with open(path, "rb") as f:
                names = [n for _ in range(5) for n in _globals_of(f)]
        return next((n for n in names if n not in allowed), None)
    except (ValueError, EOFError, KeyError, IndexError, zipfile.BadZipFile, zlib.error,
            UnicodeDecodeError, StopIteration):
        return None


def load_torch_file(path, mmap=False):
    """``torch.load(path)`` on the CPU with ``weights_only=True`` and fairseq's checkpoint
    types allowed, never anything more. ``mmap``: tensors are memory-mapped, not read
    (files of the legacy format are read whole). Raises :class:`CheckpointFileError`
    (one of the three kinds) or an OSError (a missing or unreadable file), each naming
    the file."""
    kind = check_file(path)
    allow_checkpoint_types()
    refused = refused_global(path, kind)
    if refused:
        raise UnsafeCheckpointError(path, f"Unsupported global: GLOBAL {refused}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True,
                          mmap=mmap and kind == "zip")
    except Exception as err:  # noqa: BLE001 - sorted into the three kinds
        if isinstance(err, OSError) and err.errno != errno.EINVAL:
            raise  # permissions, I/O: the OSError names the file
        # A file that starts as a torch file and does not load is damaged, whatever
        # torch's reader raised on its bytes.
        raise (load_error(path, err) or DamagedCheckpointError(path, _first_line(err))) from err


def _kind(value):
    return "None" if value is None else f"a {type(value).__name__}"


def structure_problem(state):
    """What keeps fairseq from using a loaded checkpoint dict (its ``_upgrade_state_dict``,
    ``load_model_ensemble_and_task``, the hub, a resumed Trainer), or None: ``model`` a
    dict of tensors; ``cfg`` a mapping with ``model`` and ``task`` entries, or else the
    legacy ``args`` namespace; ``optimizer_history`` a non-empty list of dicts (absent
    only in the oldest format, with ``best_loss`` and ``optimizer``); ``extra_state`` a
    dict (absent only with the oldest format's ``epoch``); ``task_state`` and
    ``last_optimizer_state`` dicts, None or absent."""
    model = state.get("model")
    if not isinstance(model, Mapping):
        return f"its 'model' is {_kind(model)}, not a dict of tensors"
    odd = next((k for k, v in model.items()
                if not isinstance(k, str) or not isinstance(v, torch.Tensor)), None)
    if odd is not None:
        return f"its 'model' entry {odd!r} is {_kind(model[odd])}, not a tensor"
    cfg, args = state.get("cfg"), state.get("args")
    if cfg is not None:
        if not isinstance(cfg, Mapping):
            return f"its 'cfg' is {_kind(cfg)}, not a mapping"
        for key in ("model", "task"):
            if not isinstance(cfg.get(key), (Mapping, argparse.Namespace)):
                return f"its cfg[{key!r}] is {_kind(cfg.get(key))}, not a mapping"
    if args is not None and not isinstance(args, argparse.Namespace):
        return f"its 'args' is {_kind(args)}, not an argparse.Namespace"
    if cfg is None and args is None:
        return "it has neither 'cfg' nor 'args': nothing says which model and task it is"
    if "optimizer_history" in state or not {"best_loss", "optimizer"} <= set(state):
        history = state.get("optimizer_history")
        if not isinstance(history, list) or not history:
            return ("it has no 'optimizer_history'" if "optimizer_history" not in state else
                    f"its 'optimizer_history' is {_kind(history) if history != [] else 'empty'}, "
                    f"not a non-empty list of dicts")
        odd = next((h for h in history if not isinstance(h, Mapping)), None)
        if odd is not None:
            return f"its 'optimizer_history' holds {_kind(odd)}, not only dicts"
    if "extra_state" in state or "epoch" not in state:
        if not isinstance(state.get("extra_state"), Mapping):
            return ("it has no 'extra_state'" if "extra_state" not in state
                    else f"its 'extra_state' is {_kind(state['extra_state'])}, not a dict")
    for key in ("task_state", "last_optimizer_state"):
        if state.get(key) is not None and not isinstance(state[key], Mapping):
            return f"its {key!r} is {_kind(state[key])}, not a dict"
    return None


def check_structure(path, state):
    """Raise :class:`DamagedCheckpointError` naming ``path`` and what is wrong when
    fairseq cannot use the loaded checkpoint dict ``state`` (:func:`structure_problem`),
    before fairseq fails on it with a bare KeyError or AttributeError."""
    problem = structure_problem(state)
    if problem:
        raise DamagedCheckpointError(path, problem, (
            f"checkpoint {path} is damaged ({problem}): fairseq cannot use it. It was "
            f"changed after fairseq saved it, or written by another program; use another "
            f"checkpoint"))


def load_checkpoint(path, mmap=False):
    """A fairseq checkpoint file (a dict with a ``model`` entry), loaded by
    :func:`load_torch_file`; a torch file of anything else is :class:`NotACheckpointError`."""
    state = load_torch_file(path, mmap=mmap)
    if not isinstance(state, Mapping) or "model" not in state:
        what = (f"a dict with the entries {', '.join(map(str, list(state)[:6]))}"
                if isinstance(state, Mapping) else f"a {type(state).__name__}")
        raise NotACheckpointError(path, f"{path} is not a fairseq checkpoint: it is a torch "
                                  f"file holding {what}, without the 'model' entry of a "
                                  f"checkpoint")
    return state
