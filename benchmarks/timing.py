"""The one timer of benchmarks/: what a call or a command took."""

import subprocess
import time


def timed(fn, *args):
    """(wall seconds, process CPU seconds) of ``fn(*args)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def timed_command(cmd):
    """Wall seconds of ``cmd`` (a list; paths allowed) run to its end, its output
    discarded; a non-zero exit raises."""
    start = time.perf_counter()
    subprocess.run([str(c) for c in cmd], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start
