"""The heads a span model can carry, registered by kind.

A head kind is a function ``build(args, **options) -> nn.Module`` registered with
:func:`register_head_kind`; ``RobertaSpanModel.register_head(name, kind, **options)``
builds one and stores it under ``name``. Every head is called as
``head(features [B, T, D], **inputs)``, with the inputs the task put in ``net_input``
(``spans``, ``words``, ``phrases``); the arguments its ``forward`` requires are the
inputs it needs.

| kind | module | inputs | output |
|---|---|---|---|
| ``sentence`` | :class:`SpanClassificationHead` (the paper's) | spans | logits ``[B, C]`` |
| ``token`` | ``modules.TokenTaggingHead`` | | logits ``[B, T, C]`` |
| ``sf`` | ``modules.SpanTokenTaggingHead`` | spans | logits ``[B, T, C]`` |
| ``span`` | ``modules.SpanLabelingHead`` | words | ``(logits [B, W, L, C], valid [B, W, L])`` |
| ``span_pair`` | ``modules.SpanPairHeads`` | phrases | ``{"phrasal", "sentential"}`` |
| ``qa_boundary`` | ``modules.BoundaryQAHead`` | passage | ``{"start", "end", "scores", "null"}`` |
| ``qa_span`` | ``modules.SpanQAHead`` | passage | ``{"scores", "null"}`` |
"""

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.modules.quant_noise import quant_noise as apply_quant_noise_

from span_plugin.modules import build_span_encoder
from span_plugin.modules.qa_heads import BoundaryQAHead, SpanQAHead
from span_plugin.modules.span_pair_heads import SpanPairHeads
from span_plugin.modules.tagging_heads import SpanLabelingHead, SpanTokenTaggingHead, TokenTaggingHead

HEAD_KINDS = {}


def register_head_kind(kind):
    """Decorator: ``build(args, **options) -> nn.Module`` becomes head kind ``kind``."""
    def wrap(build):
        if kind in HEAD_KINDS:
            raise ValueError(f"head kind {kind!r} is registered twice")
        HEAD_KINDS[kind] = build
        return build
    return wrap


def build_head(kind, args, **options):
    if kind not in HEAD_KINDS:
        raise ValueError(f"unknown head kind {kind!r}: expected one of {sorted(HEAD_KINDS)}")
    return HEAD_KINDS[kind](args, **options)


class SpanClassificationHead(nn.Module):
    """The paper's head: span encoder -> s; [s; x_<s>] -> dense -> tanh -> projection.

    Args:
        input_dim: D, width of the encoder's token features.
        span_dim: H, width of the span encoder; when it differs from D the features
            go through a Linear(D, H) first.
        inner_dim: width of the dense layer.
        num_classes: outputs (1 for regression).
        span_encoder: one of ``SPAN_ENCODERS`` ("cnn" is the no-segmentation control).
        kernel_size: CNN kernel of the cnn kinds.
        concat_cls: join s with the ``<s>`` feature (the paper's default); False feeds
            s alone (the paper's Figure 4 setting).
    """

    def __init__(self, input_dim, span_dim, inner_dim, num_classes, span_encoder="cnn-cnn",
                 kernel_size=3, concat_cls=True, activation_fn="tanh", pooler_dropout=0.0,
                 q_noise=0, qn_block_size=8, do_spectral_norm=False):
        super().__init__()
        self.span_proj = nn.Linear(input_dim, span_dim) if span_dim != input_dim else None
        self.span_encoder = build_span_encoder(span_encoder, span_dim, kernel_size)
        self.concat_cls = concat_cls
        self.dense = nn.Linear(span_dim + (input_dim if concat_cls else 0), inner_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.dropout = nn.Dropout(p=pooler_dropout)
        self.out_proj = apply_quant_noise_(nn.Linear(inner_dim, num_classes), q_noise, qn_block_size)
        if do_spectral_norm:
            if q_noise != 0:
                raise NotImplementedError("spectral norm together with quant noise")
            self.out_proj = torch.nn.utils.spectral_norm(self.out_proj)

    def forward(self, features, spans, **unused):
        """
        Args:
            features: ``[B, T, D]`` encoder output; position 0 is ``<s>``.
            spans: LongTensor ``[B, S, 2]``, (start, end) into T, end exclusive;
                (0, 0) rows are padding. An example with no span gets s = 0.

        Returns:
            logits ``[B, num_classes]``.
        """
        if spans.dtype != torch.long:
            raise TypeError(f"spans must be a LongTensor [B, S, 2], got {spans.dtype}")
        token_features = features if self.span_proj is None else self.span_proj(features)
        x = self.span_encoder(token_features, spans)  # [B, H]
        if self.concat_cls:
            x = torch.cat([x, features[:, 0, :]], dim=-1)  # [B, H + D]
        x = self.dropout(x)
        x = self.activation_fn(self.dense(x))
        x = self.dropout(x)
        return self.out_proj(x)


@register_head_kind("sentence")
def sentence_head(args, num_classes, inner_dim=None):
    return SpanClassificationHead(
        input_dim=args.encoder_embed_dim,
        span_dim=args.span_dim or args.encoder_embed_dim,
        inner_dim=inner_dim or args.encoder_embed_dim,
        num_classes=num_classes,
        span_encoder=args.span_encoder,
        kernel_size=args.span_kernel_size,
        concat_cls=not args.no_span_cls_concat,
        activation_fn=args.pooler_activation_fn,
        pooler_dropout=args.pooler_dropout,
        q_noise=args.quant_noise_pq,
        qn_block_size=args.quant_noise_pq_block_size,
        do_spectral_norm=args.spectral_norm_classification_head,
    )


@register_head_kind("token")
def token_head(args, num_classes):
    return TokenTaggingHead(args.encoder_embed_dim, num_classes, dropout=args.head_dropout)


@register_head_kind("sf")
def span_token_head(args, num_classes):
    return SpanTokenTaggingHead(args.encoder_embed_dim, num_classes, span_dim=args.span_dim,
                                kernel_size=args.span_kernel_size, dropout=args.head_dropout)


@register_head_kind("span")
def span_labeling_head(args, num_classes, max_words=8):
    return SpanLabelingHead(args.encoder_embed_dim, num_classes, max_words=max_words,
                            dropout=args.head_dropout)


@register_head_kind("span_pair")
def span_pair_heads(args, phrase_classes, sentence_classes, features="max4", dropout=0.1):
    return SpanPairHeads(args.encoder_embed_dim, phrase_classes, sentence_classes, features,
                         dropout)


@register_head_kind("qa_boundary")
def qa_boundary_head(args, max_answer_tokens=30):
    return BoundaryQAHead(args.encoder_embed_dim, max_answer_tokens, dropout=args.head_dropout)


@register_head_kind("qa_span")
def qa_span_head(args, max_answer_tokens=30, span_dim=128):
    return SpanQAHead(args.encoder_embed_dim, max_answer_tokens, span_dim=span_dim,
                      dropout=args.head_dropout)
