"""The sentence(-pair) classification heads in pure torch (no fairseq): the paper's span
head, BERT's classifier over its pooler, and the plain RoBERTa head with fairseq's
parameter names (``dense``, ``out_proj``), so that a fine-tuned checkpoint's head
tensors load into them by name, inside fairseq (:mod:`span_plugin.models.heads` adds
fairseq's quant noise for training) and without it (:mod:`span_plugin.portable`).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from span_plugin.modules.span_encoder import build_span_encoder

_GELU_TANH = math.sqrt(2 / math.pi)


def _gelu(x):
    return F.gelu(x.float()).type_as(x)


def _gelu_accurate(x):  # the tanh approximation, as fairseq computes it
    return 0.5 * x * (1 + torch.tanh(_GELU_TANH * (x + 0.044715 * torch.pow(x, 3))))


ACTIVATIONS = {
    "relu": F.relu,
    "gelu": _gelu,
    "gelu_fast": _gelu_accurate,
    "gelu_accurate": _gelu_accurate,
    "tanh": torch.tanh,
    "linear": lambda x: x,
}


def activation(name):
    """The activation ``--pooler-activation-fn name`` selects, computed as fairseq's
    ``utils.get_activation_fn`` computes it."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r}: expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def output_layer(input_dim, num_classes, do_spectral_norm=False):
    """The classification projection, Linear(input_dim, num_classes), spectrally
    normalised when asked (``--spectral-norm-classification-head``; its tensors are then
    ``weight_orig``, ``weight_u``, ``weight_v``, as fairseq saves them)."""
    out_proj = nn.Linear(input_dim, num_classes)
    return nn.utils.spectral_norm(out_proj) if do_spectral_norm else out_proj


@dataclass(frozen=True)
class SpanHeadOptions:
    """The settings of :class:`SpanClassificationHead` besides its widths (what each
    does: the class docstring). :func:`span_plugin.modules.head_builders.build_head_module`
    reads them from the model's arguments (``--span-encoder``, ``--span-kernel-size``,
    ``--no-span-cls-concat``, ``--pooler-activation-fn``, ``--pooler-dropout``,
    ``--span-dropout``, ``--bert-pooler``, ``--spectral-norm-classification-head``)."""

    span_encoder: str = "cnn-cnn"
    kernel_size: int = 3
    concat_cls: bool = True
    activation_fn: str = "tanh"
    pooler_dropout: float = 0.0
    span_dropout: float = 0.0
    pooled_cls: bool = False
    do_spectral_norm: bool = False


