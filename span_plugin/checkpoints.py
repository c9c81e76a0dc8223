"""Kept for users' scripts: ``python -m span_plugin.checkpoints resume DIR`` runs
:mod:`span_plugin.runtime.checkpoints`."""

from span_plugin.runtime.checkpoints import *  # noqa: F401,F403
from span_plugin.runtime.checkpoints import main

if __name__ == "__main__":
    main()
