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


BATCH_ORDERS = ("length", "file")


def length_batches(lengths, batch_size, order="length"):
    """Batches of item indices (lists of int) covering ``range(len(lengths))`` once each.

    ``order`` "length": the indices sorted by ``lengths`` (longest first, ties in input
    order) and cut into batches of ``batch_size``, so that items of like length share a
    batch and little of it is padding; "file": consecutive runs in input order.
    :func:`in_input_order` puts the batches' results back in input order."""
    indices = length_order(lengths, order)
    return [indices[k:k + batch_size] for k in range(0, len(indices), batch_size)]


def length_order(lengths, order="length"):
    """The indices of ``lengths`` longest first, ties in input order (``order``
    "length"), or in input order ("file")."""
    if order not in BATCH_ORDERS:
        raise ValueError(f"batch order {order!r}: expected one of {BATCH_ORDERS}")
    indices = list(range(len(lengths)))
    if order == "length":
        indices.sort(key=lambda i: -int(lengths[i]))  # sort() is stable: ties keep input order
    return indices


def unpermuted(permutation, results):
    """``results[j]`` (the result of item ``permutation[j]``) as a list in item order."""
    out = [None] * len(results)
    for i, result in zip(permutation, results):
        out[i] = result
    return out


def in_input_order(batches, results):
    """``results`` (one tensor ``[B_k, ...]`` per batch of :func:`length_batches`) as one
    tensor ``[N, ...]`` whose row ``i`` is item ``i``'s."""
    rows = torch.cat(results, dim=0)
    order = torch.tensor([i for batch in batches for i in batch], dtype=torch.long)
    out = torch.empty_like(rows)
    out[order] = rows
    return out
