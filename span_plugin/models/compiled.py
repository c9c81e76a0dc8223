"""Opt-in compilation of the span model for fine-tuning (``--compile``).

At the batch sizes of fine-tuning a GPU step is bound by the host (Python, one launch
per operator: issue 40); ``torch.compile`` fuses the encoder's and the head's operators
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
    GPU the branch waits for the device on every forward). The encoder gets a forward of
    its own here that always passes the padding mask: an all-False mask changes nothing
    (it adds 0 to the attention logits and multiplies the embeddings by 1), so the
    outputs are fairseq's. Parameters and state-dict keys are untouched.
    """
    encoder.forward_scriptable = types.MethodType(_forward_with_padding_mask, encoder)
    return compile_in_place(encoder, mode, backend)


def _forward_with_padding_mask(self, src_tokens, src_lengths=None, return_all_hiddens=False,
                               token_embeddings=None):
    """fairseq's ``TransformerEncoderBase.forward_scriptable`` without the branch on
    ``has_pads``: ``src_tokens [B, T]`` -> the same dict (``encoder_out``: ``[T, B, C]``)."""
    padding_mask = src_tokens.eq(self.padding_idx)  # [B, T]
    x, embedding = self.forward_embedding(src_tokens, token_embeddings)
    x = (x * (1 - padding_mask.unsqueeze(-1).type_as(x))).transpose(0, 1)  # [T, B, C]
    states, fc_results = ([x] if return_all_hiddens else []), []
    for layer in self.layers:
        out = layer(x, encoder_padding_mask=padding_mask)
        x, fc_result = out if isinstance(out, tuple) and len(out) == 2 else (out, None)
        if return_all_hiddens:
            states.append(x)
            fc_results.append(fc_result)
    if self.layer_norm is not None:
        x = self.layer_norm(x)
    lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1)
    return {
        "encoder_out": [x], "encoder_padding_mask": [padding_mask],
        "encoder_embedding": [embedding], "encoder_states": states,
        "fc_results": fc_results, "src_tokens": [], "src_lengths": [lengths.contiguous()],
    }


def pad_spans_to_length(spans: torch.Tensor, length: int) -> torch.Tensor:
    """``spans [B, S, 2]`` -> ``[B, max(S, T), 2]`` with (0, 0) rows (empty spans,
    ignored by every span head), so the span axis has the token axis's length T."""
    missing = length - spans.size(1)
    return F.pad(spans, (0, 0, 0, missing)) if missing > 0 else spans
