"""What a command writes: never one of its own inputs, nor the current folder, and one
writer at a time. Every writing command enters :func:`writing` before it writes: outputs
are compared with the inputs as the things paths name (:class:`OutputError`) and each is
locked beside its resolved path (:class:`OutputBusyError` names the holder).
``python -m span_plugin.files.outputs`` does both for a shell script. The rules in full:
docs/RELIABILITY.md, section "Module notes"."""

import argparse
import atexit
import contextlib
import fcntl
import os
import shlex
import stat
import sys
import time

from span_plugin.files.errors import BadInputError

LOCK_SUFFIX = ".lock"


class OutputError(BadInputError):
    """An output that is, or holds, one of the command's inputs."""


class OutputBusyError(BadInputError):
    """An output another process is writing."""


def lock_path(path):
    """The lock file of an output: ``OUTPUT.lock`` beside the path the output resolves
    to (links and ``..`` followed), so that every name of one output has one lock."""
    return os.path.realpath(os.path.abspath(os.fspath(path))) + LOCK_SUFFIX


def _real(path):
    return os.path.normcase(os.path.realpath(os.fspath(path)))


def _within(inner, outer):
    """Whether the real path ``inner`` is ``outer`` or lies inside it."""
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def _identity(path):
    """``(st_dev, st_ino)`` of what ``path`` names (links followed), None when nothing."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _ancestors(real):
    """The identities of the existing folders above the real path ``real``."""
    out, parent = set(), os.path.dirname(real)
    while True:
        identity = _identity(parent)
        if identity is not None:
            out.add(identity)
        up = os.path.dirname(parent)
        if up == parent:
            return out
        parent = up


# A folder is searched for hard links of the inputs up to this many entries: an output
# folder is replaced whole only when it holds what its writer made (a data folder, an
# export: tens of files), so a larger one is refused by its writer anyway.
MAX_SCANNED = 100_000


class _Output:
    """An output path as the thing it names: its real path, identity, the identities of
    the folders above it, and (read once, when an input has other names) the hard-linked
    files inside it."""

    def __init__(self, path):
        self.real = _real(path)
        self.identity = _identity(self.real)
        self.above = _ancestors(self.real)
        self._linked = None

    def linked(self):
        """``{(st_dev, st_ino): path}`` of the files under the output folder with more
        than one name (links not followed), at most :data:`MAX_SCANNED` entries read."""
        if self._linked is None:
            self._linked, seen, stack = {}, 0, [self.real]
            while stack and seen < MAX_SCANNED:
                try:
                    entries = list(os.scandir(stack.pop()))
                except OSError:
                    continue
                for entry in entries:
                    seen += 1
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            if st.st_nlink > 1:
                                self._linked.setdefault((st.st_dev, st.st_ino), entry.path)
                    except OSError:
                        continue
        return self._linked


def _relation(out, given):
    """How the output ``out`` (an :class:`_Output`) stands to the input path ``given``:
    ``("is" | "holds" | "inside", how, when not by its path, or None)``, or None."""
    real_in = _real(given)
    try:
        st = os.stat(real_in)
    except (OSError, ValueError):
        st = None
    identity = (st.st_dev, st.st_ino) if st is not None else None
    if real_in == out.real or identity is not None and identity == out.identity:
        return "is", None if real_in == out.real else "the same file under another name"
    if _within(real_in, out.real) or out.identity is not None and out.identity in _ancestors(real_in):
        return "holds", None
    if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink > 1 \
            and out.identity is not None and os.path.isdir(out.real):
        found = out.linked().get(identity)  # a hard link of the input file inside it
        if found is not None:
            return "holds", f"as {found}, a hard link of it"
    if _within(out.real, real_in) or identity is not None and identity in out.above:
        return "inside", None
    return None


def _named(paths, keep_empty=False):
    """``{flag: path or [paths]}`` -> ``[(flag, path)]``, values not given (None) left out,
    and empty ones too unless ``keep_empty`` (an output given as ``''``)."""
    out = []
    for flag, value in (paths or {}).items():
        for path in ([value] if isinstance(value, (str, os.PathLike)) else value or ()):
            if path is not None and (keep_empty or os.fspath(path)):
                out.append((flag, os.fspath(path)))
    return out


def refuse_inputs(outputs, inputs, sealed=None):
    """Raise :class:`OutputError` when an output of ``outputs`` is one of ``inputs``, a
    folder holding one, or lies inside one named in ``sealed``; when it is empty, or is
    or holds the current folder. ``outputs``, ``inputs``: ``{flag: path or [paths]}``;
    ``sealed``: ``{input flag: why nothing may be written inside it}``. Links are
    followed and files compared by ``(st_dev, st_ino)``: a link, a bind mount or a hard
    link of an input is that input."""
    sealed = dict(sealed or {})
    try:
        cwd = os.getcwd()
    except OSError:  # the current folder was removed
        cwd = None
    for out_flag, out in _named(outputs, keep_empty=True):
        if not out:
            raise OutputError(
                f"{out_flag} '' is an empty path: it would name the current folder; give "
                f"{out_flag} the path of the output")
        thing = _Output(out)
        for in_flag, given in _named(inputs):
            found = _relation(thing, given)
            if found is None or found[0] == "inside" and in_flag not in sealed:
                continue
            how, other = found
            named = f"the input {in_flag} {given}"
            if how == "inside":
                raise OutputError(
                    f"{out_flag} {out} is inside {named}: {sealed[in_flag]}. Give {out_flag} "
                    f"a path outside it")
            also = f" ({other})" if other else ""
            raise OutputError(
                f"{out_flag} {out} {how} {named}{also}: writing {out} could destroy it. Give "
                f"{out_flag} a path that is neither an input nor a folder holding one")
        found = _relation(thing, cwd) if cwd else None
        if found is not None and found[0] != "inside":
            raise OutputError(
                f"{out_flag} {out} {found[0]} the current folder ({cwd}): writing {out} "
                f"could replace the folder you are in and what it holds. Give {out_flag} a "
                f"path of its own")


def _holder_note(fd):
    """The ``(pid, command)`` a lock's holder wrote; ``pid`` is '' when it wrote none."""
    text = ""
    for _ in range(20):  # the holder writes them just after it takes the lock
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 4096).decode("utf-8", "replace").strip()
        if text:
            break
        time.sleep(0.05)
    pid, _, command = text.partition(" ")
    return pid, command


