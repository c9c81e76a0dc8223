"""Answer-span heads of extractive QA (:class:`BoundaryQAHead`, :class:`SpanBoundaryQAHead`,
:class:`SpanQAHead`), scoring every candidate of a window on one grid so that decoding is
the same for all: ``scores [B, T, A]`` (answer from position i to i + w inclusive, -inf
unless inside the passage) and ``null [B]``; targets LongTensor ``[B, 2]`` (start, last),
(0, 0) for no answer. Each head's scores and loss: docs/QA.md, section "Module notes"."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from span_plugin.modules.segment_conv import SegmentConv1d
from span_plugin.modules.span_extractors import build_span_extractor
from span_plugin.modules.tagging_heads import within_span_features

NEG_INF = float("-inf")


def passage_mask(passage, length):
    """BoolTensor ``[B, T]``: positions ``passage[b, 0] <= t < passage[b, 1]``."""
    t = torch.arange(length, device=passage.device)
    return (t >= passage[:, :1]) & (t < passage[:, 1:])


def candidate_mask(passage, length, max_answer_tokens):
    """BoolTensor ``[B, T, A]``: span (t, t + w) lies inside the passage."""
    t = torch.arange(length, device=passage.device).view(1, -1, 1)
    w = torch.arange(max_answer_tokens, device=passage.device).view(1, 1, -1)
    p0, p1 = passage[:, 0].view(-1, 1, 1), passage[:, 1].view(-1, 1, 1)
    return (t >= p0) & (t + w < p1)


class BoundaryQAHead(nn.Module):
    """Start and end logits per token.

    forward(features ``[B, T, D]``, passage ``[B, 2]``) -> dict ``start``, ``end``
    ``[B, T]`` (float32, -inf outside the passage except ``<s>``), ``scores``
    ``[B, T, A]``, ``null`` ``[B]``.
    """

    def __init__(self, dim, max_answer_tokens=30, dropout=0.1, in_dim=None):
        super().__init__()
        self.max_answer_tokens = max_answer_tokens
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(in_dim or dim, 2)  # in_dim: a subclass's wider features

    def forward(self, features, passage, **unused):
        return self.grid(self.out_proj(self.dropout(features)), passage)

    def grid(self, logits, passage):
        """Start/end ``logits [B, T, 2]`` -> the output dict (see the class)."""
        length, a = logits.size(1), self.max_answer_tokens
        logits = logits.float()
        inside = passage_mask(passage, length)
        allowed = inside.clone()
        allowed[:, 0] = True  # <s>: no answer
        start, end = logits.masked_fill(~allowed.unsqueeze(-1), NEG_INF).unbind(-1)
        in_start = start.masked_fill(~inside, NEG_INF)
        ends = F.pad(end.masked_fill(~inside, NEG_INF), (0, a - 1), value=NEG_INF)
        scores = in_start.unsqueeze(-1) + ends.unfold(1, a, 1)  # [B, T, A]
        return {"start": start, "end": end, "scores": scores, "null": start[:, 0] + end[:, 0]}

    def loss(self, output, target):
        """Summed over windows: ``(CE(start) + CE(end)) / 2``; returns ``(loss, 0)``
        (every answer is reachable)."""
        loss = (F.cross_entropy(output["start"], target[:, 0], reduction="sum")
                + F.cross_entropy(output["end"], target[:, 1], reduction="sum")) / 2
        return loss, 0


class SpanBoundaryQAHead(BoundaryQAHead):
    """Start and end logits per token from ``[x_t; ReLU(SegmentConv1d(x)_t)]``, the
    convolution running inside each token's n-gram span (``span_dim`` H != D puts a
    Linear(D, H) before it): dropout -> Linear(D + H, 2).

    forward(features ``[B, T, D]``, passage ``[B, 2]``, spans LongTensor ``[B, S, 2]``)
    -> the dict of :class:`BoundaryQAHead`; its loss too.
    """

    def __init__(self, dim, max_answer_tokens=30, span_dim=None, kernel_size=3, dropout=0.1):
        span_dim = span_dim or dim
        super().__init__(dim, max_answer_tokens, dropout, in_dim=dim + span_dim)
        self.span_proj = nn.Linear(dim, span_dim) if span_dim != dim else None
        self.conv = SegmentConv1d(span_dim, kernel_size)

    def forward(self, features, passage, spans, **unused):
        joined = within_span_features(features, spans, self.conv, self.span_proj)
        return self.grid(self.out_proj(self.dropout(joined)), passage)


class SpanQAHead(nn.Module):
    """Candidate spans of up to A tokens scored from their representations.

    forward(features ``[B, T, D]``, passage ``[B, 2]``) -> dict ``scores``
    ``[B, T, A]`` (float32), ``null`` ``[B]``. Only the candidates inside the passage
    are represented (packed to ``[B, K, 3 span_dim]``).
    """

    def __init__(self, dim, max_answer_tokens=30, span_dim=128, dropout=0.1):
        super().__init__()
        self.max_answer_tokens = max_answer_tokens
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(dim, span_dim)
        self.endpoint = build_span_extractor("endpoint", span_dim)
        self.attentive = build_span_extractor("self-attentive", span_dim)
        width = self.endpoint.output_dim + self.attentive.output_dim
        self.dense = nn.Linear(width, span_dim)
        self.out_proj = nn.Linear(span_dim, 1)
        self.null_proj = nn.Linear(dim, 1)

    def forward(self, features, passage, **unused):
        batch, length, a = features.size(0), features.size(1), self.max_answer_tokens
        features = self.dropout(features)
        x = self.proj(features)
        valid = candidate_mask(passage, length, a).view(batch, -1)  # [B, T * A]
        count = valid.sum(1)
        k = max(int(count.max()), 1)
        # valid candidates first, in grid order; the rest pad (empty spans, masked below)
        order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)[:, :k]
        kept = torch.arange(k, device=x.device).unsqueeze(0) < count.unsqueeze(1)
        start = order // a
        spans = torch.stack([start, start + order % a + 1], -1) * kept.unsqueeze(-1)
        reps = torch.cat([self.endpoint(x, spans), self.attentive(x, spans)], -1)
        hidden = self.dropout(F.gelu(self.dense(reps)))
        score = self.out_proj(hidden).squeeze(-1).float().masked_fill(~kept, NEG_INF)
        grid = torch.full((batch, length * a), NEG_INF, device=x.device)
        grid = grid.scatter(1, order, score)
        return {"scores": grid.view(batch, length, a),
                "null": self.null_proj(features[:, 0]).squeeze(-1).float()}

    def loss(self, output, target):
        """Summed over windows: cross-entropy over (no answer, every candidate). A gold
        answer longer than A tokens cannot be scored: its window is left out and counted.
        Returns ``(loss, unreachable windows)``."""
        scores, null = output["scores"], output["null"]
        batch, _, a = scores.shape
        logits = torch.cat([null.unsqueeze(1), scores.view(batch, -1)], 1)
        start, last = target.unbind(-1)
        width = last - start
        answered = (start > 0)
        reachable = ~answered | (width < a)
        index = torch.where(answered, 1 + start * a + width.clamp(0, a - 1),
                            torch.zeros_like(start))
        index = index.masked_fill(~reachable, -100)
        loss = F.cross_entropy(logits, index, ignore_index=-100, reduction="sum")
        return loss, int((~reachable).sum())
