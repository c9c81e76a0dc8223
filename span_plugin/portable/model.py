"""The network of an exported folder without fairseq: an encoder and the plugin's
pure-torch heads (:mod:`span_plugin.modules.head_builders`), loaded from
``model.safetensors`` (encoder tensors by their Hugging Face names, each head's as
``span_heads.<name>.<key>``). The encoder is the plugin's plain-torch one
(:mod:`span_plugin.modules.bert_encoder`, ``"torch"``, no ``transformers`` import) or
``transformers``' own class (``AutoModel`` of the folder's config, ``"transformers"``).
"""

import os
from types import SimpleNamespace

import torch.nn as nn

from span_plugin.formats.model_folder import ModelFolderError
from span_plugin.modules.bert_encoder import EncoderConfigError, load_bert_encoder
from span_plugin.modules.bert_segment_pooler import segment_ids
from span_plugin.modules.head_builders import MODEL_DEFAULTS, build_head_module

WEIGHTS = "model.safetensors"
HEAD_PREFIX = "span_heads."
ENCODERS = ("torch", "transformers")
# The default, by the measurements (benchmarks/RESULTS.md, "Inference without fairseq"):
# the torch encoder computes what transformers' class does (tests/test_portable_encoder.py),
# starts in 0.47x the fairseq hub's time where transformers' class takes 1.14x (importing
# its model code costs more than torch itself), and reads 0.98x / 1.12x the pairs/s of a
# plain transformers forward at batch 1 / 32 (0.93x / 0.90x with transformers' class: the
# span head's cost is paid back by one q/k/v product and by skipping the pads' products).
# transformers' class stays a choice: a check against it, or a config the torch one refuses.
DEFAULT_ENCODER = "torch"


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


class TransformersEncoder(nn.Module):
    """``transformers``' model behind the torch encoder's interface
    (:class:`~span_plugin.modules.bert_encoder.BertEncoder`): ``forward(tokens [B, T],
    token_types [B, T] or None)`` -> ``[B, T, D]``, pads masked out; ``pool(features)``
    -> ``[B, D]``."""

    def __init__(self, model, pad):
        super().__init__()
        self.model, self.pad = model, pad

    def forward(self, tokens, token_types=None):
        extra = {} if token_types is None else {"token_type_ids": token_types}
        return self.model(input_ids=tokens, attention_mask=tokens.ne(self.pad).long(),
                          **extra).last_hidden_state

    def pool(self, features):
        return self.model.pooler(features)


def load_transformers_encoder(path, pad):
    """``transformers``' model of the folder's config (``AutoModel``), its weights from
    ``model.safetensors``, as a :class:`TransformersEncoder`; the heads' tensors and the
    masked-LM head there are not the encoder's and are left to the caller."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    level, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the heads' tensors read as "unused weights"
    hf_logging.disable_progress_bar()
    try:
        model = AutoModel.from_pretrained(path, local_files_only=True, use_safetensors=True)
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()
    return TransformersEncoder(model.eval(), pad)


def load_torch_encoder(folder, pad, needs_pooler):
    """The plain-torch :class:`~span_plugin.modules.bert_encoder.BertEncoder` of the
    folder's ``config.json`` and the encoder's tensors of ``model.safetensors`` (strict:
    a missing or unknown encoder tensor is a ModelFolderError naming it)."""
    from safetensors import safe_open

    path = os.path.join(folder.path, WEIGHTS)
    with safe_open(path, framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys() if not k.startswith(HEAD_PREFIX)}
    try:
        encoder = load_bert_encoder(folder.config, tensors, path, needs_pooler)
    except EncoderConfigError as err:
        raise ModelFolderError(str(err)) from None
    if encoder.cfg.pad_token_id != pad:
        raise ModelFolderError(f"{folder.where}: pad_token_id {encoder.cfg.pad_token_id}, but "
                               f"the tokenizer's <pad> is id {pad}")
    return encoder


class PortableNetwork(nn.Module):
    """Encoder + heads. ``forward(tokens [B, T], head, **inputs)``: the head's output on
    the encoder's last-layer features ``[B, T, D]``, as the span model computes it
    (padding masked out, BERT's segment B after the first ``</s>`` when the model was
    trained with it, BERT's pooled ``<s>`` for heads that read it). ``encoder``: a
    :class:`~span_plugin.modules.bert_encoder.BertEncoder` or a
    :class:`TransformersEncoder`."""

    def __init__(self, encoder, heads, eos, token_types=False):
        super().__init__()
        self.encoder = encoder
        self.heads = nn.ModuleDict(heads)
        self.eos, self.token_types = eos, token_types

    def forward(self, tokens, head, **inputs):
        module = self.heads[head]
        types = segment_ids(tokens, self.eos) if self.token_types else None
        features = self.encoder(tokens, types)
        if getattr(module, "reads_pooled", False):
            inputs["pooled"] = self.encoder.pool(features)
        return module(features, **inputs)


def load_network(folder, vocab, encoder=DEFAULT_ENCODER):
    """The :class:`PortableNetwork` of a :class:`~span_plugin.portable.folder.ModelFolder`
    (in eval mode). A head whose tensors do not fit the module its kind and options
    build is refused, naming the head and the tensors. ``encoder``: ``"torch"`` (the
    plugin's own, no ``transformers`` import) or ``"transformers"`` (its ``AutoModel``);
    see :data:`DEFAULT_ENCODER`."""
    if encoder not in ENCODERS:
        raise ValueError(f"encoder {encoder!r}; expected one of {', '.join(ENCODERS)}")
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
    if encoder == "torch":
        pooled = any(getattr(h, "reads_pooled", False) for h in heads.values())
        net_encoder = load_torch_encoder(folder, vocab.pad, pooled)
    else:
        net_encoder = load_transformers_encoder(folder.path, vocab.pad)
    net = PortableNetwork(net_encoder, heads, vocab.eos, bool(args.bert_token_types))
    return net.eval()
