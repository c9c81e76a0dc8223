"""Criterions of the plugin (fairseq does not auto-import this folder: the package
``__init__`` imports it)."""

from span_plugin.criterions import ner, span_classification  # noqa: F401
from span_plugin.criterions import spanbert_masked_lm  # noqa: F401
from span_plugin.criterions import span_pair_classification  # noqa: F401
from span_plugin.criterions import span_qa  # noqa: F401
