"""Batches of variable-length items, right-padded (the collation of the task's datasets,
in plain torch)."""

import torch


def pad_tokens(items, pad):
    """Token items (LongTensor ``[T_i]``) -> LongTensor ``[B, max T_i]`` right-padded
    with ``pad``."""
    out = torch.full((len(items), max(len(t) for t in items)), pad, dtype=torch.long)
    for b, t in enumerate(items):
        out[b, :len(t)] = t
    return out


def pad_rows(items, width):
    """Row items (LongTensor ``[n_i, width]``: spans, words, phrase pairs) -> LongTensor
    ``[B, max(1, max n_i), width]`` padded with zero rows (empty spans)."""
    out = torch.zeros(len(items), max([1] + [len(x) for x in items]), width, dtype=torch.long)
    for b, x in enumerate(items):
        out[b, :len(x)] = x[:, :width]
    return out
