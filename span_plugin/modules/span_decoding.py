"""Decoding of span-labeling scores into non-overlapping entities.

The best set is the one with the largest total gain, where a candidate's gain is
``log p(best type) - log p(none)``: only candidates whose best label is an entity type
(gain > 0) can be kept, and among non-overlapping sets of those the sum of gains is
maximal (a semi-Markov Viterbi over word positions). The loops run over word positions,
vectorised over the batch and the widths; never over examples or spans.
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
