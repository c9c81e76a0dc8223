"""How a command ends on a fault or a signal: one line naming the path and the cause,
exit 2 (130 for SIGINT), no traceback.

SIGTERM (``kill``, a scheduler's time limit) would end the interpreter at once, leaving
a build's temporary folder and a half-written file behind; :func:`stop_on_sigterm` turns
it into :class:`Stopped`, an exception like SIGINT's KeyboardInterrupt, so that the
writers' cleanup runs (``whole_folder`` removes its temporary folder, ``atomic_file``
its temporary file) and earlier outputs stay as they were.
"""

import contextlib
import os
import signal
import sys
import threading


class Stopped(BaseException):
    """The process was asked to stop (SIGTERM). A BaseException, as KeyboardInterrupt:
    no ``except Exception`` on the way swallows it."""


@contextlib.contextmanager
def stop_on_sigterm():
    """Within the block, SIGTERM raises :class:`Stopped` (in the main thread only: a
    signal handler can only be set there); worker processes forked meanwhile end on it
    as they would by default."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    pid = os.getpid()

    def stop(signum, frame):
        if os.getpid() != pid:  # a forked worker (a pool's terminate()): end as by default
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        raise Stopped("SIGTERM")

    stop.forked_workers_default = True  # see _worker_ends_on_sigterm
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _worker_ends_on_sigterm():
    """In a process forked inside :func:`stop_on_sigterm` (a pool's worker), SIGTERM is
    back at the kernel's default. A Python handler runs only between bytecodes: a worker
    idle in its wait for a task misses a SIGTERM that lands just before the wait begins,
    and the pool's terminate() then waits on it for ever (seen in CI: span-preprocess qa
    --workers 2 hung in Pool.__exit__)."""
    if getattr(signal.getsignal(signal.SIGTERM), "forked_workers_default", False):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


os.register_at_fork(after_in_child=_worker_ends_on_sigterm)


def named(err, path):
    """``err`` with ``path`` as its file name when it has none (a failed ``write`` names
    no file: ``[Errno 28] No space left on device``); other errors as they are."""
    if isinstance(err, OSError) and err.errno is not None and not err.filename:
        return OSError(err.errno, err.strerror, str(path))
    return err


def report(prog, err):
    """Print the one line of a command ``prog`` that ended on ``err`` and return its
    exit status: 130 for SIGINT (KeyboardInterrupt), 2 for everything else."""
    if isinstance(err, KeyboardInterrupt):
        print(f"{prog}: interrupted (SIGINT); no output is left half-written", file=sys.stderr)
        return 130
    if isinstance(err, Stopped):
        print(f"{prog}: stopped ({err}); no output is left half-written", file=sys.stderr)
        return 2
    print(f"{prog}: error: {err}", file=sys.stderr)
    return 2
