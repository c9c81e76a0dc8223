"""From head outputs to entities, shared by the criteria, the hub and the CoNLL writer.

Entities are ``(first word, last word + 1, type name)`` per example. Tagging heads
give a tag per word (read at its first sub-token) and entities are read from the tags
in one of two metric modes (:data:`METRIC_MODES`, :func:`entities_of`):

- ``default``: conlleval's chunk rules (:func:`span_plugin.formats.tags.entities`,
  seqeval's default mode): an ``I-X`` that continues no entity of type X starts one;
- ``strict``: seqeval's ``mode="strict", scheme=IOB2``: an entity is a ``B-X``
  followed by any ``I-X``; an ``I-`` that does not continue its type's entity belongs
  to none.

Predictions are never repaired. A tagging head's tags come from its word scores by a
token decoding (:data:`TOKEN_DECODINGS`, :mod:`span_plugin.modules.tag_decoding`):
``argmax`` per word, which can be ill-formed, or ``viterbi``, the best well-formed IOB2
sequence (both modes then read it alike). The span head gives entities directly
(:data:`OVERLAPS`): ``flat``, the best non-overlapping spans (the metric's: CoNLL is
flat), or ``nested``, every span whose best type reaches a probability threshold, nested
ones included (for output only).
"""

import math

import torch
import torch.nn.functional as F

from span_plugin.formats import tags as T
from span_plugin.modules.span_decoding import best_non_overlapping, nested_spans
from span_plugin.modules.tag_decoding import decode_tags

METRIC_MODES = ("default", "strict")
OVERLAPS = ("flat", "nested")
DEFAULT_SPAN_THRESHOLD = 0.5  # nested: a type at least as likely as none
# What a task config made before a setting existed was scored with.
LEGACY_SETTINGS = {"metric_mode": "default", "token_decoding": "argmax"}


def task_setting(cfg, name):
    """The task config's ``metric_mode`` or ``token_decoding``; a config without the
    field (made before it existed, e.g. a legacy argparse one) gets what it was scored
    with then (:data:`LEGACY_SETTINGS`). fairseq gives checkpoints of older versions of
    these tasks the dataclass defaults when it loads them, so this applies to the rest."""
    return str(getattr(cfg, name, None) or LEGACY_SETTINGS[name])


def strict_entities(tags):
    """Entities of an IOB2 tag sequence as seqeval's strict IOB2 mode reads them:
    ``[(start, end, type)]``, end exclusive; ``B-X`` opens one, each following ``I-X``
    extends it, anything else ends it; an ``I-`` that opens nothing is no entity."""
    out, start, kind = [], None, None
    for i, tag in enumerate(list(tags) + [T.OUTSIDE]):
        prefix, k = T.split_tag(tag)
        if kind is not None and prefix == "I" and k == kind:
            continue
        if kind is not None:
            out.append((start, i, kind))
            kind = None
        if prefix == "B":
            start, kind = i, k
        elif prefix not in ("I", T.OUTSIDE):
            raise ValueError(f"tag {tag!r} at {i}: not an IOB2 tag (O, B-X, I-X)")
    return out


def entities_of(tags, mode="default"):
    """Entities of one tag sequence in a metric mode (module docstring)."""
    if mode == "default":
        return T.entities(tags)
    if mode == "strict":
        return strict_entities(tags)
    raise ValueError(f"metric mode {mode!r}: expected one of {METRIC_MODES}")


def word_logits(token_logits, words):
    """Logits ``[B, T, C]`` at each word's first sub-token -> ``[B, W, C]``
    (padding words read position 0)."""
    index = words[..., 0].clamp(min=0).unsqueeze(-1).expand(-1, -1, token_logits.size(-1))
    return token_logits.gather(1, index)


def word_counts(words):
    """Words per example: LongTensor ``[B]`` from ``words [B, W, 2]``."""
    return (words[..., 0] < words[..., 1]).sum(-1)


