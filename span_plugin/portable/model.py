"""The network of an exported folder without fairseq: ``transformers``' own encoder class
(``AutoModel`` of the folder's config, no custom code) and the plugin's pure-torch
heads (:mod:`span_plugin.modules.head_builders`), loaded from ``model.safetensors``
(encoder tensors by their Hugging Face names, each head's as
``span_heads.<name>.<key>``).
"""

import os
from types import SimpleNamespace

import torch
import torch.nn as nn

from span_plugin.formats.model_folder import ModelFolderError
from span_plugin.modules.bert_segment_pooler import segment_ids
from span_plugin.modules.head_builders import MODEL_DEFAULTS, build_head_module

WEIGHTS = "model.safetensors"
HEAD_PREFIX = "span_heads."


def model_arguments(folder):
    """The checkpoint's model arguments as attributes, the span model's defaults where
    one is missing (a checkpoint made before the argument existed)."""
    return SimpleNamespace(**{**MODEL_DEFAULTS, **folder.model_args})


def head_tensors(path, name):
    """``{key: tensor}`` of head ``name`` in the safetensors file ``path``."""
    from safetensors import safe_open

    prefix = f"{HEAD_PREFIX}{name}."
    with safe_open(path, framework="pt") as f:
        return {k[len(prefix):]: f.get_tensor(k) for k in f.keys() if k.startswith(prefix)}


def load_encoder(path):
    """``transformers``' model of the folder's config (``AutoModel``), its weights from
    ``model.safetensors``; the heads' tensors and the masked-LM head there are not the
    encoder's and are left to the caller."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    level, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the heads' tensors read as "unused weights"
    hf_logging.disable_progress_bar()
    try:
        return AutoModel.from_pretrained(path, local_files_only=True, use_safetensors=True)
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()


class PortableNetwork(nn.Module):
    """Encoder + heads. ``forward(tokens [B, T], head, **inputs)``: the head's output on
    the encoder's last-layer features ``[B, T, D]``, as the span model computes it
    (padding masked out, BERT's segment B after the first ``</s>`` when the model was
    trained with it, BERT's pooled ``<s>`` for heads that read it)."""

    def __init__(self, encoder, heads, pad, eos, token_types=False):
        super().__init__()
        self.encoder = encoder
        self.heads = nn.ModuleDict(heads)
        self.pad, self.eos, self.token_types = pad, eos, token_types

    def forward(self, tokens, head, **inputs):
        module = self.heads[head]
        extra = {}
        if self.token_types:
            extra["token_type_ids"] = segment_ids(tokens, self.eos)
        out = self.encoder(input_ids=tokens, attention_mask=tokens.ne(self.pad).long(), **extra)
        if getattr(module, "reads_pooled", False):
            inputs["pooled"] = out.pooler_output
        return module(out.last_hidden_state, **inputs)


def load_network(folder, vocab):
    """The :class:`PortableNetwork` of a :class:`~span_plugin.portable.folder.ModelFolder`
    (in eval mode). A head whose tensors do not fit the module its kind and options
    build is refused, naming the head and the tensors."""
    path = os.path.join(folder.path, WEIGHTS)
    args = model_arguments(folder)
    heads = {}
    for name, spec in folder.heads.items():
        head = build_head_module(spec["kind"], args, **(spec.get("options") or {}))
        state = head_tensors(path, name)
        try:
            head.load_state_dict(state, strict=True)
        except RuntimeError as err:
            why = [line.strip() for line in str(err).splitlines()[1:2]] or [str(err)]
            raise ModelFolderError(f"{path}: the tensors span_heads.{name}.* do not fit head "
                                   f"{name!r} of kind {spec['kind']!r} ({why[0]})") from None
        head.inputs = tuple(spec.get("inputs") or ())
        heads[name] = head
    encoder = load_encoder(folder.path)
    net = PortableNetwork(encoder, heads, vocab.pad, vocab.eos, bool(args.bert_token_types))
    return net.eval()
