"""span_plugin: Span Fine-tuning for fairseq, used as ``--user-dir span_plugin``.

fairseq imports ``tasks/`` and ``models/`` of a user dir by itself; everything else
that registers with fairseq (criterions) is imported here.
"""

__version__ = "0.2.0"  # also in setup.py; recorded in every data folder

from span_plugin.runtime import compat  # noqa: E402

compat.apply()

# Register everything here: fairseq does not auto-import criterions, and it skips its
# own import of tasks/ and models/ when span_plugin was imported before --user-dir
# was processed (a script or test that imports span_plugin first).
from span_plugin import criterions  # noqa: E402,F401
from span_plugin.models import roberta_span, roberta_tagging  # noqa: E402,F401
from span_plugin.tasks import span_classification, span_tagging  # noqa: E402,F401
from span_plugin.models import roberta_spanbert  # noqa: E402,F401
from span_plugin.tasks import spanbert_masked_lm  # noqa: E402,F401
from span_plugin.models import roberta_span_pair  # noqa: E402,F401
from span_plugin.tasks import span_pair_classification  # noqa: E402,F401
