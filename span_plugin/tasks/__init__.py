"""fairseq tasks of the plugin (every module registers its task on import)."""

from span_plugin.tasks import (  # noqa: F401
    span_classification,
    span_pair_classification,
    span_qa,
    span_tagging,
    spanbert_masked_lm,
)
