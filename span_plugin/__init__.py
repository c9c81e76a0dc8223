"""span_plugin: Span Fine-tuning for fairseq, used as ``--user-dir span_plugin``.

fairseq imports ``tasks/`` and ``models/`` of a user dir by itself; everything else
that registers with fairseq (criterions) is imported here.
"""

from . import compat

compat.apply()

# Register everything here: fairseq does not auto-import criterions, and it skips its
# own import of tasks/ and models/ when span_plugin was imported before --user-dir
# was processed (a script or test that imports span_plugin first).
from . import criterions  # noqa: E402,F401
from .models import roberta_span  # noqa: E402,F401
from .tasks import span_classification  # noqa: E402,F401