def tagging_entities(token_logits, words, tag_names, mode="default", decoding="viterbi"):
    """``[B, T, C]``, ``[B, W, 2]`` -> (tags per example, entities per example): tags by
    token ``decoding`` (:data:`TOKEN_DECODINGS`) of the word log-probabilities, entities
    read from them in metric ``mode``."""
    counts = word_counts(words)
    scores = F.log_softmax(word_logits(token_logits, words).float(), dim=-1)
    preds = decode_tags(scores, counts, tag_names, decoding).tolist()
    tags = [[tag_names[i] for i in p[:n]] for p, n in zip(preds, counts.tolist())]
    return tags, [entities_of(t, mode) for t in tags]


def labeling_entities(logits, valid, types, overlap="flat", threshold=None):
    """Span-head logits ``[B, W, L, C]`` (class 0: none) -> entities per example.

    ``overlap`` (:data:`OVERLAPS`): ``flat``, the non-overlapping set with the largest
    total ``log p(type) - log p(none)`` (``threshold`` must be None); ``nested``, every
    candidate whose best type has probability >= ``threshold`` (default
    :data:`DEFAULT_SPAN_THRESHOLD`), less those crossing a more probable one (disjoint
    and nested spans are kept; :func:`span_plugin.modules.span_decoding.nested_spans`).
    """
    check_span_output(overlap, threshold)
    lprobs = F.log_softmax(logits.float(), dim=-1)
    best, kind = lprobs[..., 1:].max(-1)
    if overlap == "flat":
        chosen = best_non_overlapping(best - lprobs[..., 0], valid)
    else:
        threshold = DEFAULT_SPAN_THRESHOLD if threshold is None else threshold
        chosen = nested_spans(best, valid, math.log(threshold))
    out = [[] for _ in range(logits.size(0))]
    for b, i, w in chosen.nonzero().tolist():
        out[b].append((i, i + w + 1, types[int(kind[b, i, w])]))
    return [sorted(e) for e in out]


def check_span_output(overlap, threshold):
    """A clear error for an unknown ``overlap`` or a threshold it does not take."""
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap {overlap!r}: expected one of {OVERLAPS}")
    if threshold is not None:
        if overlap != "nested":
            raise ValueError(f"a span threshold ({threshold}) applies to overlap 'nested' "
                             f"only; flat decoding keeps the spans a type beats none in")
        if not 0 < threshold <= 1:
            raise ValueError(f"span threshold {threshold}: expected a probability in (0, 1]")


def match_counts(predicted, gold):
    """Exact-match counts over examples: ``(true positives, predicted, gold)``; an
    entity matches when its boundaries and type are equal (CoNLL)."""
    tp = sum(len(set(p) & set(g)) for p, g in zip(predicted, gold))
    return tp, sum(len(set(p)) for p in predicted), sum(len(set(g)) for g in gold)


def gold_entities(target, tag_names, mode="default"):
    """Word tag ids ``[B, W]`` (padding -100) -> entities per example, read in metric
    ``mode`` (folders store well-formed IOB2: both modes read the same)."""
    rows = [[tag_names[i] for i in r if i >= 0] for r in target.tolist()]
    return [entities_of(r, mode) for r in rows]


def prf(tp, n_pred, n_gold):
    """Precision, recall, F1 (fractions; 0 when undefined), as seqeval computes them."""
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def labeling_targets(entities, valid):
    """Gold label of every candidate: ``entities [B, E, 3]`` (first word, last + 1,
    type; (0, 0, 0) padding), ``valid [B, W, L]`` -> LongTensor ``[B, W, L]`` (0: none)
    and the number of gold entities longer than L words (no candidate holds them)."""
    batch, num_words, max_words = valid.shape
    start, end, kind = entities.unbind(-1)
    width = end - start
    fits = (width > 0) & (width <= max_words)
    target = torch.zeros_like(valid, dtype=torch.long)
    rows = torch.arange(batch, device=valid.device).unsqueeze(-1).expand_as(start)
    target[rows[fits], start[fits], width[fits] - 1] = kind[fits]
    return target, int((width > max_words).sum())
