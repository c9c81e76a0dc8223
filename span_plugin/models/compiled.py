"""Opt-in compilation of the span model for fine-tuning (``--compile``).

At the batch sizes of fine-tuning a GPU step is bound by the host (Python, one launch
per operator: benchmarks/RESULTS.md); ``torch.compile`` fuses the encoder's and the head's operators
into few kernels, and ``--compile-mode reduce-overhead`` also replays them as CUDA
graphs. Compiled graphs are specialised to shapes: with ``--length-multiple`` (the
tasks' option) every batch's token axis is one of a few lengths, and the sentence
heads' span axis is padded to the token axis here (a partition has at most one span
per token), so a split costs one graph per length (and per batch size: the last batch
of an epoch is usually smaller). ``Module.compile`` compiles in place: parameter
names, checkpoints and the hub are unchanged. Training runs only
(``fairseq-train``): a model loaded from a checkpoint runs eagerly.
"""

import types

import torch
import torch.nn.functional as F

from span_plugin.runtime.padded_encoder import forward_with_padding_mask

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")
# Graphs one run may build per compiled module before falling back to eager: a few
# lengths x (full, last batch) x (training, evaluation), with room to spare.
RECOMPILE_LIMIT = 64


def compile_in_place(module: torch.nn.Module, mode: str = "default",
                     backend: str = "inductor") -> torch.nn.Module:
    """Compile ``module`` in place with static shapes. ``mode``: one of
    ``COMPILE_MODES`` (inductor's); ``backend``: a ``torch.compile`` backend
    (``aot_eager`` traces and runs the same graphs without generating code: quick
    to check what a graph captures)."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"unknown --compile-mode {mode!r}: expected one of {', '.join(COMPILE_MODES)}")
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), RECOMPILE_LIMIT))
    options = {"mode": None if mode == "default" else mode} if backend == "inductor" else {}
    module.compile(backend=backend, dynamic=False, **options)
    return module


def compile_encoder_in_place(encoder: torch.nn.Module, mode: str = "default",
                             backend: str = "inductor") -> torch.nn.Module:
    """Compile fairseq's ``TransformerEncoder`` (RoBERTa's ``sentence_encoder``) in place
    as one graph per shape.

    fairseq's ``forward_scriptable`` branches on ``padding_mask.any()``: a data-dependent
    branch that breaks the graph (dynamo then compiles every layer on its own, and on a
    GPU the branch waits for the device on every forward). The encoder gets the forward
    of ``runtime/padded_encoder.py``, which always passes the padding mask (the same
    outputs). Parameters and state-dict keys are untouched.
    """
    encoder.forward_scriptable = types.MethodType(forward_with_padding_mask, encoder)
    return compile_in_place(encoder, mode, backend)


def pad_spans_to_length(spans: torch.Tensor, length: int) -> torch.Tensor:
    """``spans [B, S, 2]`` -> ``[B, max(S, T), 2]`` with (0, 0) rows (empty spans,
    ignored by every span head), so the span axis has the token axis's length T."""
    missing = length - spans.size(1)
    return F.pad(spans, (0, 0, 0, missing)) if missing > 0 else spans
