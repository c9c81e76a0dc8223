"""Every head kind built from the model's arguments, in pure torch: ``build_head_module
(kind, args, **options)``. The one mapping from model arguments (``--span-dim``,
``--head-dropout``, ...) and a head's options (``num_classes``, ``max_answer_tokens``,
...) to a module, shared by fairseq's models (:mod:`span_plugin.models.heads` registers
the kinds, declares their inputs and adds fairseq's training-only parts) and the
fairseq-free loader of exported folders (:mod:`span_plugin.portable`).

``args``: any object with the model's arguments as attributes (fairseq's cfg.model, or a
namespace of an exported folder's ``model_args``); :data:`MODEL_DEFAULTS` holds what a
span model sets when an argument is missing.
"""

from span_plugin.modules.qa_heads import BoundaryQAHead, SpanBoundaryQAHead, SpanQAHead
from span_plugin.modules.sentence_heads import (PlainClassificationHead, PooledClassificationHead,
                                                SpanClassificationHead, SpanHeadOptions)
from span_plugin.modules.span_boundary import SpanBoundaryHead
from span_plugin.modules.span_pair_heads import SpanPairHeads
from span_plugin.modules.tagging_heads import SpanLabelingHead, SpanTokenTaggingHead, TokenTaggingHead

# The span model's defaults: models.roberta_span.span_defaults sets the span settings from
# here; models.bert_attach and fairseq's RoBERTa the others, to these values.
MODEL_DEFAULTS = {
    "span_encoder": "cnn-cnn", "span_kernel_size": 3, "span_dim": None,
    "no_span_cls_concat": False, "head_dropout": 0.1, "span_dropout": 0.1,
    "bert_pooler": False, "bert_token_types": False, "pooler_activation_fn": "tanh",
    "pooler_dropout": 0.0, "spectral_norm_classification_head": False,
}


def _sentence(args, num_classes, inner_dim=None):
    return SpanClassificationHead(
        input_dim=args.encoder_embed_dim,
        span_dim=args.span_dim or args.encoder_embed_dim,
        inner_dim=inner_dim or args.encoder_embed_dim,
        num_classes=num_classes,
        options=SpanHeadOptions(
            span_encoder=args.span_encoder,
            kernel_size=args.span_kernel_size,
            concat_cls=not args.no_span_cls_concat,
            activation_fn=args.pooler_activation_fn,
            pooler_dropout=args.pooler_dropout,
            span_dropout=args.span_dropout,
            pooled_cls=args.bert_pooler,
            do_spectral_norm=args.spectral_norm_classification_head,
        ),
    )


def _plain(args, num_classes, inner_dim=None):
    """BERT's classifier over its pooler, else the plain RoBERTa head."""
    if args.bert_pooler:
        return PooledClassificationHead(args.encoder_embed_dim, num_classes,
                                        dropout=args.pooler_dropout,
                                        do_spectral_norm=args.spectral_norm_classification_head)
    return PlainClassificationHead(args.encoder_embed_dim, inner_dim or args.encoder_embed_dim,
                                   num_classes, activation_fn=args.pooler_activation_fn,
                                   pooler_dropout=args.pooler_dropout,
                                   do_spectral_norm=args.spectral_norm_classification_head)


def _token(args, num_classes):
    return TokenTaggingHead(args.encoder_embed_dim, num_classes, dropout=args.head_dropout)


def _span_token(args, num_classes):
    return SpanTokenTaggingHead(args.encoder_embed_dim, num_classes, span_dim=args.span_dim,
                                kernel_size=args.span_kernel_size, dropout=args.head_dropout)


def _span_labeling(args, num_classes, max_words=8):
    return SpanLabelingHead(args.encoder_embed_dim, num_classes, max_words=max_words,
                            dropout=args.head_dropout)


def _span_pair(args, phrase_classes, sentence_classes, features="max4", dropout=0.1):
    return SpanPairHeads(args.encoder_embed_dim, phrase_classes, sentence_classes, features,
                         dropout)


def _qa_boundary(args, max_answer_tokens=30):
    return BoundaryQAHead(args.encoder_embed_dim, max_answer_tokens, dropout=args.head_dropout)


def _qa_boundary_sf(args, max_answer_tokens=30):
    return SpanBoundaryQAHead(args.encoder_embed_dim, max_answer_tokens, span_dim=args.span_dim,
                              kernel_size=args.span_kernel_size, dropout=args.head_dropout)


def _qa_span(args, max_answer_tokens=30, span_dim=128):
    return SpanQAHead(args.encoder_embed_dim, max_answer_tokens, span_dim=span_dim,
                      dropout=args.head_dropout)


def _span_boundary(args, vocab_size):
    return SpanBoundaryHead(args.encoder_embed_dim, vocab_size, args.sbo_max_positions)


HEAD_BUILDERS = {
    "sentence": _sentence,
    "plain": _plain,
    "token": _token,
    "sf": _span_token,
    "span": _span_labeling,
    "span_pair": _span_pair,
    "qa_boundary": _qa_boundary,
    "qa_boundary_sf": _qa_boundary_sf,
    "qa_span": _qa_span,
    "span_boundary": _span_boundary,
}


def build_head_module(kind, args, **options):
    """The module of head ``kind`` (a key of :data:`HEAD_BUILDERS`) for the model
    arguments ``args`` and the head's ``options``."""
    if kind not in HEAD_BUILDERS:
        raise ValueError(f"unknown head kind {kind!r}: expected one of {sorted(HEAD_BUILDERS)}")
    return HEAD_BUILDERS[kind](args, **options)
