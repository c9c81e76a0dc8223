"""Where spans lie on the token axis: per-token span ids, span validity, clipping.

How one example's inputs, and then their spans, get into the model's input layout (pure
torch: the task's datasets and the predictors share it): :func:`lay_out_example`,
:func:`layout_starts`, :func:`place_spans`, :func:`place_phrase_pairs`.

Spans arrive as a LongTensor ``[B, S, 2]`` of ``(start, end)`` token positions, end
exclusive, sorted and non-overlapping. Rows with ``start >= end`` are empty (the
collater pads with ``(0, 0)``) and are ignored wherever they sit. Everything here is
vectorised over examples and spans; nothing loops in Python.
"""

from typing import Optional, Sequence, Tuple

import numpy as np
import torch

NO_SEGMENT = -1  # segment id of a position that belongs to no segment


def token_span_ids(spans: torch.Tensor, seq_len: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Map every token to the span that covers it.

    Args:
        spans: LongTensor ``[B, S, 2]``, (start, end) pairs, end exclusive.
        seq_len: T, the length of the token axis the spans index into.

    Returns:
        span_ids: LongTensor ``[B, T]``; the *compacted* index of the covering span
            (its rank among the example's non-empty spans, in the order given), or
            ``NO_SEGMENT`` for a token no span covers (specials, padding).
        num_spans: LongTensor ``[B]``, the number of non-empty spans per example.
            Span ``k`` of an example is valid iff ``k < num_spans``.

    Offsets are clamped to ``[0, T]``. Overlapping spans are not supported (the
    result is then meaningless); the data contract rules them out.
    """
    spans = spans.long()  # scatter indices must be int64
    start, end = spans.clamp(0, seq_len).unbind(-1)
    nonempty = start < end
    # Label a span by its rank + 1, add the label at its start and subtract it at its
    # end: the running sum is then rank + 1 inside the span and 0 between spans.
    label = (nonempty.cumsum(-1) * nonempty).to(torch.long)
    marks = spans.new_zeros(spans.size(0), seq_len + 1)
    marks.scatter_add_(1, start, label).scatter_add_(1, end, -label)
    span_ids = marks.cumsum(-1)[:, :seq_len] - 1
    return span_ids, nonempty.sum(-1)


def valid_span_ids(num_spans: torch.Tensor, max_spans: int) -> torch.Tensor:
    """Segment ids for pooling over the (compacted) span axis.

    Args:
        num_spans: LongTensor ``[B]``.
        max_spans: S, the size of the span axis.

    Returns:
        LongTensor ``[B, S]``: 0 for the first ``num_spans`` positions (all in one
        segment: the example's spans), ``NO_SEGMENT`` after them.
    """
    position = torch.arange(max_spans, device=num_spans.device)
    inside = position.unsqueeze(0) < num_spans.unsqueeze(1)
    return torch.where(inside, 0, NO_SEGMENT)


def covered_run_ids(span_ids: torch.Tensor) -> torch.Tensor:
    """Ids of maximal runs of consecutive covered tokens (span boundaries ignored).

    Args:
        span_ids: LongTensor ``[B, T]`` from :func:`token_span_ids`.

    Returns:
        LongTensor ``[B, T]``: run index for covered tokens, ``NO_SEGMENT`` otherwise.
        Used by the no-segmentation control, whose convolution only stops at
        uncovered tokens (separators, padding).
    """
    covered = span_ids >= 0
    previous_covered = torch.nn.functional.pad(covered[:, :-1], (1, 0), value=False)
    run_starts = covered & ~previous_covered
    run_ids = run_starts.cumsum(-1) - 1
    return torch.where(covered, run_ids, NO_SEGMENT)


def clip_spans(
    spans: torch.Tensor,
    max_spans: Optional[int] = None,
    max_span_tokens: Optional[int] = None,
) -> torch.Tensor:
    """Apply the paper's dense ``[r, l]`` limits without building the dense buffer.

    Keeps the first ``max_spans`` (r) non-empty spans of each example, cuts every
    kept span to its first ``max_span_tokens`` (l) tokens, and packs the kept spans
    to the front. ``None`` or 0 means no limit, as ``--max-spans`` /
    ``--max-span-tokens`` say: this is the one place those flags are applied.

    Args:
        spans: LongTensor ``[B, S, 2]`` (a batch) or ``[S, 2]`` (one example),
            (start, end), end exclusive.

    Returns:
        LongTensor ``[B, S', 2]`` (or ``[S', 2]``) with ``S'`` the largest number of
        kept spans in the batch; rows past an example's count are ``(0, 0)``.
    """
    for name, limit in (("max_spans", max_spans), ("max_span_tokens", max_span_tokens)):
        if limit is not None and limit < 0:
            raise ValueError(f"{name} must be >= 0 (0 or None: no limit), got {limit}")
    if spans.dim() == 2:  # one example (the data loader's path, per item): slicing, no packing
        spans = spans[spans[:, 0] < spans[:, 1]]
        if max_spans:
            spans = spans[:max_spans]
        if max_span_tokens:
            spans = torch.stack((spans[:, 0], torch.minimum(spans[:, 1], spans[:, 0] + max_span_tokens)), -1)
        return spans
    start, end = spans.unbind(-1)
    keep = start < end
    rank = keep.cumsum(-1) - 1
    if max_spans:
        keep = keep & (rank < max_spans)
    if max_span_tokens:
        end = torch.minimum(end, start + max_span_tokens)
    width = int(keep.sum(-1).max()) if spans.numel() else 0
    # Kept spans go to their rank; dropped rows go to a spare slot that is cut off.
    target = torch.where(keep, rank, width)
    packed = spans.new_zeros(spans.size(0), width + 1, 2)
    packed.scatter_(1, target.unsqueeze(-1).expand(-1, -1, 2), torch.stack([start, end], -1))
    return packed[:, :width].contiguous()


def lay_out_example(items: Sequence[torch.Tensor], init_token: Optional[int] = None,
                    separator_token: Optional[int] = None) -> Tuple[torch.Tensor, list]:
    """One example's inputs in the model's layout: the one builder of it, which the
    training datasets (:mod:`span_plugin.data.layout`), the QA windows and the predictors
    call.

    Args:
        items: one LongTensor ``[T_k]`` per input (one or two), its own tokens and
            ``</s>``, as fairseq-preprocess writes a line.
        init_token: prepended to input 0 (``<s>``; None: nothing); separator_token:
            prepended to input 1 (``</s>`` for RoBERTa's ``<s> A </s> </s> B </s>``; None:
            nothing, BERT's ``[CLS] A [SEP] B [SEP]``).

    Returns:
        ``(tokens LongTensor [T], starts)``: where each input's first token sits (what
        :func:`layout_starts` gives for every example at once).
    """
    if len(items) not in (1, 2):
        raise ValueError(f"an example is one or two inputs, got {len(items)}")
    pieces, starts, at = [], [], 0
    for k, item in enumerate(items):
        token = init_token if k == 0 else separator_token
        if token is not None:
            pieces.append(item.new_tensor([token]))
            at += 1
        starts.append(at)
        pieces.append(item)
        at += len(item)
    return torch.cat(pieces), starts


def layout_starts(input_sizes, init_token, separator_token):
    """Where each input's first token sits in the concatenated sequence.

    input_sizes: list of int arrays ``[N]``, token counts of input0 (and input1) as
    stored by fairseq-preprocess (own tokens plus the appended ``</s>``).
    Returns a list of int64 arrays ``[N]``, one per input: input0 starts after
    ``<s>`` (if an init token is prepended); input1 after input0, its ``</s>`` and the
    separator (if one is prepended).
    """
    starts = [np.full(len(input_sizes[0]), int(init_token is not None), dtype=np.int64)]
    for k in range(1, len(input_sizes)):
        starts.append(
            starts[k - 1]
            + np.asarray(input_sizes[k - 1], dtype=np.int64)
            + int(separator_token is not None)
        )
    return starts


def place_spans(parts: Sequence[torch.Tensor], starts: Sequence[int],
                window: Optional[Tuple[int, int]] = None, max_spans: Optional[int] = None,
                max_span_tokens: Optional[int] = None) -> torch.Tensor:
    """The spans of one example in its layout.

    Args:
        parts: one LongTensor ``[n_k, 2]`` per input, (start, end) in that input's own
            tokens.
        starts: where each input starts in the sequence (:func:`layout_starts`).
        window: ``(lo, hi)``, the positions the shortening kept (None: all). A span it
            cuts through is clipped to it, a span outside it dropped.
        max_spans, max_span_tokens: the paper's r and l (:func:`clip_spans`).

    Returns:
        LongTensor ``[n, 2]``, positions in the (shortened) sequence.
    """
    placed = [p.view(-1, 2) + int(st) for p, st in zip(parts, starts)]
    spans = torch.cat(placed, dim=0) if len(placed) > 1 else placed[0]
    if window is not None:
        lo, hi = window
        spans = (spans - lo).clamp_(min=0, max=hi - lo)
        spans = spans[spans[:, 0] < spans[:, 1]]
    return clip_spans(spans, max_spans, max_span_tokens)


def place_phrase_pairs(sources: torch.Tensor, targets: torch.Tensor, labels: torch.Tensor,
                       start0: int, start1: int, max_len: Optional[int] = None) -> torch.Tensor:
    """Phrase pairs of one sentence pair in its layout: ``sources``/``targets``
    LongTensor ``[P, 2]`` in sentence A's / B's own tokens, ``labels`` ``[P]``.

    Returns LongTensor ``[P', 5]``: source start, end, target start, end (positions in
    the sequence), label; pairs whose target ends past ``max_len`` (the truncation)
    are dropped (only targets can be cut: B follows A).
    """
    item = torch.cat([sources.view(-1, 2) + int(start0), targets.view(-1, 2) + int(start1),
                      labels.view(-1, 1)], 1)
    if max_len is not None:
        item = item[item[:, 3] <= max_len]
    return item
