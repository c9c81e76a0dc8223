"""Pool a packed sequence into one vector per segment, with masks.

Both poolers take values ``[B, N, H]`` and segment ids ``[B, N]`` (``< 0``: the
position belongs to no segment and is never read) and return ``[B, S, H]``. A
segment that receives no position comes out as zeros. Reductions go through
``scatter_reduce`` / ``scatter_add`` into a spare slot S for unsegmented positions,
which is dropped, so padding can never win a max nor take attention weight. A max with
one segment a row (the sentence level of the span encoders) is a masked ``amax``
instead: the same result and gradient without a scatter (on a GPU no atomics; timings in
benchmarks/RESULTS.md, section "Re-run after segment max's one-segment path").
"""

import torch


def _scatter_index(segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Segment ids with "no segment" sent to the spare slot ``num_segments``."""
    return torch.where(segment_ids >= 0, segment_ids, num_segments)


def segment_max(values: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Elementwise max over each segment's positions.

    Args:
        values: ``[B, N, H]``.
        segment_ids: LongTensor ``[B, N]``.
        num_segments: S.

    Returns:
        ``[B, S, H]``; zeros for a segment with no position. Only members of a
        segment enter its max (``include_self=False``), so the result is exact in
        fp16/bf16. Gradient: to the arg-max; tied maxima share it evenly (as
        ``Tensor.amax``).
    """
    if num_segments == 1 and values.size(1) > 0:
        return _masked_max(values, segment_ids >= 0)
    batch, _, dim = values.shape
    slots = _scatter_index(segment_ids, num_segments)  # [B, N]
    index = slots.unsqueeze(-1).expand_as(values)
    # scatter_reduce's backward counts the initial value among a segment's tied maxima
    # even with include_self=False: starting from zeros, a segment whose max is 0 gave
    # its members half their gradient. Starting from the lowest finite value (never
    # infinite: fp16-safe) only a max equal to it could tie; empty segments are zeroed.
    pooled = values.new_full((batch, num_segments + 1, dim), torch.finfo(values.dtype).min)
    pooled = pooled.scatter_reduce(1, index, values, reduce="amax", include_self=False)
    filled = torch.zeros(batch, num_segments + 1, 1, dtype=torch.bool, device=values.device)
    filled = filled.scatter(1, slots.unsqueeze(-1), True)
    return torch.where(filled, pooled, 0)[:, :num_segments]


def segment_relu_max(values: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """``segment_max(torch.relu(values), segment_ids, num_segments)`` (same shapes, same
    result and gradient) in one scatter: every member is >= 0, so a max started from
    zeros is never raised by its start and an empty segment stays zero. The start ties
    a segment's max only at 0, where the ReLU passes no gradient anyway."""
    values = torch.relu(values)
    if num_segments == 1 and values.size(1) > 0:
        return _masked_max(values, segment_ids >= 0)
    batch, _, dim = values.shape
    index = _scatter_index(segment_ids, num_segments).unsqueeze(-1).expand_as(values)
    pooled = values.new_zeros(batch, num_segments + 1, dim)
    return pooled.scatter_reduce(1, index, values, reduce="amax")[:, :num_segments]


def _masked_max(values: torch.Tensor, member: torch.Tensor) -> torch.Tensor:
    """:func:`segment_max` with one segment: ``values [B, N, H]``, ``member`` BoolTensor
    ``[B, N]`` -> ``[B, 1, H]``. Non-members are set to the dtype's lowest finite value
    (never infinite: fp16-safe) and get no gradient; a row without members gives zeros.
    Only if a row's true max is that lowest value itself would a non-member share the
    tie's gradient."""
    member = member.unsqueeze(-1)  # [B, N, 1]
    pooled = values.masked_fill(~member, torch.finfo(values.dtype).min).amax(1, keepdim=True)
    return torch.where(member.any(1, keepdim=True), pooled, 0)


def segment_attentive_pool(
    values: torch.Tensor, scores: torch.Tensor, segment_ids: torch.Tensor, num_segments: int
) -> torch.Tensor:
    """Softmax-weighted sum of each segment's positions.

    Args:
        values: ``[B, N, H]``.
        scores: ``[B, N]`` attention logits.
        segment_ids: LongTensor ``[B, N]``.
        num_segments: S.

    Returns:
        ``[B, S, H]`` in the dtype of ``values``; zeros for an empty segment.
        The softmax runs in at least float32 (logits are only ``[B, N]``) so fp16
        logits cannot overflow in ``exp``; the weighted sum stays in the values'
        dtype.
    """
    batch, _, dim = values.shape
    index = _scatter_index(segment_ids, num_segments)
    # Logits of positions in no segment (possibly inf from fp16 padding) are
    # replaced before they meet exp, so neither values nor gradients see nan.
    logits = torch.where(segment_ids >= 0, scores, 0)
    logits = logits.to(torch.promote_types(scores.dtype, torch.float32))
    # Shift by the segment max for a stable exp; a constant per segment does not
    # change the softmax, so it carries no gradient.
    seg_max = logits.new_zeros(batch, num_segments + 1)
    seg_max = seg_max.scatter_reduce(1, index, logits.detach(), reduce="amax", include_self=False)
    weights = torch.exp(logits - seg_max.gather(1, index))
    seg_total = weights.new_zeros(batch, num_segments + 1).scatter_add(1, index, weights)
    weights = weights / seg_total.gather(1, index)  # each position's segment has total >= its weight > 0
    weighted = weights.to(values.dtype).unsqueeze(-1) * values.masked_fill(index.unsqueeze(-1) == num_segments, 0)
    pooled = values.new_zeros(batch, num_segments + 1, dim)
    pooled = pooled.scatter_add(1, index.unsqueeze(-1).expand_as(values), weighted)
    return pooled[:, :num_segments]
