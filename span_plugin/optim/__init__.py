"""Optimizers registered with fairseq (``--optimizer NAME``): ``torch_adamw``."""

from span_plugin.optim import torch_adamw  # noqa: F401