class SpanClassificationHead(nn.Module):
    """The paper's head: span encoder -> s; ``[s; x_<s>]`` -> dropout -> dense -> tanh ->
    dropout -> projection. With BERT's pooler (``pooled_cls``): ``[s; pooled <s>]`` ->
    dropout -> projection, as the paper's code over BERT.

    Args:
        input_dim: D, width of the encoder's token features.
        span_dim: H, width of the span encoder; when it differs from D the features
            go through a Linear(D, H) first.
        inner_dim: width of the dense layer (not used with ``pooled_cls``).
        num_classes: outputs (1 for regression).
        options: :class:`SpanHeadOptions`, its fields:
            span_encoder: one of ``SPAN_ENCODERS`` ("cnn" is the no-segmentation control).
            kernel_size: CNN kernel of the cnn kinds.
            concat_cls: join s with the ``<s>`` feature (the paper's default); False feeds
                s alone (the paper's Figure 4 setting).
            span_dropout: the paper's dropout: on the span vectors (each learned level of
                the span encoder) and on the classifier input ``[s; <s>]``. 0: the head
                before it had one (dropout only where ``pooler_dropout`` puts it).
            pooler_dropout: dropout after the dense layer (fairseq's RoBERTa head: 0).
            pooled_cls: read BERT's pooled ``<s>`` (``pooled``) and end in one linear layer.
    """

    def __init__(self, input_dim, span_dim, inner_dim, num_classes, options=SpanHeadOptions()):
        super().__init__()
        o = options
        self.span_proj = nn.Linear(input_dim, span_dim) if span_dim != input_dim else None
        self.span_encoder = build_span_encoder(o.span_encoder, span_dim, o.kernel_size,
                                               o.span_dropout)
        self.concat_cls = o.concat_cls
        self.reads_pooled = o.pooled_cls and o.concat_cls
        width = span_dim + (input_dim if o.concat_cls else 0)
        self.input_dropout = nn.Dropout(p=o.span_dropout)
        self.dense = self.activation_fn = None
        if not o.pooled_cls:
            self.dense = nn.Linear(width, inner_dim)
            self.activation_fn = activation(o.activation_fn)
            width = inner_dim
        self.dropout = nn.Dropout(p=o.pooler_dropout)
        self.out_proj = output_layer(width, num_classes, o.do_spectral_norm)

    def forward(self, features, spans, pooled=None, **unused):
        """
        Args:
            features: ``[B, T, D]`` encoder output; position 0 is ``<s>``.
            spans: LongTensor ``[B, S, 2]``, (start, end) into T, end exclusive;
                (0, 0) rows are padding. An example with no span gets s = 0.
            pooled: ``[B, D]``, BERT's pooled ``<s>`` (read when ``reads_pooled``).

        Returns:
            logits ``[B, num_classes]``.
        """
        if spans.dtype != torch.long:
            raise TypeError(f"spans must be a LongTensor [B, S, 2], got {spans.dtype}")
        token_features = features if self.span_proj is None else self.span_proj(features)
        x = self.span_encoder(token_features, spans)  # [B, H]
        if self.concat_cls:
            if self.reads_pooled and pooled is None:
                raise ValueError("this span head reads BERT's pooled <s> (--bert-pooler): "
                                 "pass pooled=[B, D]")
            cls = pooled if self.reads_pooled else features[:, 0, :]
            x = torch.cat([x, cls], dim=-1)  # [B, H + D]
        x = self.input_dropout(x)
        if self.dense is None:
            return self.out_proj(x)
        x = self.activation_fn(self.dense(x))
        x = self.dropout(x)
        return self.out_proj(x)


class PooledClassificationHead(nn.Module):
    """BERT's sequence classifier over the model's pooled ``<s>``: dropout ->
    projection (the pooler's dense + tanh is the model's, pretrained)."""

    reads_pooled = True

    def __init__(self, input_dim, num_classes, dropout=0.1, do_spectral_norm=False):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.out_proj = output_layer(input_dim, num_classes, do_spectral_norm)

    def forward(self, features, pooled=None, **unused):
        """``features [B, T, D]`` (unused), ``pooled [B, D]`` -> logits ``[B, C]``."""
        if pooled is None:
            raise ValueError("the plain head over BERT's pooler reads pooled=[B, D] "
                             "(the model's pooler output, --bert-pooler)")
        return self.out_proj(self.dropout(pooled))


class PlainClassificationHead(nn.Module):
    """The plain RoBERTa sentence head (fairseq's ``RobertaClassificationHead``: same
    parameter names, layers built in the same order, same computation): the ``<s>``
    feature -> dropout -> dense -> activation -> dropout -> projection."""

    def __init__(self, input_dim, inner_dim, num_classes, activation_fn="tanh",
                 pooler_dropout=0.0, do_spectral_norm=False):
        super().__init__()
        self.dense = nn.Linear(input_dim, inner_dim)
        self.activation_fn = activation(activation_fn)
        self.dropout = nn.Dropout(p=pooler_dropout)
        self.out_proj = output_layer(inner_dim, num_classes, do_spectral_norm)

    def forward(self, features, **unused):
        """``features [B, T, D]`` -> logits ``[B, C]``."""
        x = self.dropout(features[:, 0, :])
        x = self.dropout(self.activation_fn(self.dense(x)))
        return self.out_proj(x)
