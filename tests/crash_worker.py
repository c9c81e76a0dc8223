"""fairseq-train with the plugin, which kills itself with SIGKILL at a chosen point of
its checkpoint writes (tests/test_crash_safety.py).

    python tests/crash_worker.py KILL <fairseq-train arguments>

KILL is ``none``; ``write:K``: during the K-th checkpoint file this launch writes
(its temporary file is cut at half its size, as a kill in the middle of the write
leaves it, then SIGKILL before it is renamed into place); or ``after:K``: right after
the K-th file is in place, before the next one of the same save is written. Files are
counted over the first file of each save and its copies (checkpoint_last.pt, ...).
"""

import os
import signal
import sys

import fairseq_cli.train  # noqa: F401  (before the plugin, as fairseq-train imports it)

from span_plugin.files import atomic as files

MODE, _, AT = sys.argv[1].partition(":")
_commit = files.commit
_count = 0


def commit(tmp, path):
    global _count
    _count += 1
    if MODE == "write" and _count == int(AT):
        with open(tmp, "r+b") as f:
            f.truncate(os.path.getsize(tmp) // 2)
        os.kill(os.getpid(), signal.SIGKILL)
    _commit(tmp, path)
    if MODE == "after" and _count == int(AT):
        os.kill(os.getpid(), signal.SIGKILL)


files.commit = commit
sys.argv = ["fairseq-train"] + sys.argv[2:]
fairseq_cli.train.cli_main()
