"""Decoding of per-word tag scores into tag sequences: ``argmax`` (each word's best tag on
its own) or ``viterbi`` (the best sequence that is well-formed IOB2).

The tagging folders store IOB2 whatever the source scheme (``span-preprocess conll``
converts IOB1 and BIOES, :mod:`span_plugin.formats.tags`), so the model is trained on
IOB2 and the constraint is IOB2's: ``I-X`` only right after ``B-X`` or ``I-X``, never
first in a sentence; ``O`` and ``B-X`` anywhere. Items cut from one long sentence start
with ``B-`` too (preprocessing rewrites a cut entity so), so the start rule holds per item.

The Viterbi search maximises the sum of the words' log-probabilities over the allowed
sequences (hard constraints, no learned transitions): it changes a prediction only where
the word-by-word argmax is ill-formed. It loops over word positions, vectorised over the
batch and the tags; cost ``O(W C^2)`` per sentence.
"""

import torch

from span_plugin.formats import tags as T

TOKEN_DECODINGS = ("argmax", "viterbi")


def iob2_constraints(tag_names):
    """Which tag may follow which in IOB2.

    Args:
        tag_names: the C tag names (``O``, ``B-X``, ``I-X``).

    Returns:
        allowed: BoolTensor ``[C, C]``, ``allowed[a, b]``: tag b may follow tag a.
        first: BoolTensor ``[C]``: the tag may open a sentence.
    """
    parts = []
    for i, name in enumerate(tag_names):
        prefix, kind = T.split_tag(name)
        if prefix not in ("B", "I", T.OUTSIDE) or (prefix != T.OUTSIDE and not kind):
            raise ValueError(f"tag {i} {name!r}: not an IOB2 tag (O, B-X, I-X); the "
                             f"constrained decoder reads IOB2 tag inventories only")
        parts.append((prefix, kind))
    inside = torch.tensor([p == "I" for p, _ in parts])
    opens = torch.tensor([p in ("B", "I") for p, _ in parts])  # an entity is open after it
    kinds = [k for _, k in parts]
    same = torch.tensor([[a is not None and a == b for b in kinds] for a in kinds])
    allowed = ~inside.view(1, -1) | (opens.view(-1, 1) & same)
    return allowed, ~inside


def viterbi_tags(scores, lengths, allowed, first):
    """The best allowed tag sequence of each example.

    Args:
        scores: FloatTensor ``[B, W, C]``, log-probabilities of each word's tags.
        lengths: LongTensor ``[B]``, words per example (words at or past it are padding).
        allowed: BoolTensor ``[C, C]``, ``first``: BoolTensor ``[C]``
            (:func:`iob2_constraints`); every example must have an allowed sequence
            (IOB2: all ``O`` always is).

    Returns:
        LongTensor ``[B, W]``: the tag ids maximising the summed scores among the
        allowed sequences; -1 at padding positions.
    """
    batch, num_words, num_tags = scores.shape
    if num_words == 0:
        return scores.new_zeros(batch, 0, dtype=torch.long)
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()  # sums of many log-probabilities need the precision
    device = scores.device
    lengths = lengths.to(device)
    # -inf forbids; a forbidden step can never win because all-O is always allowed.
    trans = torch.zeros(num_tags, num_tags, dtype=scores.dtype, device=device).masked_fill(
        ~allowed.to(device), float("-inf"))
    best = scores[:, 0] + torch.zeros(num_tags, dtype=scores.dtype, device=device).masked_fill(
        ~first.to(device), float("-inf"))  # [B, C]: best score of a prefix ending in tag c
    keep = torch.arange(num_tags, device=device).expand(batch, -1)  # identity back-pointers
    back = []
    for t in range(1, num_words):
        value, previous = (best.unsqueeze(-1) + trans).max(1)  # over the previous tag
        live = (t < lengths).unsqueeze(-1)
        best = torch.where(live, value + scores[:, t], best)
        # Past an example's end the pointers are the identity: its last tag is carried.
        back.append(torch.where(live, previous, keep))
    tag = best.argmax(-1)  # [B]
    path = [tag]
    for pointers in reversed(back):
        tag = pointers.gather(1, tag.unsqueeze(-1)).squeeze(-1)
        path.append(tag)
    path = torch.stack(path[::-1], 1)
    pad = torch.arange(num_words, device=device).unsqueeze(0) >= lengths.unsqueeze(-1)
    return path.masked_fill(pad, -1)


def decode_tags(scores, lengths, tag_names, decoding="viterbi"):
    """Word tag ids ``[B, W]`` (-1 at padding) from log-probabilities ``[B, W, C]`` by
    ``decoding`` (:data:`TOKEN_DECODINGS`)."""
    if decoding == "argmax":
        tags = scores.argmax(-1)
        pad = torch.arange(scores.size(1), device=scores.device).unsqueeze(0) >= lengths.to(
            scores.device).unsqueeze(-1)
        return tags.masked_fill(pad, -1)
    if decoding == "viterbi":
        return viterbi_tags(scores, lengths, *iob2_constraints(tag_names))
    raise ValueError(f"token decoding {decoding!r}: expected one of {TOKEN_DECODINGS}")
