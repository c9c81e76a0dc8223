"""Decoding of span-labeling scores into entities: flat (:func:`best_non_overlapping`)
or nested (:func:`nested_spans`).

Flat: the best set is the one with the largest total gain, where a candidate's gain is
``log p(best type) - log p(none)``: only candidates whose best label is an entity type
(gain > 0) can be kept, and among non-overlapping sets of those the sum of gains is
maximal (a semi-Markov Viterbi over word positions). The loops run over word positions,
vectorised over the batch and the widths; never over examples or spans.

Nested: every candidate whose score (the best type's log-probability) reaches a
threshold, taken in order of decreasing score; a candidate that *crosses* one taken
before it (overlaps it without either containing the other) is dropped. Disjoint and
nested candidates are all kept, so the output is a laminar set (a forest of spans), the
shape nested NER corpora have; crossing brackets would not describe entities. The loop
runs over the rank among the kept-able candidates (a few per sentence), vectorised
over the batch.
"""

import torch


def best_non_overlapping(gain, valid):
    """
    Args:
        gain: FloatTensor ``[B, W, L]``, gain of candidate (i, w) = words i .. i + w.
        valid: BoolTensor ``[B, W, L]``.

    Returns:
        BoolTensor ``[B, W, L]``: the chosen candidates, pairwise disjoint, each with
        gain > 0, with the largest total gain (ties: the first found, shorter spans and
        earlier positions first).
    """
    batch, num_words, max_words = gain.shape
    gain = torch.where(valid & (gain > 0), gain.double(), float("-inf"))
    best = gain.new_zeros(batch, num_words + 1)  # best[:, j]: best total over words < j
    choice = torch.full((batch, num_words + 1), -1, dtype=torch.long, device=gain.device)
    rows = torch.arange(batch, device=gain.device)
    widths = torch.arange(max_words, device=gain.device)
    for j in range(1, num_words + 1):
        # Candidates that end at word j - 1: start j - 1 - w for width index w.
        start = j - 1 - widths
        ok = start >= 0
        start = start.clamp(min=0)
        total = best[:, start] + gain[:, start, widths]  # [B, L]
        total = torch.where(ok, total, float("-inf"))
        value, w = total.max(-1)
        take = value > best[:, j - 1]
        best[:, j] = torch.where(take, value, best[:, j - 1])
        choice[:, j] = torch.where(take, w, -1)
    chosen = torch.zeros_like(valid)
    j = torch.full((batch,), num_words, dtype=torch.long, device=gain.device)
    for _ in range(num_words):  # walk back; each step moves every example left
        w = choice[rows, j]
        pick = (j > 0) & (w >= 0)
        start = (j - 1 - w).clamp(min=0)
        chosen[rows[pick], start[pick], w[pick]] = True
        j = torch.where(pick, j - 1 - w, (j - 1).clamp(min=0))
    return chosen


def nested_spans(score, valid, min_score):
    """
    Args:
        score: FloatTensor ``[B, W, L]``, score of candidate (i, w) = words i .. i + w.
        valid: BoolTensor ``[B, W, L]``.
        min_score: candidates scoring below it are never kept.

    Returns:
        BoolTensor ``[B, W, L]``: the valid candidates with score >= ``min_score``, less
        those that cross a higher-scored kept one (ties in score: the earlier start,
        then the shorter span, ranks first). No two kept candidates cross.
    """
    batch, num_words, max_words = score.shape
    flat = score.flatten(1).double()
    ok = valid.flatten(1) & (flat >= min_score)
    chosen = torch.zeros_like(ok)
    count = int(ok.sum(1).max()) if ok.numel() else 0
    if count == 0:
        return chosen.view_as(valid)
    key = torch.where(ok, flat, float("-inf"))
    order = key.argsort(dim=1, descending=True, stable=True)[:, :count]  # [B, M], best first
    active = ok.gather(1, order)
    start = order // max_words
    end = start + order % max_words + 1  # word after the last
    s1, e1, s2, e2 = start.unsqueeze(2), end.unsqueeze(2), start.unsqueeze(1), end.unsqueeze(1)
    cross = ((s1 < s2) & (s2 < e1) & (e1 < e2)) | ((s2 < s1) & (s1 < e2) & (e2 < e1))  # [B, M, M]
    kept = torch.zeros_like(active)
    for m in range(count):
        clash = (cross[:, m, :m] & kept[:, :m]).any(-1)
        kept[:, m] = active[:, m] & ~clash
    return chosen.scatter(1, order, kept).view_as(valid)
