"""The network of an exported folder without fairseq: an encoder and the plugin's
pure-torch heads (:mod:`span_plugin.modules.head_builders`), loaded from
``model.safetensors`` (encoder tensors by their Hugging Face names, each head's as
``span_heads.<name>.<key>``). The encoder is the plugin's plain-torch one
(:mod:`span_plugin.modules.bert_encoder`, ``"torch"``, no ``transformers`` import) or
``transformers``' own class (``AutoModel`` of the folder's config, ``"transformers"``).
"""

import os
from types import SimpleNamespace

import torch
import torch.nn as nn

from span_plugin.formats.model_folder import (TASK_CLASS_PREFIX, ModelFolderError, encoder_family,
                                              head_tensor_names)
from span_plugin.modules.bert_encoder import EncoderConfigError, load_bert_encoder
from span_plugin.modules.bert_segment_pooler import segment_ids
from span_plugin.modules.head_builders import MODEL_DEFAULTS, build_head_module

WEIGHTS = "model.safetensors"
HEAD_PREFIX = "span_heads."
ENCODERS = ("torch", "transformers")
# The default: it computes what transformers' class does (tests/test_portable_encoder.py),
# starts and runs faster (benchmarks/RESULTS.md, "Inference without fairseq"): one q/k/v
# product, no products for pads. transformers' class stays a choice: a check against it,
# or a config the torch one refuses.
DEFAULT_ENCODER = "torch"


def model_arguments(folder):
    """The checkpoint's model arguments as attributes, the span model's defaults where
    one is missing (a checkpoint made before the argument existed)."""
    return SimpleNamespace(**{**MODEL_DEFAULTS, **folder.model_args})


