"""The paper's dense [B, r, l, H] span head (masking fixed) vs the packed, masked
span encoder of ``span_plugin.modules``, timed side by side.

Two dense baselines, both with the public reference code's formulation (every
kept span copied into a dense buffer of r spans x l tokens, conv over l for every
buffer slot, max over l, conv over r, max over r), both with masking fixed:

- ``dense-gather``: the buffer built with one vectorised gather;
- ``dense-loops``: the buffer filled with Python loops over examples and spans,
  as the public code fills it.

They reuse the parameters of a ``cnn-cnn`` module, so all three compute the same
function of ``clip_spans(spans, r, l)`` (``tests/test_modules_dense_head.py``
checks that).

    .venv/bin/python benchmarks/dense_span_head.py [--repeats N] [--threads N]
    .venv/bin/python benchmarks/dense_span_head.py --quick   # seconds: B=2, H=32, T=32
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from span_plugin.modules import build_span_encoder, clip_spans


def dense_head(module, buffer: torch.Tensor, token_mask: torch.Tensor, span_mask: torch.Tensor) -> torch.Tensor:
    """The cnn-cnn head on a dense buffer.

    Args:
        module: a ``cnn-cnn`` span encoder (its two convolutions are used).
        buffer: ``[B, r, l, H]``, zeros where ``token_mask`` is False.
        token_mask: BoolTensor ``[B, r, l]``, real tokens of kept spans.
        span_mask: BoolTensor ``[B, r]``, kept (non-empty) spans.

    Returns:
        ``[B, H]``.
    """
    token_conv = module.within_span.conv
    span_conv = module.across_spans.conv
    batch, r, l, dim = buffer.shape
    # Zero-filled slots past a span's end are exactly the conv's zero padding.
    by_span = buffer.reshape(batch * r, l, dim).transpose(1, 2)
    hidden = torch.relu(F.conv1d(by_span, token_conv.weight, token_conv.bias, padding=token_conv.padding))
    hidden = hidden.transpose(1, 2).reshape(batch, r, l, dim)
    # The fix: padding slots hold ReLU(bias) here and must not win the max. ReLU
    # outputs are >= 0 and every kept span has a token, so a 0 fill is exact.
    span_vectors = hidden.masked_fill(~token_mask.unsqueeze(-1), 0).amax(2)
    span_vectors = span_vectors.masked_fill(~span_mask.unsqueeze(-1), 0)
    hidden = torch.relu(F.conv1d(span_vectors.transpose(1, 2), span_conv.weight, span_conv.bias, padding=span_conv.padding))
    return hidden.masked_fill(~span_mask.unsqueeze(1), 0).amax(2)


def dense_span_encoder(module, features: torch.Tensor, spans: torch.Tensor, r: int, l: int) -> torch.Tensor:
    """Dense formulation, buffer built with a vectorised gather.

    Args:
        features: ``[B, T, H]``; spans: LongTensor ``[B, S, 2]``.
        r, l: most spans per example, most tokens per span (the dense buffer shape).

    Returns:
        ``[B, H]``, equal to ``module(features, clip_spans(spans, r, l))``.
    """
    kept = clip_spans(spans, r, l)
    kept = F.pad(kept, (0, 0, 0, r - kept.size(1)))  # [B, r, 2]
    start, end = kept.unbind(-1)
    positions = start.unsqueeze(-1) + torch.arange(l, device=spans.device)  # [B, r, l]
    token_mask = positions < end.unsqueeze(-1)
    positions = torch.where(token_mask, positions, 0).clamp(max=features.size(1) - 1)
    dim = features.size(-1)
    buffer = features.gather(1, positions.reshape(features.size(0), r * l, 1).expand(-1, -1, dim))
    buffer = buffer.view(features.size(0), r, l, dim).masked_fill(~token_mask.unsqueeze(-1), 0)
    return dense_head(module, buffer, token_mask, start < end)


def dense_span_encoder_loop_filled(module, features: torch.Tensor, spans: torch.Tensor, r: int, l: int) -> torch.Tensor:
    """Dense formulation, buffer filled by Python loops over examples and spans
    (the public code's way; here each slot is a padded slice and the slots are
    stacked once, which is kinder to autograd than assigning into a buffer).
    Same arguments and result as ``dense_span_encoder``."""
    batch, _, dim = features.shape
    empty_slot = features.new_zeros(l, dim)
    slots, token_mask = [], torch.zeros(batch, r, l, dtype=torch.bool)
    for b, row in enumerate(spans.tolist()):
        kept = [(start, min(end, start + l)) for start, end in row if start < end][:r]
        for k, (start, end) in enumerate(kept):
            slots.append(F.pad(features[b, start:end], (0, 0, 0, l - (end - start))))
            token_mask[b, k, : end - start] = True
        slots.extend([empty_slot] * (r - len(kept)))
    buffer = torch.stack(slots).view(batch, r, l, dim)
    return dense_head(module, buffer, token_mask, token_mask.any(-1))


def segmentation_like_spans(batch: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
    """Spans as the greedy n-gram segmenter makes them on a pair input
    ``<s> A </s> </s> B </s>`` filling ``seq_len``: mostly one- and two-token
    spans, some up to 8 BPE tokens, covering every non-special token."""
    widths = torch.tensor([1, 1, 1, 1, 2, 2, 2, 3, 4, 6, 8])
    rows = []
    for _ in range(batch):
        row, t = [], 1
        separator = seq_len // 2
        while t < seq_len - 1:
            if t in (separator, separator + 1):
                t += 1
                continue
            width = int(widths[torch.randint(len(widths), (), generator=generator)])
            end = min(t + width, seq_len - 1, separator if t < separator else seq_len - 1)
            row.append((t, end))
            t = end
        rows.append(row)
    spans = torch.zeros(batch, max(map(len, rows)), 2, dtype=torch.long)
    for b, row in enumerate(rows):
        spans[b, : len(row)] = torch.tensor(row)
    return spans


def time_interleaved(contenders, features, repeats):
    """Median wall and CPU seconds of forward + backward for each contender.

    Runs alternate (A, B, C, A, B, C, ...) so a busy shared machine slows all of
    them alike; the first round is a warm-up. CPU time (all threads of this
    process) is reported too: on an oversubscribed machine it is much steadier
    than wall time, since time spent descheduled is not counted.

    Returns:
        {name: (wall_seconds, cpu_seconds)}
    """
    times = {name: ([], []) for name in contenders}
    for round_ in range(repeats + 1):
        for name, fn in contenders.items():
            leaf = features.detach().requires_grad_(True)
            wall, cpu = time.perf_counter(), time.process_time()
            fn(leaf).sum().backward()
            if round_:
                times[name][0].append(time.perf_counter() - wall)
                times[name][1].append(time.process_time() - cpu)
    return {name: (statistics.median(w), statistics.median(c)) for name, (w, c) in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--r", type=int, default=64)
    parser.add_argument("--l", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip-loops", action="store_true", help="do not time the loop-filled baseline")
    parser.add_argument("--quick", action="store_true",
                        help="a check in seconds: B=2, H=32, T=32, r=8, l=4, 1 repeat")
    args = parser.parse_args()
    if args.quick:
        args.batch, args.dim, args.seq_lens, args.r, args.l, args.repeats = 2, 32, [32], 8, 4, 1
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    module = build_span_encoder("cnn-cnn", args.dim)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, B={args.batch} H={args.dim} "
          f"r={args.r} l={args.l}, forward+backward, median of {args.repeats}; wall ms (cpu ms)")
    print(f"{'T':>5} {'spans':>6} {'packed':>16} {'dense-gather':>16} {'dense-loops':>16} "
          f"{'x vs gather':>16} {'x vs loops':>16}")
    ratios = []
    nan = (float("nan"), float("nan"))
    for seq_len in args.seq_lens:
        spans = segmentation_like_spans(args.batch, seq_len, generator)
        features = torch.randn(args.batch, seq_len, args.dim, generator=generator)
        with torch.no_grad():  # all contenders compute the same function
            torch.testing.assert_close(module(features, clip_spans(spans, args.r, args.l)),
                                       dense_span_encoder(module, features, spans, args.r, args.l))
        # Every contender gets the raw spans and applies the r x l limits itself.
        contenders = {
            "packed": lambda f: module(f, clip_spans(spans, args.r, args.l)),
            "dense-gather": lambda f: dense_span_encoder(module, f, spans, args.r, args.l),
        }
        if not args.skip_loops:
            contenders["dense-loops"] = lambda f: dense_span_encoder_loop_filled(module, f, spans, args.r, args.l)
        median = time_interleaved(contenders, features, args.repeats)
        packed, gather, loops = median["packed"], median["dense-gather"], median.get("dense-loops", nan)
        ratio = [tuple(o / p for o, p in zip(other, packed)) for other in (gather, loops)]
        ratios.append(ratio)

        def cell(pair, unit=1e3, fmt=".0f"):
            return f"{pair[0] * unit:{fmt}} ({pair[1] * unit:{fmt}})"

        print(f"{seq_len:>5} {spans.size(1):>6} {cell(packed):>16} {cell(gather):>16} {cell(loops):>16} "
              f"{cell(ratio[0], 1, '.2f'):>16} {cell(ratio[1], 1, '.2f'):>16}", flush=True)
    summary = ", ".join(
        f"T={t}: {g[0]:.2f}x ({g[1]:.2f}x cpu) vs dense-gather, {lp[0]:.2f}x ({lp[1]:.2f}x cpu) vs dense-loops"
        for t, (g, lp) in zip(args.seq_lens, ratios))
    print(f"speedup of packed cnn-cnn, wall (cpu): {summary}")


if __name__ == "__main__":
    main()