def _has_ended(pid):
    """Whether no process ``pid`` runs here (a holder killed while its children exit)."""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: it runs
        return False
    return False


# How long a lock whose writer has ended may stay held by the processes it started
# while they exit (a recipe killed with its process group, then relaunched at once).
ENDED_HOLDER_WAIT = 30.0


def _holder(fd):
    """The PID and command a lock's holder wrote, as a phrase."""
    pid, command = _holder_note(fd)
    if not pid.isdigit():
        return ("another process (it wrote no PID into the lock file: it has just started, "
                "or the disk is full)")
    return f"process {pid} ({command})" if command else f"process {pid}"


def _lock_error(err, path, lock):
    """An OSError of taking the lock of ``path``, naming the lock file."""
    return OSError(err.errno, f"{err.strerror} (taking the lock of {path})", lock)


def _note(fd, pid, command):
    """Write ``pid command`` into the lock file, for a second writer's message only: a
    write that fails (a full disk) leaves it empty, and the lock held."""
    try:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{pid} {command}\n".encode("utf-8", "replace"))
    except OSError:
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass


def _flock_or_wait_for_the_ended(fd, path, lock):
    """flock ``fd``; while the writer named in the lock has ended, wait (bounded) for
    the processes it started to let the lock go. Raises OutputBusyError otherwise."""
    deadline = time.monotonic() + ENDED_HOLDER_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pid, _ = _holder_note(fd)
            if not _has_ended(pid):
                raise OutputBusyError(
                    f"{path} is being written by {_holder(fd)}, which holds {lock}: two "
                    f"writers would mix their files. Wait for it to finish, or give another "
                    f"output") from None
            if time.monotonic() > deadline:
                raise OutputBusyError(
                    f"{path}: {_holder(fd)} has ended, but a process it started still holds "
                    f"{lock} after {ENDED_HOLDER_WAIT:g} s (list it with 'fuser {lock}'): "
                    f"it may still be writing. Stop it, or give another output") from None
            time.sleep(0.1)


def _take(fd, path, lock, pid, command):
    """flock ``fd`` (opened on ``lock``) for ``path``, and write ``pid command`` into
    it (best-effort: the lock needs no free space). Returns False when the lock file was
    removed or replaced meanwhile (its holder let it go): open it again."""
    try:
        _flock_or_wait_for_the_ended(fd, path, lock)
    except OSError as err:  # a file system without locks
        raise _lock_error(err, path, lock) from None
    try:
        if os.stat(lock).st_ino != os.fstat(fd).st_ino:
            return False
    except FileNotFoundError:
        return False
    _note(fd, pid, command)
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
    try:
        os.makedirs(os.path.dirname(lock), exist_ok=True)
    except OSError as err:
        raise _lock_error(err, path, lock) from None
    while True:
        try:  # an empty file: no data block, so a full disk does not stop it
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise _lock_error(err, path, lock) from None
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
def writing(outputs, inputs=None, command=None, sealed=None):
    """The one way into an output: refuse an output that is or holds an input, lies
    inside a sealed one, is empty or is or holds the current folder
    (:func:`refuse_inputs`), then lock every output for the block. ``outputs`` and
    ``inputs``: ``{flag: path or [paths]}``, the flags naming them in messages;
    ``sealed``: ``{input flag: why nothing may be written inside it}``."""
    refuse_inputs(outputs, inputs, sealed)
    with contextlib.ExitStack() as stack:
        for _, out in _named(outputs):
            stack.enter_context(locked(out, command))
        yield


def _for_shell(argv=None):
    """For the recipes (recipes/lib.sh ``hold_output``), in two steps, so that nothing
    is created for an output refused:

    - ``refuse OUTPUT --name NAME --input NAME=PATH ...``: exit 2 (one line) when
      OUTPUT is or holds one of the inputs (or the current folder); else print the lock
      file of OUTPUT (:func:`lock_path`: beside the path it resolves to);
    - ``hold OUTPUT --fd N --pid PID --command TEXT``: flock descriptor N, which the
      calling script opened on that lock file (``exec N<>"$LOCK"``) and keeps until it
      ends. Exit 0 held; 2 busy (one line naming the holder); 3 the lock file was
      replaced meanwhile (open it again).
    """
    p = argparse.ArgumentParser(prog="python -m span_plugin.files.outputs")
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
            print(lock_path(a.output))
        elif not _take(a.fd, a.output, lock_path(a.output), a.pid, a.command):
            return 3
    except (BadInputError, OSError) as err:
        print(f"{a.command.split(' ')[0]}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_for_shell())
