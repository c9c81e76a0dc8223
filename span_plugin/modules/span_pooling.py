"""Pool arbitrary (start, end) spans of token features: spans may overlap, nest, repeat
or be empty, unlike the partition of ``span_layout`` (the SF fast path, which stays as
it is).

Spans arrive as a LongTensor ``[B, K, 2]`` of ``(start, end)`` positions into the T axis,
end exclusive; offsets are clamped to ``[0, T]``; a row with ``start >= end`` is empty
and pools to zeros. Every function is vectorised over examples and spans:

- ``span_mean`` / ``span_attentive_pool``: a ``[B, K, T]`` weight matrix times the
  features (one batched matrix product; T is short, and no member list is built);
- ``span_max`` (and any pooler of packed segments, :func:`pool_span_members`): the
  members of all spans packed into one sequence ``[M, H]`` (M = total width) and
  reduced with :func:`segment_max`;
- ``span_endpoints``: two gathers.

These are the kernels of :mod:`span_extractors` (one module per scheme, one registry).
"""

import torch

from span_plugin.modules.segment_pooling import segment_max


def span_bounds(spans: torch.Tensor, seq_len: int):
    """``spans [B, K, 2]`` -> ``(start, end)`` LongTensors ``[B, K]`` clamped to
    ``[0, T]``, with ``end = start`` for empty rows."""
    start, end = spans.long().clamp(0, seq_len).unbind(-1)
    return start, torch.maximum(start, end)


def span_membership(spans: torch.Tensor, seq_len: int) -> torch.Tensor:
    """BoolTensor ``[B, K, T]``: token t is inside span k."""
    start, end = span_bounds(spans, seq_len)
    position = torch.arange(seq_len, device=spans.device)
    return (position >= start.unsqueeze(-1)) & (position < end.unsqueeze(-1))


def span_mean(values: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
    """Mean of each span's tokens: ``values [B, T, H]`` -> ``[B, K, H]`` (zeros for
    an empty span)."""
    member = span_membership(spans, values.size(1)).to(values.dtype)
    width = member.sum(-1, keepdim=True).clamp(min=1)
    return torch.bmm(member / width, values)


def span_attentive_pool(values: torch.Tensor, scores: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores [B, T]`` within each span, weighted sum of ``values [B, T, H]``
    -> ``[B, K, H]`` (zeros for an empty span). The softmax runs in float32 at least,
    so fp16 logits cannot overflow in exp."""
    member = span_membership(spans, values.size(1))
    logits = scores.to(torch.promote_types(scores.dtype, torch.float32)).unsqueeze(1)
    # Not -inf: an empty span's row would be all -inf and turn into nan.
    logits = logits.masked_fill(~member, torch.finfo(logits.dtype).min)
    weights = torch.softmax(logits, dim=-1) * member
    return torch.bmm(weights.to(values.dtype), values)


def pack_span_members(spans: torch.Tensor, seq_len: int):
    """Every member token of every span, as one packed sequence.

    Returns ``(token_index [M], member_span [M])``: flat indices into ``B * T`` and
    the flat span index into ``B * K`` each member belongs to, M the sum of the span
    widths. (The size M makes the host wait for the device once.)
    """
    num_spans = spans.size(1)
    start, end = span_bounds(spans, seq_len)
    width = (end - start).flatten()
    member_span = torch.repeat_interleave(torch.arange(width.numel(), device=spans.device), width)
    first = torch.cumsum(width, 0) - width  # where each span's members begin in the pack
    offset = torch.arange(member_span.numel(), device=spans.device) - first[member_span]
    example = torch.div(member_span, num_spans, rounding_mode="floor")
    return example * seq_len + start.flatten()[member_span] + offset, member_span


def pool_span_members(values: torch.Tensor, spans: torch.Tensor, pool_segments) -> torch.Tensor:
    """Pool arbitrary spans with a pooler of packed segments: every span's tokens are
    laid side by side as one segment of a packed sequence ``[1, M, H]``, so spans may
    overlap (their tokens are repeated).

    Args:
        values: ``[B, T, H]``; spans: ``[B, K, 2]``.
        pool_segments: ``(values [1, M, H], segment_ids [1, M], S) -> [1, S, H']``
            (as :func:`segment_max`), zeros for an empty segment.

    Returns:
        ``[B, K, H']``.
    """
    batch, seq_len, _ = values.shape
    num_spans = spans.size(1)
    token_index, member_span = pack_span_members(spans, seq_len)
    example = torch.div(token_index, seq_len, rounding_mode="floor")
    members = values[example, token_index - example * seq_len]  # [M, H], no copy of values
    pooled = pool_segments(members.unsqueeze(0), member_span.unsqueeze(0), batch * num_spans)
    return pooled.view(batch, num_spans, -1)


def span_max(values: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
    """Elementwise max over each span's tokens: ``[B, T, H]`` -> ``[B, K, H]`` (zeros
    for an empty span; gradient to the arg-max as :func:`segment_max`)."""
    return pool_span_members(values, spans, segment_max)


def gather_positions(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values [B, T, H]`` at positions ``index [B, K]`` -> ``[B, K, H]``. A gather
    (its backward is a scatter-add), not advanced indexing, whose backward sorts."""
    return values.gather(1, index.unsqueeze(-1).expand(-1, -1, values.size(-1)))


def span_endpoints(values: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
    """First and last token of each span: ``[B, T, H]`` -> ``[B, K, 2, H]`` (zeros for
    an empty span)."""
    start, end = span_bounds(spans, values.size(1))
    nonempty = (end > start).unsqueeze(-1).unsqueeze(-1)
    last = max(values.size(1) - 1, 0)
    ends = [gather_positions(values, i.clamp(max=last)) for i in (start, (end - 1).clamp(min=0))]
    return torch.stack(ends, 2) * nonempty
