"""The heads a span model can carry: one registry of head kinds, the one way a head is
chosen (every task, the ``--sentence-head``/``--tagging-head``/``--qa-head`` options and
SpanBERT's pre-training head alike).

A head kind is a function ``build(args, **options) -> nn.Module`` registered with
:func:`register_head_kind`, which also declares

- ``inputs``: the ``net_input`` tensors the head reads, by name. The model takes them
  from ``net_input`` and calls ``head(features [B, T, D], **inputs)``; a batch without
  one is an error naming the head and the input. A new input needs only a head kind
  that declares it and a task that puts it in ``net_input``: the model knows no names.
- ``choice``: ``(option, value)`` when users pick the kind with a command-line option
  (``("--qa-head", "sf")``); :func:`head_choices` lists an option's values,
  :func:`chosen_kind` maps a value to its kind.

``RobertaSpanModel.register_head(name, kind, **options)`` builds one and stores it under
``name`` (``classification_heads.<name>.*`` in checkpoints).

| kind | choice | module | inputs | output |
|---|---|---|---|---|
| ``sentence`` | ``--sentence-head span`` | :class:`SpanClassificationHead` (the paper's) | spans | logits ``[B, C]`` |
| ``plain`` | ``--sentence-head plain`` | fairseq's ``RobertaClassificationHead``, or :class:`PooledClassificationHead` | | logits ``[B, C]`` |
| ``token`` | ``--tagging-head token`` | ``modules.TokenTaggingHead`` | | logits ``[B, T, C]`` |
| ``sf`` | ``--tagging-head sf`` | ``modules.SpanTokenTaggingHead`` | spans | logits ``[B, T, C]`` |
| ``span`` | (span_labeling) | ``modules.SpanLabelingHead`` | words | ``(logits [B, W, L, C], valid [B, W, L])`` |
| ``span_pair`` | (span_pair_classification) | ``modules.SpanPairHeads`` | phrases | ``{"phrasal", "sentential"}`` |
| ``qa_boundary`` | ``--qa-head boundary`` | ``modules.BoundaryQAHead`` | passage | ``{"start", "end", "scores", "null"}`` |
| ``qa_boundary_sf`` | ``--qa-head sf`` | ``modules.SpanBoundaryQAHead`` | passage, spans | as ``qa_boundary`` |
| ``qa_span`` | ``--qa-head span`` | ``modules.SpanQAHead`` | passage | ``{"scores", "null"}`` |
| ``span_boundary`` | (roberta_spanbert) | ``modules.SpanBoundaryHead`` | masked_tokens | SBO logits ``[N, V]`` |

The two sentence heads (``sentence``, ``plain``; ``--sentence-head`` picks which one
``register_classification_head`` builds) have two forms. On a RoBERTa encoder they
read the ``<s>`` feature and carry their own dense + tanh layer. With BERT's pooler
(``--bert-pooler``) they read the pooled ``<s>`` (the model's pooler, passed as
``pooled [B, D]`` to heads whose ``reads_pooled`` is true: the one input the model makes
rather than takes from ``net_input``) and end in one linear layer: BERT's own
classifier, and the paper's span head over BERT's pooled output.
"""

from dataclasses import dataclass
from typing import Callable, Tuple

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.models.roberta.model import RobertaClassificationHead
from fairseq.modules.quant_noise import quant_noise as apply_quant_noise_
from fairseq.modules.transformer_sentence_encoder import init_bert_params

from span_plugin.modules import SpanBoundaryHead, build_span_encoder
from span_plugin.modules.qa_heads import BoundaryQAHead, SpanBoundaryQAHead, SpanQAHead
from span_plugin.modules.span_pair_heads import SpanPairHeads
from span_plugin.modules.tagging_heads import SpanLabelingHead, SpanTokenTaggingHead, TokenTaggingHead

HEAD_KINDS = {}  # kind -> HeadKind
HEAD_CHOICES = {}  # option -> {value: kind}: how users name kinds (--qa-head sf)


@dataclass(frozen=True)
class HeadKind:
    build: Callable  # (args, **options) -> nn.Module
    inputs: Tuple[str, ...]  # the net_input names its forward reads


