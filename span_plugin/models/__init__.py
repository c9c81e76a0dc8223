"""fairseq models of the plugin (every module registers its models and architectures on
import): the span model (``roberta_span``, ``roberta_tagging``, ``roberta_span_pair``)
and ``roberta_spanbert``."""

from span_plugin.models import roberta_span, roberta_spanbert  # noqa: F401
