"""Files written whole or not at all.

:func:`atomic_write` writes ``NAME.PID.tmp`` (a name of this process's own, so two
processes never write one temporary file), flushes it to disk, renames it over ``NAME``
and makes the rename durable: a reader, or a run resumed after a crash, sees the old
content or all of the new, never a part. A stale ``*.tmp`` is what a killed writer
leaves behind (``span_plugin.runtime.checkpoints.prepare_resume`` removes them).

:func:`commit_folder` does the same for a folder built elsewhere on the same file
system: it takes the place of the old one, which is moved aside and removed.
:func:`staged_folder` builds a folder that way: in ``NAME.partial-PID``, committed when
the block ends, removed when it fails; what killed builders left (``.partial-PID``,
``.old-PID`` of a process that is gone) is removed first.
"""

import contextlib
import errno
import glob
import io
import os
import shutil
from pathlib import Path

from span_plugin.files.stops import named

TMP_SUFFIX = ".tmp"
PARTIAL = ".partial-"  # NAME.partial-PID: a folder being built (staged_folder)
OLD = ".old-"  # NAME.old-PID: the folder commit_folder replaces, moved aside


def temporary_name(path) -> str:
    """``NAME.PID.tmp``: where this process writes ``path`` before renaming it."""
    return f"{os.fspath(path)}.{os.getpid()}{TMP_SUFFIX}"


def _fsync_dir(path):
    try:
        fd = os.open(path or ".", os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def commit(tmp, path):
    """Rename the finished ``tmp`` over ``path`` and make the rename durable."""
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))


class _Writes:
    """A binary file that remembers the first of its writes that failed: a writer that
    catches it and fails otherwise (torch.save's zip writer then reports a RuntimeError,
    "unexpected pos") is reported with the write's own error (a full disk, SIGINT)."""

    def __init__(self, f):
        self._f, self.failed = f, None

    def write(self, data):
        try:
            return self._f.write(data)
        except BaseException as err:
            self.failed = self.failed or err
            raise

    def __getattr__(self, name):
        return getattr(self._f, name)


@contextlib.contextmanager
def atomic_file(path, text=False):
    """``with atomic_file(path) as f``: ``f`` writes :func:`temporary_name` (binary, or UTF-8
    text with ``\\n`` line ends when ``text``), flushed to disk and committed over
    ``path`` (:func:`commit`) when the block ends. An exception (a full disk, SIGINT)
    removes the temporary file and leaves ``path`` as it was; a failed write is raised
    as itself, naming ``path`` when it names no file. A ``path`` that is a symbolic link
    is written where it points (the link stays)."""
    path = os.fspath(path)
    if os.path.islink(path):
        path = os.path.realpath(path)
    tmp = temporary_name(path)
    try:
        with open(tmp, "wb") as f:
            writes = _Writes(f)
            out = io.TextIOWrapper(writes, encoding="utf-8", newline="\n") if text else writes
            try:
                yield out
                out.flush()
            except BaseException as err:
                if writes.failed is not None and err is not writes.failed:
                    raise writes.failed from None
                raise
            os.fsync(f.fileno())
            if text:
                out.detach()
    except BaseException as err:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(err, OSError) and err.filename == tmp:  # the user knows path
            raise OSError(err.errno, err.strerror, path) from err
        if named(err, path) is not err:
            raise named(err, path) from err
        raise
    commit(tmp, path)


def atomic_write(path, write):
    """Call ``write(f)`` on a binary :func:`atomic_file`."""
    with atomic_file(path) as f:
        write(f)


def atomic_copy(src, dst):
    """Copy ``src`` to ``dst`` with :func:`atomic_write`."""
    def write(f):
        with open(src, "rb") as s:
            shutil.copyfileobj(s, f, 1 << 24)

    atomic_write(dst, write)


def atomic_link(src, dst):
    """Give ``src``'s content the name ``dst`` as :func:`atomic_copy` does, by a hard
    link where the file system allows one (no bytes copied), else by a copy.

    Only for files that are never changed in place, only replaced whole (checkpoints:
    every writer here replaces them by rename), since both names share the content
    until one of them is replaced."""
    src, dst = os.fspath(src), os.fspath(dst)
    tmp = temporary_name(dst)
    try:
        if os.path.exists(tmp):
            os.remove(tmp)
        os.link(src, tmp)
    except OSError:  # another file system, or one without hard links
        atomic_copy(src, dst)
        return
    commit(tmp, dst)


def commit_folder(tmp, path):
    """Rename the finished folder ``tmp`` to ``path``. An existing ``path`` is first
    renamed aside (and put back if the rename fails), then removed: ``path`` is the old
    folder or the new one, whole, and is missing only between two renames."""
    tmp, path = os.path.normpath(os.fspath(tmp)), os.path.normpath(os.fspath(path))
    old = None
    if os.path.lexists(path):
        old = f"{path}{OLD}{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        if old is not None:
            os.replace(old, path)
        raise
    _fsync_dir(os.path.dirname(path))
    if old is not None:
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.remove(old)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_partials(path) -> list:
    """Remove the ``PATH.partial-PID`` folders that killed builders left (their process is
    gone), and their ``PATH.old-PID`` (the folder being replaced, moved aside) while
    ``PATH`` is there (else it is the only copy, left to the user); a live builder's are
    left alone. Returns the paths removed."""
    path = os.path.normpath(os.fspath(path))
    removed = []
    for suffix in (PARTIAL, OLD):
        for stale in glob.glob(glob.escape(path) + suffix + "*"):
            pid = stale[len(path + suffix):]
            if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
                continue
            if suffix == OLD and not os.path.isdir(path):
                continue
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale)
    return removed


@contextlib.contextmanager
def staged_folder(path):
    """Build the folder ``path`` whole or not at all: yields ``PATH.partial-PID`` (a
    sibling: the same file system), a Path to write into; when the block ends without an
    exception it takes ``path``'s place (:func:`commit_folder`, an existing folder replaced
    whole), else it is removed, and a failed write that names no file names ``path``
    (SIGINT and SIGTERM arrive as exceptions: files/stops.py). What callers check of an
    existing ``path`` (is it theirs to replace?) they check before.

    ``path`` is resolved first: through a symbolic link (of it or a folder above it) the
    folder is built where the link points, and the link stays. A ``path`` that is, or
    holds, the current folder is refused (an OSError, EINVAL): it would be moved away
    under the process, and whatever else the folder held with it."""
    path = os.path.realpath(os.path.abspath(os.fspath(path)))
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        cwd = None
    if cwd is not None and (cwd == path or cwd.startswith(path.rstrip(os.sep) + os.sep)):
        raise OSError(errno.EINVAL, f"is or holds the current folder ({cwd}), which a folder "
                      f"written whole would replace: give the output a path of its own", path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    remove_stale_partials(path)
    tmp = f"{path}{PARTIAL}{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        yield Path(tmp)
        commit_folder(tmp, path)
    except BaseException as err:  # SIGINT, SIGTERM, a full disk
        shutil.rmtree(tmp, ignore_errors=True)
        if named(err, path) is not err:
            raise named(err, path) from err
        raise
