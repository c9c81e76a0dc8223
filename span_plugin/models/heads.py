"""The heads a span model can carry: one registry of head kinds (:func:`register_head_kind`,
``build(args, **options) -> nn.Module`` with the ``net_input`` names it reads and the
option value that picks it), built by :func:`build_head`; the model calls
``head(features [B, T, D], **inputs)``. The modules are pure torch
(:mod:`span_plugin.modules.head_builders`); a kind here adds fairseq's training-only
parts. The table of kinds, inputs and outputs: docs/TASK_MODEL.md, section
"Module notes"."""

from dataclasses import dataclass
from typing import Callable, Tuple

from fairseq.modules.quant_noise import quant_noise as apply_quant_noise_
from fairseq.modules.transformer_sentence_encoder import init_bert_params

from span_plugin.modules.head_builders import build_head_module

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


def _with_quant_noise(head, args):
    """fairseq's quant noise on the head's projection (``--quant-noise-pq``, training
    only: in eval the projection computes as without it)."""
    q_noise = args.quant_noise_pq
    if q_noise:
        if args.spectral_norm_classification_head:
            raise NotImplementedError("spectral norm together with quant noise")
        head.out_proj = apply_quant_noise_(head.out_proj, q_noise, args.quant_noise_pq_block_size)
    return head


@register_head_kind("sentence", inputs=("spans",), choice=("--sentence-head", "span"))
def sentence_head(args, num_classes, inner_dim=None):
    return _with_quant_noise(
        build_head_module("sentence", args, num_classes=num_classes, inner_dim=inner_dim), args)


@register_head_kind("plain", choice=("--sentence-head", "plain"))
def plain_head(args, num_classes, inner_dim=None):
    """The baseline of the span head: BERT's classifier over its pooler, else the head
    fairseq's own ``roberta`` registers (same arguments, parameters and initialisation)."""
    return _with_quant_noise(
        build_head_module("plain", args, num_classes=num_classes, inner_dim=inner_dim), args)


@register_head_kind("token", choice=("--tagging-head", "token"))
def token_head(args, num_classes):
    return build_head_module("token", args, num_classes=num_classes)


@register_head_kind("sf", inputs=("spans",), choice=("--tagging-head", "sf"))
def span_token_head(args, num_classes):
    return build_head_module("sf", args, num_classes=num_classes)


@register_head_kind("span", inputs=("words",))
def span_labeling_head(args, num_classes, max_words=8):
    return build_head_module("span", args, num_classes=num_classes, max_words=max_words)


@register_head_kind("span_pair", inputs=("phrases",))
def span_pair_heads(args, phrase_classes, sentence_classes, features="max4", dropout=0.1):
    return build_head_module("span_pair", args, phrase_classes=phrase_classes,
                             sentence_classes=sentence_classes, features=features,
                             dropout=dropout)


@register_head_kind("qa_boundary", inputs=("passage",), choice=("--qa-head", "boundary"))
def qa_boundary_head(args, max_answer_tokens=30):
    return build_head_module("qa_boundary", args, max_answer_tokens=max_answer_tokens)


@register_head_kind("qa_boundary_sf", inputs=("passage", "spans"),
                    choice=("--qa-head", "sf"))
def qa_boundary_sf_head(args, max_answer_tokens=30):
    return build_head_module("qa_boundary_sf", args, max_answer_tokens=max_answer_tokens)


@register_head_kind("qa_span", inputs=("passage",), choice=("--qa-head", "span"))
def qa_span_head(args, max_answer_tokens=30, span_dim=128):
    return build_head_module("qa_span", args, max_answer_tokens=max_answer_tokens,
                             span_dim=span_dim)


@register_head_kind("span_boundary", inputs=("masked_tokens",))
def span_boundary_head(args, vocab_size):
    """SpanBERT's SBO head (``roberta_spanbert``), BERT-initialised as the rest of
    RoBERTa; its model calls it beside the masked-LM head."""
    head = build_head_module("span_boundary", args, vocab_size=vocab_size)
    head.apply(init_bert_params)
    return head
