"""The base of every predictor (an exported folder's, and a fairseq checkpoint's built in
memory by :mod:`span_plugin.inference.checkpoint`): network, text encoder, labels and
settings, and the input layout of training on in-memory items.

``<s> A </s>`` (one input) or ``<s> A </s> </s> B </s>`` (two), with the task's
``--init-token`` / ``--separator-token`` and shortening, the side items (n-gram spans,
word spans, phrase pairs) moved to their positions by the functions the task's datasets
use (:mod:`span_plugin.modules.span_layout`).
"""

from dataclasses import dataclass
from types import SimpleNamespace
from typing import List, Optional, Tuple

import torch

from span_plugin.modules.span_layout import lay_out_example, place_spans
from span_plugin.portable.batches import pad_tokens
from span_plugin.portable.results import finite_outputs


@dataclass
class Laid:
    """One example in the model's layout. ``tokens``: LongTensor ``[T]`` (shortened);
    ``starts``: where each input starts; ``window``: ``(lo, hi)`` kept by the
    shortening, None when nothing was cut; ``full``: the length before it."""

    tokens: torch.Tensor
    starts: List[int]
    window: Optional[Tuple[int, int]]
    full: int

    def spans(self, parts, max_spans=None, max_span_tokens=None):
        """Flat span offsets per input (``[s0, e0, s1, e1, ...]`` in its own tokens) ->
        LongTensor ``[n, 2]`` in the layout."""
        return place_spans([torch.as_tensor(p, dtype=torch.long) for p in parts], self.starts,
                           self.window, max_spans, max_span_tokens)


class Predictor:
    """A fine-tuned model and what it takes to predict raw text: ``folder``
    (:class:`~span_plugin.portable.folder.ModelFolder`: task, settings, heads, labels,
    data record), ``encoder`` (the training text encoder), ``vocab`` (its symbols -> the
    model's ids), ``network`` (``network(tokens [B, T], head, **inputs)`` -> the head's
    output: :class:`~span_plugin.portable.model.PortableNetwork`, or a fairseq model
    behind the same call). Subclasses add their task's predictions."""

    def __init__(self, folder, encoder, vocab, network, head=None, default_head=None):
        self.folder, self.encoder, self.vocab, self.network = folder, encoder, vocab, network
        self.record = folder.record
        self.cfg = SimpleNamespace(**folder.task_args)  # the task's arguments, as task.cfg
        self.head = head or folder.task_args.get("classification_head_name") or default_head
        if self.head not in folder.heads:
            raise ValueError(f"{folder.where}: no head {self.head!r}; it has {list(folder.heads)}")
        self.reads_spans = "spans" in (folder.heads[self.head].get("inputs") or ())
        self.num_inputs = self.record["inputs"] if self.record else None
        self.data = None  # a task folder to read splits' raw rows from (span-predict --data)

    def use_data(self, data):
        """Read splits from the task folder ``data`` (``span-predict --data``; None: none):
        its own record's labels and its dictionaries must be the ones the model's data
        record holds (sha256), as the hub checks a checkpoint's, else a ValueError naming
        both."""
        if data is not None and self.record is not None:
            import os

            from span_plugin.preprocess.records import provenance

            if not os.path.isdir(data):
                raise ValueError(f"--data {data}: not a folder (the task folder whose splits "
                                 f"to predict)")
            provenance.check_same_labels(str(data), self.record, self.folder.where)
            provenance.verify_files(str(data), self.record, only=provenance.is_dictionary,
                                    where=f"the data record in {self.folder.where}")
        self.data = None if data is None else str(data)
        return self

    @property
    def task_name(self):
        """The fairseq task the model was trained with (``span_classification``, ...)."""
        return self.folder.task

    @property
    def device(self):
        """Where the network runs: its first parameter's device, or its first buffer's
        (a network answered by ONNX Runtime has no parameters)."""
        for tensor in (*self.network.parameters(), *self.network.buffers()):
            return tensor.device
        return torch.device("cpu")

    @property
    def head_labels(self):
        return self.folder.labels.get(self.head)

    @property
    def max_positions(self):
        """The model's positions (fairseq's ``model.max_positions()``)."""
        return int(self.folder.model_args["max_positions"])

    def to(self, device):
        self.network.to(device)
        return self

    def eval(self):
        """The network is always in eval mode; here for scripts that call it."""
        self.network.eval()
        return self

    def tokens_of(self, symbols):
        """Encoder symbols -> LongTensor ``[len + 1]`` of the model's ids, ``</s>`` last."""
        return torch.as_tensor(self.vocab.line(symbols), dtype=torch.long)

    def lay_out(self, inputs, shorten="none", max_len=None, init_token="task",
                separator_token="task"):
        """One example's token items (LongTensor ``[T_k]`` per input, each ending in
        ``</s>``) in the layout -> :class:`Laid`. ``shorten``: "none" or "truncate" to
        ``max_len``; the init and separator tokens are the task's unless given (fairseq
        dictionary indices, mapped to the model's ids)."""
        if init_token == "task":
            init_token = getattr(self.cfg, "init_token", None)
        if separator_token == "task":
            separator_token = getattr(self.cfg, "separator_token", None)
        tokens, starts = lay_out_example(inputs, self.vocab.fairseq_index(init_token),
                                         self.vocab.fairseq_index(separator_token))
        full = len(tokens)
        window = None
        if shorten == "truncate" and full > max_len:
            window = (0, int(max_len))
            tokens = tokens[:max_len]
        return Laid(tokens, starts, window, full)

    @torch.no_grad()
    def forward_batch(self, tokens, head=None, **side):
        """The head's output on token items (LongTensor ``[T_i]``, right-padded here to
        ``[B, T]``) and batched side inputs (``spans=[B, S, 2]``, ...)."""
        side = {name: x.to(self.device) for name, x in side.items()}
        return finite_outputs(self.network(pad_tokens(tokens, self.vocab.pad).to(self.device),
                                           head or self.head, **side), head or self.head)
