"""span_plugin: Span Fine-tuning for fairseq, used as ``--user-dir span_plugin``.

fairseq imports ``tasks/`` and ``models/`` of a user dir by itself; everything else
that registers with fairseq (criterions) is imported here.
"""

from . import compat

compat.apply()

from . import criterions  # noqa: E402,F401  (fairseq does not auto-import them)