def register_head_kind(kind, inputs=(), choice=None):
    """Decorator: ``build(args, **options) -> nn.Module`` becomes head kind ``kind``.

    Args:
        inputs: names of the ``net_input`` tensors the head reads (``("spans",)``); the
            model passes each by name and refuses a batch that lacks one.
        choice: ``(option, value)``: users choose this kind with ``option value``.
    """
    if isinstance(inputs, str):
        raise TypeError(f"head kind {kind!r}: inputs is a tuple of names, got {inputs!r}")

    def wrap(build):
        if kind in HEAD_KINDS:
            raise ValueError(f"head kind {kind!r} is registered twice")
        if choice is not None:
            option, value = choice
            values = HEAD_CHOICES.setdefault(option, {})
            if value in values:
                raise ValueError(f"{option} {value} already chooses head kind {values[value]!r}")
            values[value] = kind
        HEAD_KINDS[kind] = HeadKind(build, tuple(inputs))
        return build
    return wrap


def head_choices(option):
    """The values of ``option`` (``"--qa-head"``), in registration order."""
    return list(HEAD_CHOICES.get(option, {}))


def chosen_kind(option, value):
    """The head kind ``option value`` chooses (``--qa-head sf`` -> ``qa_boundary_sf``)."""
    values = HEAD_CHOICES.get(option, {})
    if value not in values:
        raise ValueError(f"unknown {option} {value!r}: expected one of {list(values)}")
    return values[value]


def build_head(kind, args, **options):
    """A head of ``kind`` built from the model arguments, carrying its kind's declared
    ``inputs`` (read by :func:`head_inputs`), its ``kind`` and the ``options`` it was
    built with (what an export writes to rebuild it without fairseq)."""
    if kind not in HEAD_KINDS:
        raise ValueError(f"unknown head kind {kind!r}: expected one of {sorted(HEAD_KINDS)}")
    head = HEAD_KINDS[kind].build(args, **options)
    head.inputs = HEAD_KINDS[kind].inputs
    head.kind = kind
    head.options = dict(options)
    return head


def head_inputs(head):
    """The ``net_input`` names ``head`` reads: its kind's declaration; none for a head
    not built here (fairseq's own, in a plain ``roberta`` checkpoint)."""
    return getattr(head, "inputs", ())


def _output_layer(input_dim, num_classes, q_noise, qn_block_size, do_spectral_norm):
    """fairseq's classification-head projection: Linear with optional quant noise or
    spectral norm."""
    out_proj = apply_quant_noise_(nn.Linear(input_dim, num_classes), q_noise, qn_block_size)
    if do_spectral_norm:
        if q_noise != 0:
            raise NotImplementedError("spectral norm together with quant noise")
        out_proj = torch.nn.utils.spectral_norm(out_proj)
    return out_proj


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

    def __init__(self, input_dim, span_dim, inner_dim, num_classes, span_encoder="cnn-cnn",
                 kernel_size=3, concat_cls=True, activation_fn="tanh", pooler_dropout=0.0,
                 span_dropout=0.0, pooled_cls=False, q_noise=0, qn_block_size=8,
                 do_spectral_norm=False):
        super().__init__()
        self.span_proj = nn.Linear(input_dim, span_dim) if span_dim != input_dim else None
        self.span_encoder = build_span_encoder(span_encoder, span_dim, kernel_size, span_dropout)
        self.concat_cls = concat_cls
        self.reads_pooled = pooled_cls and concat_cls
        width = span_dim + (input_dim if concat_cls else 0)
        self.input_dropout = nn.Dropout(p=span_dropout)
        self.dense = self.activation_fn = None
        if not pooled_cls:
            self.dense = nn.Linear(width, inner_dim)
            self.activation_fn = utils.get_activation_fn(activation_fn)
            width = inner_dim
        self.dropout = nn.Dropout(p=pooler_dropout)
        self.out_proj = _output_layer(width, num_classes, q_noise, qn_block_size, do_spectral_norm)

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

    def __init__(self, input_dim, num_classes, dropout=0.1, q_noise=0, qn_block_size=8,
                 do_spectral_norm=False):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.out_proj = _output_layer(input_dim, num_classes, q_noise, qn_block_size,
                                      do_spectral_norm)

    def forward(self, features, pooled=None, **unused):
        """``features [B, T, D]`` (unused), ``pooled [B, D]`` -> logits ``[B, C]``."""
        if pooled is None:
            raise ValueError("the plain head over BERT's pooler reads pooled=[B, D] "
                             "(the model's pooler output, --bert-pooler)")
        return self.out_proj(self.dropout(pooled))


