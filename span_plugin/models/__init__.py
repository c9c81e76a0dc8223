"""fairseq models of the plugin (every module registers its architectures on import)."""

from span_plugin.models import roberta_span, roberta_span_pair, roberta_spanbert, roberta_tagging  # noqa: F401
