"""Kept for users' scripts: ``from span_plugin.hub import SpanHubInterface``."""

from span_plugin.inference.hub import SpanHubInterface  # noqa: F401
