"""Inference on raw text from a checkpoint alone: one hub base (:mod:`.hub`) and an
adapter per task, each registered for its task names when imported here."""

from span_plugin.inference import ner, pairs, qa, sentence  # noqa: F401  (register the adapters)
