"""A fine-tuned hub model as a module of tensors only: what ``span-export onnx`` traces.

:class:`HeadGraph` takes ``src_tokens [B, T]`` and the inputs its head declares
(``heads.HEAD_KINDS``: ``spans [B, S, 2]``, ``words [B, W, 2]``, ``passage [B, 2]``), all
int64, positionally in :attr:`HeadGraph.input_names` order, and returns the head's tensors
as a tuple in :attr:`HeadGraph.output_names` order. :func:`model_inputs` encodes raw
examples with the hub's own code (the layout of training) into those tensors: the export's
example batches, and what tests and benchmarks feed ONNX Runtime.
"""

import contextlib
import types

import torch
import torch.nn as nn
from fairseq.data import data_utils

from span_plugin.formats.squad import QAExample
from span_plugin.inference.hub import collate_spans
from span_plugin.inference.ner import NerHubInterface
from span_plugin.inference.qa import QAHubInterface
from span_plugin.inference.sentence import SentenceHubInterface
from span_plugin.models.heads import head_inputs
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
# Hub adapters whose inputs model_inputs makes; the others are not exported.
EXPORTED = (SentenceHubInterface, NerHubInterface, QAHubInterface)


class HeadGraph(nn.Module):
    """``(src_tokens, *side inputs) -> tuple of the head's tensors`` of ``hub``'s model.

    Output names: ``logits`` for a tensor, ``logits, valid`` for a pair (span labeling),
    the keys of a dict in the head's order (QA: ``start, end, scores, null``), set by
    the first (eager) call.
    """

    def __init__(self, hub):
        super().__init__()
        self.model = hub.model.eval()
        self.head = hub.head
        self.head_kind = getattr(hub.model.classification_heads[hub.head], "kind", "plain")
        if self.head_kind in NOT_TRACED:
            raise ValueError(f"head {hub.head!r} ({self.head_kind}) is not exported to ONNX: "
                             f"{NOT_TRACED[self.head_kind]}")
        self.input_names = ("src_tokens", *head_inputs(hub.model.classification_heads[hub.head]))
        missing = [n for n in self.input_names if n not in DYNAMIC_AXES]
        if missing:
            raise ValueError(f"head {hub.head!r} ({self.head_kind}) reads {missing[0]}, "
                             f"which ONNX export does not feed yet")
        self.output_names = None
        self.eval()

    def forward(self, src_tokens, *side):
        out, _ = self.model(src_tokens, classification_head_name=self.head,
                            **dict(zip(self.input_names[1:], side)))
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


@contextlib.contextmanager
def traceable(model):
    """fairseq's encoder with its padding mask always passed (same outputs): its
    ``padding_mask.any()`` branch would freeze into the graph whichever way the example
    batch took it. Put back on exit."""
    encoder = model.encoder.sentence_encoder
    encoder.forward_scriptable = types.MethodType(forward_with_padding_mask, encoder)
    try:
        yield
    finally:
        del encoder.forward_scriptable


def model_inputs(hub, examples, names):
    """``{name: int64 tensor}`` for ``names`` of one batch of raw ``examples``, encoded by
    the hub's own code:

    - sentence models: str or (str, str) per example (``[B, T]``, ``spans [B, S, 2]``);
    - tagging models: a list of words per example (``words [B, W, 2]`` too);
    - QA models: (question, context) per example; one row per passage window
      (``passage [B, 2]``), so B may exceed the number of examples.
    """
    pad = hub.task.source_dictionary.pad()
    if isinstance(hub, SentenceHubInterface):
        encoded = hub.encode(examples)
        net = {"src_tokens": data_utils.collate_tokens([t for t, _ in encoded], pad),
               "spans": collate_spans([s for _, s in encoded])}
    elif isinstance(hub, NerHubInterface):
        items = [hub._encode_words(list(words)) for words in examples]
        net = {"src_tokens": data_utils.collate_tokens([t for t, _, _ in items], pad),
               "spans": collate_spans([s for _, s, _ in items]),
               "words": collate_spans([w for _, _, w in items])}
    elif isinstance(hub, QAHubInterface):
        data = hub.dataset([QAExample(id=str(n), question=q, context=c, answers=[],
                                      impossible=False, where="pair", labelled=False)
                            for n, (q, c) in enumerate(examples)])
        net = data.collater([data[i] for i in range(len(data))])["net_input"]
    else:
        raise ValueError(f"{type(hub).__name__} ({hub.task.cfg._name}): ONNX export covers "
                         f"sentence and pair classification, tagging and QA")
    return {n: net[n].long() for n in names}
