"""What a command writes: never one of its own inputs, and one writer at a time.

Every command that writes a folder or a file (``span-preprocess`` builders,
``span-convert``, ``span-predict``, fairseq-train's ``--save-dir`` through the plugin,
the recipes' ``OUT_DIR`` and data folders) enters :func:`writing` before it writes:

- an output that is one of its inputs, or a folder that holds one, is refused
  (:class:`OutputError`, a :class:`BadInputError`), since replacing the output would
  destroy the input;
- each output is locked (``fcntl.flock`` on ``OUTPUT.lock`` beside it). A second
  writer gets :class:`OutputBusyError` naming the holder's PID and command, which the
  holder writes into the lock file for that message only: the lock itself is the
  kernel's and goes with the process that held it, so a lock of a killed process is
  simply taken. The file is removed when its holder is done.

Locks are re-entrant within a process (a command that locks ``--out`` calls a builder
that locks it again). ``python -m span_plugin.formats.outputs`` does both for a shell
script, the lock on a descriptor the script opened, so that it lasts as long as the
script.
"""

import argparse
import atexit
import contextlib
import fcntl
import os
import shlex
import sys
import time

from span_plugin.formats.lines import BadInputError

LOCK_SUFFIX = ".lock"


class OutputError(BadInputError):
    """An output that is, or holds, one of the command's inputs."""


class OutputBusyError(BadInputError):
    """An output another process is writing."""


def lock_path(path):
    """The lock file of an output: ``OUTPUT.lock`` in the same folder."""
    return os.path.normpath(os.path.abspath(os.fspath(path))) + LOCK_SUFFIX


def _real(path):
    return os.path.normcase(os.path.realpath(os.fspath(path)))


def _within(inner, outer):
    """Whether the real path ``inner`` is ``outer`` or lies inside it."""
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def _named(paths):
    """``{flag: path or [paths]}`` -> ``[(flag, path)]``, empty values left out."""
    out = []
    for flag, value in (paths or {}).items():
        for path in ([value] if isinstance(value, (str, os.PathLike)) else value or ()):
            if path:
                out.append((flag, os.fspath(path)))
    return out


def refuse_inputs(outputs, inputs):
    """Raise :class:`OutputError` when an output of ``outputs`` is one of ``inputs``
    or a folder holding one (both ``{flag: path or [paths]}``; symbolic links are
    followed, so a link to an input is that input)."""
    for out_flag, out in _named(outputs):
        real_out = _real(out)
        for in_flag, given in _named(inputs):
            real_in = _real(given)
            if not _within(real_in, real_out):
                continue
            how = "is" if real_in == real_out else "holds"
            raise OutputError(
                f"{out_flag} {out} {how} the input {in_flag} {given}: writing {out} could "
                f"destroy it. Give {out_flag} a path that is neither an input nor a folder "
                f"holding one")


def _holder(fd):
    """The PID and command a lock's holder wrote, as a phrase."""
    text = ""
    for _ in range(20):  # the holder writes them just after it takes the lock
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 4096).decode("utf-8", "replace").strip()
        if text:
            break
        time.sleep(0.05)
    pid, _, command = text.partition(" ")
    if not pid.isdigit():
        return "another process (it has not written its PID yet)"
    return f"process {pid} ({command})" if command else f"process {pid}"


def _take(fd, path, lock, pid, command):
    """flock ``fd`` (opened on ``lock``) for ``path``, and write ``pid command`` into
    it. Returns False when the lock file was removed or replaced meanwhile (its holder
    let it go): open it again."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise OutputBusyError(
            f"{path} is being written by {_holder(fd)}, which holds {lock}: two writers "
            f"would mix their files. Wait for it to finish, or give another output") from None
    try:
        if os.stat(lock).st_ino != os.fstat(fd).st_ino:
            return False
    except FileNotFoundError:
        return False
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, f"{pid} {command}\n".encode("utf-8", "replace"))
    return True


def _command():
    words = [os.path.basename(sys.argv[0] or "python")] + sys.argv[1:]
    return " ".join(shlex.quote(word) for word in words)


_HELD = {}  # lock file -> [fd, depth]: this process's locks


def _acquire(path, command):
    """Take (or enter again) the lock of ``path``; returns its lock file."""
    lock = lock_path(path)
    if lock in _HELD:
        _HELD[lock][1] += 1
        return lock
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if _take(fd, path, lock, os.getpid(), command or _command()):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    _HELD[lock] = [fd, 1]
    return lock


def _release(lock):
    _HELD[lock][1] -= 1
    if not _HELD[lock][1]:
        fd = _HELD.pop(lock)[0]
        with contextlib.suppress(FileNotFoundError):
            os.remove(lock)  # before unlocking: a waiter then opens a new file
        os.close(fd)


@contextlib.contextmanager
def locked(path, command=None):
    """Hold the lock of the output ``path`` (a file or a folder, which need not exist)
    for the block; :class:`OutputBusyError` when another process holds it."""
    lock = _acquire(path, command)
    try:
        yield
    finally:
        _release(lock)


def hold(path, command=None):
    """Lock the output ``path`` until this process ends (fairseq-train's --save-dir)."""
    atexit.register(_release, _acquire(path, command))


@contextlib.contextmanager
def writing(outputs, inputs=None, command=None):
    """The one way into an output: refuse an output that is or holds an input, then
    lock every output for the block. ``outputs`` and ``inputs``: ``{flag: path or
    [paths]}``, the flags naming them in messages."""
    refuse_inputs(outputs, inputs)
    with contextlib.ExitStack() as stack:
        for _, out in _named(outputs):
            stack.enter_context(locked(out, command))
        yield


def _for_shell(argv=None):
    """For the recipes (recipes/lib.sh ``hold_output``), in two steps, so that nothing
    is created for an output refused:

    - ``refuse OUTPUT --name NAME --input NAME=PATH ...``: exit 2 (one line) when
      OUTPUT is or holds one of the inputs;
    - ``hold OUTPUT --fd N --pid PID --command TEXT``: flock descriptor N, which the
      calling script opened on ``OUTPUT.lock`` (``exec N<>"$OUTPUT.lock"``) and keeps
      until it ends. Exit 0 held; 2 busy (one line naming the holder); 3 the lock file
      was replaced meanwhile (open it again).
    """
    p = argparse.ArgumentParser(prog="python -m span_plugin.formats.outputs")
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("refuse")
    q.add_argument("output")
    q.add_argument("--name", default="OUT_DIR", help="the output's name in messages")
    q.add_argument("--input", nargs="*", default=[], metavar="NAME=PATH")
    q.add_argument("--command", required=True)
    q = sub.add_parser("hold")
    q.add_argument("output")
    q.add_argument("--fd", type=int, required=True)
    q.add_argument("--pid", type=int, required=True)
    q.add_argument("--command", required=True)
    a = p.parse_args(argv)
    try:
        if a.cmd == "refuse":
            inputs = {}
            for item in a.input:
                name, _, path = item.partition("=")
                inputs.setdefault(name, []).append(path)
            refuse_inputs({a.name: a.output}, inputs)
        elif not _take(a.fd, a.output, lock_path(a.output), a.pid, a.command):
            return 3
    except BadInputError as err:
        print(f"{a.command.split(' ')[0]}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_for_shell())
