"""files/stops.py: SIGTERM inside stop_on_sigterm is a Stopped exception in the command
itself, and the kernel's default in the pool workers it forks (a Python handler in an
idle worker can miss the signal, and the pool's terminate() would wait on it for ever)."""

import multiprocessing as mp
import os
import signal

import pytest

from span_plugin.files.stops import Stopped, stop_on_sigterm


def _handler_name(_):
    handler = signal.getsignal(signal.SIGTERM)
    return "default" if handler == signal.SIG_DFL else repr(handler)


def test_sigterm_is_stopped_in_the_command_and_default_in_its_forked_workers():
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_sigterm():
        with mp.get_context("fork").Pool(2) as pool:
            assert pool.map(_handler_name, range(4)) == ["default"] * 4
            # the workers end by the pool's sentinel: terminate()'s SIGTERM is not what
            # this tests (docs/RELIABILITY.md: a wait seen there once)
            pool.close()
            pool.join()
        with pytest.raises(Stopped):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a bytecode boundary: the handler runs
    assert signal.getsignal(signal.SIGTERM) == before
