"""span_plugin: Span Fine-tuning for fairseq, used as ``--user-dir span_plugin``.

Importing the package is cheap: the preprocessing layers (``formats``, ``tokenizers``,
``preprocess``) load neither torch nor fairseq. What registers with fairseq (the stack
fixes, tasks, models and criterions) is imported by :func:`register`, which runs here
when fairseq is already loaded (``fairseq-train --user-dir span_plugin``, a script that
imported fairseq first) and from the inference layer; call it yourself in a script that
imports span_plugin before fairseq and then runs fairseq's own entry points in-process.
docs/ARCHITECTURE.md shows the layers.
"""

import sys

from span_plugin.version import __version__  # noqa: F401


def register():
    """Apply the stack fixes and register every task, model, criterion and optimizer
    (idempotent)."""
    from span_plugin.runtime import compat

    compat.apply()
    # fairseq imports tasks/ and models/ of a user dir by itself, but not criterions, and
    # skips both when span_plugin was imported before --user-dir was processed.
    import span_plugin.criterions  # noqa: F401
    import span_plugin.models  # noqa: F401
    import span_plugin.optim  # noqa: F401
    import span_plugin.tasks  # noqa: F401

    # Those imports load fairseq's models when fairseq was not imported first (scripts,
    # notebooks), and its wav2vec2 module then sets the root logger to DEBUG: put it back.
    compat.quiet_stack_notices()


if "fairseq" in sys.modules:
    register()