@register_head_kind("sentence", inputs=("spans",), choice=("--sentence-head", "span"))
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
        span_dropout=args.span_dropout,
        pooled_cls=args.bert_pooler,
        q_noise=args.quant_noise_pq,
        qn_block_size=args.quant_noise_pq_block_size,
        do_spectral_norm=args.spectral_norm_classification_head,
    )


@register_head_kind("plain", choice=("--sentence-head", "plain"))
def plain_head(args, num_classes, inner_dim=None):
    """The baseline of the span head: BERT's classifier over its pooler, else exactly
    the head fairseq's own ``roberta`` registers (same arguments, same initialisation)."""
    noise = dict(q_noise=args.quant_noise_pq, qn_block_size=args.quant_noise_pq_block_size,
                 do_spectral_norm=args.spectral_norm_classification_head)
    if args.bert_pooler:
        return PooledClassificationHead(args.encoder_embed_dim, num_classes,
                                        dropout=args.pooler_dropout, **noise)
    return RobertaClassificationHead(
        input_dim=args.encoder_embed_dim,
        inner_dim=inner_dim or args.encoder_embed_dim,
        num_classes=num_classes,
        activation_fn=args.pooler_activation_fn,
        pooler_dropout=args.pooler_dropout,
        **noise,
    )


@register_head_kind("token", choice=("--tagging-head", "token"))
def token_head(args, num_classes):
    return TokenTaggingHead(args.encoder_embed_dim, num_classes, dropout=args.head_dropout)


@register_head_kind("sf", inputs=("spans",), choice=("--tagging-head", "sf"))
def span_token_head(args, num_classes):
    return SpanTokenTaggingHead(args.encoder_embed_dim, num_classes, span_dim=args.span_dim,
                                kernel_size=args.span_kernel_size, dropout=args.head_dropout)


@register_head_kind("span", inputs=("words",))
def span_labeling_head(args, num_classes, max_words=8):
    return SpanLabelingHead(args.encoder_embed_dim, num_classes, max_words=max_words,
                            dropout=args.head_dropout)


@register_head_kind("span_pair", inputs=("phrases",))
def span_pair_heads(args, phrase_classes, sentence_classes, features="max4", dropout=0.1):
    return SpanPairHeads(args.encoder_embed_dim, phrase_classes, sentence_classes, features,
                         dropout)


@register_head_kind("qa_boundary", inputs=("passage",), choice=("--qa-head", "boundary"))
def qa_boundary_head(args, max_answer_tokens=30):
    return BoundaryQAHead(args.encoder_embed_dim, max_answer_tokens, dropout=args.head_dropout)


@register_head_kind("qa_boundary_sf", inputs=("passage", "spans"),
                    choice=("--qa-head", "sf"))
def qa_boundary_sf_head(args, max_answer_tokens=30):
    return SpanBoundaryQAHead(args.encoder_embed_dim, max_answer_tokens, span_dim=args.span_dim,
                              kernel_size=args.span_kernel_size, dropout=args.head_dropout)


@register_head_kind("qa_span", inputs=("passage",), choice=("--qa-head", "span"))
def qa_span_head(args, max_answer_tokens=30, span_dim=128):
    return SpanQAHead(args.encoder_embed_dim, max_answer_tokens, span_dim=span_dim,
                      dropout=args.head_dropout)


@register_head_kind("span_boundary", inputs=("masked_tokens",))
def span_boundary_head(args, vocab_size):
    """SpanBERT's SBO head (``roberta_spanbert``), BERT-initialised as the rest of
    RoBERTa; its model calls it beside the masked-LM head."""
    head = SpanBoundaryHead(args.encoder_embed_dim, vocab_size, args.sbo_max_positions)
    head.apply(init_bert_params)
    return head
