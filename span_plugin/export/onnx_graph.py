"""A predictor's network as a module of tensors only: what ``span-export onnx`` traces.

:class:`HeadGraph` takes ``src_tokens [B, T]`` and the inputs its head declares
(``spans [B, S, 2]``, ``words [B, W, 2]``, ``passage [B, 2]``), all int64, positionally
in :attr:`HeadGraph.input_names` order, and returns the head's tensors as a tuple in
:attr:`HeadGraph.output_names` order. :func:`~span_plugin.portable.onnx_inputs.model_inputs`
encodes raw examples with the predictor's own code into those tensors.
"""

import contextlib
import types

import torch
import torch.nn as nn

from span_plugin.inference.checkpoint import FairseqNetwork
from span_plugin.runtime.padded_encoder import forward_with_padding_mask

# The axes of each input that vary from call to call (the rest are fixed: 2 per span).
DYNAMIC_AXES = {
    "src_tokens": {0: "batch", 1: "length"},
    "spans": {0: "batch", 1: "spans"},
    "words": {0: "batch", 1: "words"},
    "passage": {0: "batch"},
}
MEANINGS = {
    "src_tokens": "token ids in the layout of training (<s> A </s>, then B as the model "
                  "was trained for pairs), right-padded with special_ids.pad",
    "spans": "(start, end) token positions of the n-gram spans, end exclusive; (0, 0) "
             "rows are padding",
    "words": "(start, end) token positions of each word, end exclusive; (0, 0) rows are "
             "padding",
    "passage": "(start, end) token positions of the passage in the window, end exclusive",
}
# Head kinds torch's exporter cannot express in ONNX ops, and why.
NOT_TRACED = {"qa_span": "its candidate packing sorts (a stable sort, for which ONNX has no "
                         "op); --qa-head boundary and sf export"}


class HeadGraph(nn.Module):
    """``(src_tokens, *side inputs) -> tuple of the head's tensors`` of ``hub``'s network
    (a checkpoint's or an exported folder's).

    Output names: ``logits`` for a tensor, ``logits, valid`` for a pair (span labeling),
    the keys of a dict in the head's order (QA: ``start, end, scores, null``), set by
    the first (eager) call.
    """

    def __init__(self, hub):
        super().__init__()
        self.network = hub.network.eval()
        self.head = hub.head
        spec = hub.folder.heads[hub.head]
        self.head_kind = spec["kind"] or "unknown"
        if self.head_kind in NOT_TRACED:
            raise ValueError(f"head {hub.head!r} ({self.head_kind}) is not exported to ONNX: "
                             f"{NOT_TRACED[self.head_kind]}")
        self.input_names = ("src_tokens", *spec["inputs"])
        missing = [n for n in self.input_names if n not in DYNAMIC_AXES]
        if missing:
            raise ValueError(f"head {hub.head!r} ({self.head_kind}) reads {missing[0]}, "
                             f"which ONNX export does not feed yet")
        self.output_names = None
        self.eval()

    def forward(self, src_tokens, *side):
        out = self.network(src_tokens, self.head, **dict(zip(self.input_names[1:], side)))
        if self.output_names is None:  # the first call, eager
            self.output_names = output_names(out)
        if isinstance(out, dict):
            return tuple(out[k] for k in self.output_names)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def args_of(self, inputs):
        """The positional arguments of :meth:`forward` from ``{name: tensor}``."""
        return tuple(inputs[n] for n in self.input_names)


def output_names(out):
    """Names of a head's output: a tensor, a (logits, valid) pair or a dict of tensors."""
    if isinstance(out, dict):
        return tuple(k for k, v in out.items() if torch.is_tensor(v))
    if isinstance(out, (tuple, list)):
        return ("logits", "valid")[:len(out)]
    return ("logits",)


def has_two_paths(network):
    """Whether the network's encoder traces a packed and an unpadded path (the plugin's
    plain-torch encoder) rather than one (fairseq's)."""
    return hasattr(getattr(network, "encoder", None), "pack_when_exporting")


@contextlib.contextmanager
def encoder_path(network, packed):
    """The network's encoder (:func:`has_two_paths`) tracing its packed path
    (``packed``) or its unpadded one; packed again on exit."""
    encoder = network.encoder
    encoder.pack_when_exporting = packed
    try:
        yield encoder
    finally:
        encoder.pack_when_exporting = True


@contextlib.contextmanager
def traceable(network):
    """fairseq's encoder with its padding mask always passed (same outputs): its
    ``padding_mask.any()`` branch would freeze into the graph whichever way the example
    batch took it. Put back on exit. An exported folder's encoder has no such branch."""
    if not isinstance(network, FairseqNetwork):
        yield
        return
    encoder = network.model.encoder.sentence_encoder
    encoder.forward_scriptable = types.MethodType(forward_with_padding_mask, encoder)
    try:
        yield
    finally:
        del encoder.forward_scriptable
