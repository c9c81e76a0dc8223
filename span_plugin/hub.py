"""The hub's public import: ``from span_plugin.hub import SpanHubInterface``, then
``SpanHubInterface.from_pretrained(checkpoint)`` returns the adapter of the task the
checkpoint was trained with (:mod:`span_plugin.inference`); given a folder of
``span-export hf``, the predictor of :func:`span_plugin.portable.load_model` (the same
methods and outputs, without fairseq). The one name users' scripts need, at a path that
does not move with the package's layers."""

from span_plugin.inference.hub import SpanHubInterface  # noqa: F401
