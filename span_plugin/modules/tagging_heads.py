"""Heads for token-level tasks on token features (no fairseq import).

- :class:`TokenTaggingHead`: the plain baseline, a linear layer on every token.
- :class:`SpanTokenTaggingHead`: Span Fine-tuning at token level: the within-span CNN
  (kernel k, H -> H, ReLU) keeps its per-token output instead of pooling it; that is
  joined with the token features and classified.
- :class:`SpanLabelingHead`: span-based NER: every span of up to L words is scored
  against the entity types and "none" from its first and last token, a self-attentive
  pooling of its tokens and a width embedding.

Tagging heads label every token; the task reads the logits at each word's first
sub-token.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from span_plugin.modules.segment_conv import SegmentConv1d
from span_plugin.modules.span_extractors import build_span_extractor
from span_plugin.modules.span_layout import token_span_ids
from span_plugin.modules.span_pooling import gather_positions, span_attentive_pool


class TokenTaggingHead(nn.Module):
    """dropout -> Linear(D, C) on every token."""

    def __init__(self, input_dim, num_classes, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(input_dim, num_classes)

    def forward(self, features, **unused):
        """``features [B, T, D]`` -> logits ``[B, T, C]``."""
        return self.out_proj(self.dropout(features))


def within_span_features(features, spans, conv, span_proj=None):
    """Token-level Span Fine-tuning features: each token joined with the output of a
    convolution that runs inside its n-gram span.

    features: ``[B, T, D]``; spans: LongTensor ``[B, S, 2]``, a partition of the covered
    tokens (end exclusive, ``(0, 0)`` rows pad); conv: a :class:`SegmentConv1d` of width
    H; span_proj: None (H == D) or a Linear(D, H) applied before the convolution.
    Returns ``[B, T, D + H]``: ``[x_t; ReLU(conv(x)_t)]``, the second part zero for tokens
    in no span (specials, padding); neighbours in another span count as zero padding.
    """
    span_ids, _ = token_span_ids(spans, features.size(1))  # [B, T]
    x = features if span_proj is None else span_proj(features)
    within = torch.relu(conv(x, span_ids)).masked_fill((span_ids < 0).unsqueeze(-1), 0)
    return torch.cat([features, within], dim=-1)


class SpanTokenTaggingHead(nn.Module):
    """``[x_t; ReLU(SegmentConv1d(x)_t)]`` -> dropout -> Linear(D + H, C).

    The convolution runs within the n-gram span of each token (neighbours in another
    span count as zero padding, as in the sentence-level SF encoder); tokens in no span
    (specials, padding) get zeros. ``span_dim`` H != D puts a Linear(D, H) before it.
    """

    def __init__(self, input_dim, num_classes, span_dim=None, kernel_size=3, dropout=0.0):
        super().__init__()
        span_dim = span_dim or input_dim
        self.span_proj = nn.Linear(input_dim, span_dim) if span_dim != input_dim else None
        self.conv = SegmentConv1d(span_dim, kernel_size)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(input_dim + span_dim, num_classes)

    def forward(self, features, spans, **unused):
        """``features [B, T, D]``, ``spans`` LongTensor ``[B, S, 2]`` (a partition of
        the covered tokens, as span files hold) -> logits ``[B, T, C]``."""
        joined = within_span_features(features, spans, self.conv, self.span_proj)
        return self.out_proj(self.dropout(joined))


def enumerate_word_spans(words, max_words):
    """All spans of 1..L consecutive words.

    Args:
        words: LongTensor ``[B, W, 2]``, (start, end) token offsets of each word;
            ``(0, 0)`` rows (padding) come after an example's words.
        max_words: L.

    Returns:
        spans: LongTensor ``[B, W, L, 2]``: candidate (i, w) covers words i .. i + w,
            from the start of word i to the end of word i + w; ``(0, 0)`` where invalid.
        valid: BoolTensor ``[B, W, L]``: words i .. i + w all exist.
    """
    batch, num_words, _ = words.shape
    word_ok = words[..., 0] < words[..., 1]  # [B, W]
    count = word_ok.sum(-1)  # words per example
    last = torch.arange(num_words, device=words.device).view(1, -1, 1) + torch.arange(
        max_words, device=words.device).view(1, 1, -1)  # [1, W, L]: index of the last word
    valid = (last < count.view(-1, 1, 1)) & word_ok.unsqueeze(-1)
    end = words[..., 1].gather(1, last.clamp(max=num_words - 1).flatten(1).expand(batch, -1))
    end = end.view(batch, num_words, max_words)
    start = words[..., 0].unsqueeze(-1).expand(-1, -1, max_words)
    spans = torch.stack([start, end], -1) * valid.unsqueeze(-1)
    return spans, valid


class SpanLabelingHead(nn.Module):
    """Scores every span of up to ``max_words`` words against C labels (index 0:
    "none", then the entity types).

    A span's representation ``[x_first; x_last; attn(x); width]`` (the endpoint,
    self-attentive and width span extractors) goes through Linear -> GELU -> dropout
    -> Linear(inner, C). The first Linear is linear in each part, so it is applied to
    the token features once (``token_proj``, three blocks of width ``inner``) and its
    outputs are gathered per span (the endpoint kernel) and attention-pooled (the
    self-attentive kernel, logits ``score`` from the features); the width embedding
    (:class:`WidthSpanExtractor`, in words) lives in the same space. This is the same
    function as concatenating first, at a cost per token instead of per span.
    """

    def __init__(self, input_dim, num_classes, max_words=8, inner_dim=None, dropout=0.0):
        super().__init__()
        inner_dim = inner_dim or input_dim
        self.max_words = max_words
        self.inner_dim = inner_dim
        self.token_proj = nn.Linear(input_dim, 3 * inner_dim)  # first, last, content blocks
        self.score = nn.Linear(input_dim, 1)  # self-attention logits
        self.width = build_span_extractor("width", inner_dim, max_width=max_words)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(inner_dim, num_classes)

    def word_widths(self, device):
        """``[1, L, 2]``: word spans ``(0, w + 1)`` of the L widths."""
        width = torch.arange(1, self.max_words + 1, device=device)
        return torch.stack([torch.zeros_like(width), width], -1).unsqueeze(0)

    def forward(self, features, words, **unused):
        """
        Args:
            features: ``[B, T, D]``.
            words: LongTensor ``[B, W, 2]``, token offsets of the words.

        Returns:
            logits ``[B, W, L, C]`` (candidate (i, w): words i .. i + w) and valid
            BoolTensor ``[B, W, L]``.
        """
        batch, num_words, _ = words.shape
        spans, valid = enumerate_word_spans(words, self.max_words)
        flat = spans.view(batch, -1, 2)  # [B, K, 2], K = W * L
        first, last, content = self.token_proj(features).split(self.inner_dim, dim=-1)
        hidden = gather_positions(first, flat[..., 0]) + gather_positions(last, (flat[..., 1] - 1).clamp(min=0))
        hidden = hidden + span_attentive_pool(content, self.score(features).squeeze(-1), flat)
        # The L candidate widths as word spans (0, w + 1): [1, L, inner], broadcast over i.
        widths = self.width(features, self.word_widths(words.device))
        hidden = hidden.view(batch, num_words, self.max_words, -1) + widths
        hidden = self.dropout(F.gelu(hidden))
        return self.out_proj(hidden), valid
