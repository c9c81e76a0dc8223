"""Criterions of the plugin (fairseq does not auto-import this folder: the package
``__init__`` imports it)."""

from . import span_classification  # noqa: F401