def head_tensors(path, name, spec=None):
    """``{key: tensor}`` of head ``name`` (its entry ``spec``) in the safetensors file
    ``path``: its ``span_heads.<name>.*`` tensors, or the transformers class's names its
    entry maps (:func:`~span_plugin.formats.model_folder.head_tensor_names`)."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        names = head_tensor_names(name, spec, list(f.keys()))
        return {key: f.get_tensor(tensor) for key, tensor in names.items()}


def check_finite(tensors, where):
    """Refuse a tensor of ``tensors`` (``{name: tensor}``) holding NaN or an infinity,
    naming it: weights that are not numbers give outputs that are not either."""
    for name, value in tensors.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            kinds = [k for k, test in (("NaN", torch.isnan), ("inf", torch.isinf))
                     if bool(test(value).any())]
            raise ModelFolderError(f"{where}: tensor {name} holds {' and '.join(kinds)} "
                                   f"({bad} of {value.numel()} values): the weights are not "
                                   f"finite numbers (a diverged run?); nothing is predicted")


def check_head_shapes(folder, name, spec, args):
    """Head ``name``'s tensors in the header (``folder.shapes``) against the module its
    kind and options build on torch's meta device (nothing allocated): a head of 10^9
    classes over tensors of 2 rows is refused before it is built, naming the option and
    the tensor."""
    path = os.path.join(folder.path, WEIGHTS)
    where = f"{folder.where}: span_plugin.heads.{name}"
    options = spec.get("options") or {}
    try:
        with torch.device("meta"):
            shell = build_head_module(spec["kind"], args, **options)
    except (TypeError, ValueError) as err:
        raise ModelFolderError(f"{where}.options: {options} do not build a {spec['kind']!r} "
                               f"head ({err})") from None
    prefix = f"{HEAD_PREFIX}{name}."
    have = {key: folder.shapes[tensor][1] for key, tensor in
            head_tensor_names(name, spec, folder.shapes).items() if tensor in folder.shapes}
    want = {k: tuple(v.shape) for k, v in shell.state_dict().items()}
    for key in sorted(set(want) | set(have)):
        if key not in have:
            raise ModelFolderError(f"{path}: no {prefix}{key}, which head {name!r} of kind "
                                   f"{spec['kind']!r} with options {options} has")
        if key not in want:
            raise ModelFolderError(f"{path}: {prefix}{key} is not a tensor of head {name!r} of "
                                   f"kind {spec['kind']!r} with options {options}")
        if have[key] != want[key]:
            raise ModelFolderError(f"{where}: options {options} give {prefix}{key} the shape "
                                   f"{list(want[key])}, but model.safetensors holds "
                                   f"{list(have[key])}")


def head_module(folder, name, spec, args):
    """The head module ``name`` of kind and options ``spec``, its tensors checked
    (:func:`check_head_shapes`, then finite) before and as they are loaded."""
    check_head_shapes(folder, name, spec, args)
    path = os.path.join(folder.path, WEIGHTS)
    prefix = f"{HEAD_PREFIX}{name}."
    head = build_head_module(spec["kind"], args, **(spec.get("options") or {}))
    state = head_tensors(path, name, spec)
    check_finite({prefix + k: v for k, v in state.items()}, path)
    head.load_state_dict(state, strict=True)
    return head


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


# Tensors of an exported folder that are not the encoder's: transformers reports them
# as unexpected when it loads the encoder alone.
NOT_ENCODER = ("lm_head.", "cls.", HEAD_PREFIX, TASK_CLASS_PREFIX)


def load_transformers_encoder(folder, pad, needs_pooler):
    """``transformers``' model of the folder's config (``AutoModel``), its weights from
    ``model.safetensors``, as a :class:`TransformersEncoder`; the heads' tensors and the
    masked-LM head there are not the encoder's and are left to the caller. Every weight
    of the model must be in the file (a missing one would be random) and every tensor of
    the file either the model's or one of those: else a ModelFolderError naming them.
    The pooler is built only when a head reads it."""
    from transformers import AutoConfig, AutoModel
    from transformers.utils import logging as hf_logging

    path = os.path.join(folder.path, WEIGHTS)
    level, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the report is checked below, not printed
    hf_logging.disable_progress_bar()
    try:
        # The encoder's own config: a folder of the plugin's model type (span heads) holds
        # a standard encoder under it.
        config = AutoConfig.for_model(encoder_family(folder.config["model_type"]), **{
            k: v for k, v in folder.config.items() if k not in ("model_type", "architectures")})
        model, report = AutoModel.from_pretrained(
            folder.path, config=config, local_files_only=True, use_safetensors=True,
            output_loading_info=True, add_pooling_layer=needs_pooler)
    except (OSError, ValueError, RuntimeError) as err:
        line = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        raise ModelFolderError(f"{path}: transformers' AutoModel does not load it "
                               f"({line})") from None
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()
    prefix = getattr(model, "base_model_prefix", "") + "."
    missing = sorted(report.get("missing_keys") or [])
    unexpected = sorted(k for k in report.get("unexpected_keys") or []
                        if not k.startswith(NOT_ENCODER)
                        and not k.startswith(tuple(prefix + p for p in NOT_ENCODER)))
    mismatched = sorted(str(k[0] if isinstance(k, (tuple, list)) else k)
                        for k in report.get("mismatched_keys") or [])
    for what, names, why in (
            ("weights missing", missing, "they would run at random"),
            ("weights of another shape", mismatched, "they would run at random"),
            ("tensors it does not know", unexpected, "neither the encoder's, its masked-LM "
             "head's nor a head's")):
        if names:
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            raise ModelFolderError(
                f"{path}: transformers' {type(model).__name__} loads with {what}: "
                f"{', '.join(names[:3])}{more} ({why})")
    check_finite(dict(model.named_parameters()), path)
    return TransformersEncoder(model.eval(), pad)


def load_torch_encoder(folder, pad, needs_pooler):
    """The plain-torch :class:`~span_plugin.modules.bert_encoder.BertEncoder` of the
    folder's ``config.json`` and the encoder's tensors of ``model.safetensors`` (strict:
    a missing or unknown encoder tensor is a ModelFolderError naming it)."""
    from safetensors import safe_open

    path = os.path.join(folder.path, WEIGHTS)
    with safe_open(path, framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys() if not k.startswith(HEAD_PREFIX)}
    check_finite(tensors, path)
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
    args = model_arguments(folder)
    heads = {}
    for name, spec in folder.heads.items():
        head = head_module(folder, name, spec, args)
        head.inputs = tuple(spec.get("inputs") or ())
        heads[name] = head
    pooled = any(getattr(h, "reads_pooled", False) for h in heads.values())
    if encoder == "torch":
        net_encoder = load_torch_encoder(folder, vocab.pad, pooled)
    else:
        net_encoder = load_transformers_encoder(folder, vocab.pad, pooled)
    net = PortableNetwork(net_encoder, heads, vocab.eos, bool(args.bert_token_types))
    return net.eval()
