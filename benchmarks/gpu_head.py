"""The span head alone on a GPU: where its ~6% of an update's kernel time goes.

Under fairseq-train the compiled span model runs at 0.91x plain RoBERTa's updates/s and
its extra time is the head's own GPU work (benchmarks/RESULTS.md, "Fourth run"). This
times the cnn-cnn head's forward + backward alone, on fixed fp16 features of an update's
shape (batch 32, T = 384, H = 768, spans as the greedy segmenter makes them), against
one transformer layer's forward + backward on the same features (the encoder has 12),
for each formulation:

- ``packed``: the plugin's span encoder (masked segment convolutions, scatter max);
- ``dense``: the paper's ``[B, r, l, H]`` buffer (``dense_span_head.py``) with r and l
  the batch's own most spans and widest span, so it computes the same function;

eager and compiled (``torch.compile``, inductor). Timings are CUDA-event medians over
interleaved rounds; then the packed head's largest kernels under the profiler, which
say what a cheaper head has to remove.

    python benchmarks/gpu_head.py [--batch 32] [--seq-len 384] [--rounds 5] [--steps 20] [--top 12]
    python benchmarks/gpu_head.py --quick     # CPU, tiny shapes: checks the script, no figures

Without a GPU (and without ``--quick``) it says so and exits 0.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dense_span_head import dense_span_encoder, segmentation_like_spans  # noqa: E402


def contenders(dim, spans, compile_too):
    """name -> module mapping ``features [B, T, H]`` to a tensor to back-propagate from."""
    from span_plugin.modules import build_span_encoder

    head = build_span_encoder("cnn-cnn", dim)
    nonempty = spans[..., 1] > spans[..., 0]
    r = int(nonempty.sum(1).max())
    l = int((spans[..., 1] - spans[..., 0]).max())

    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = head

        def forward(self, features):
            return self.head(features, spans)

    class Dense(Packed):
        def forward(self, features):
            return dense_span_encoder(self.head, features, spans, r, l)

    layer = nn.TransformerEncoderLayer(dim, max(1, dim // 64), 4 * dim, dropout=0.0, batch_first=True)
    out = {"transformer layer": layer, "packed": Packed(), "dense": Dense()}
    if compile_too:
        out.update({f"{name}, compiled": torch.compile(module) for name, module in list(out.items())})
    return out, r, l


def fwd_bwd(module, features):
    module(features).float().sum().backward()


def time_rounds(modules, features, rounds, steps, device):
    """Median ms of one forward + backward per module, the modules in turn each round."""
    timer = (lambda: torch.cuda.Event(enable_timing=True)) if device == "cuda" else None
    per = {name: [] for name in modules}
    for name, module in modules.items():  # warm-up: compilation, autotuning, allocator
        for _ in range(3):
            fwd_bwd(module, features)
    for _ in range(rounds):
        for name, module in modules.items():
            if timer:
                start, end = timer(), timer()
                start.record()
                for _ in range(steps):
                    fwd_bwd(module, features)
                end.record()
                torch.cuda.synchronize()
                per[name].append(start.elapsed_time(end) / steps)
            else:
                began = time.perf_counter()
                for _ in range(steps):
                    fwd_bwd(module, features)
                per[name].append((time.perf_counter() - began) * 1e3 / steps)
    return {name: statistics.median(ms) for name, ms in per.items()}


def top_kernels(module, features, device, count=12):
    """``[(name, ms per forward + backward)]``, the largest device (or CPU) operators."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(3):
            fwd_bwd(module, features)
        if device == "cuda":
            torch.cuda.synchronize()
    attr = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    rows = [(avg.key, getattr(avg, attr, 0) / 1e3 / 3) for avg in prof.key_averages()]
    if device == "cuda":  # kernels only: the host ranges have no device time of their own
        rows = [(name, ms) for name, ms in rows if ms > 0]
    return sorted(rows, key=lambda row: -row[1])[:count]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=384)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="forward + backward passes timed per round")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--top", type=int, default=12, help="operators listed per head")
    parser.add_argument("--quick", action="store_true", help="CPU, tiny shapes: checks the script")
    args = parser.parse_args()
    if not args.quick and not torch.cuda.is_available():
        print("gpu_head: no GPU on this machine: nothing to time (--quick checks the script on the CPU)")
        return
    device = "cpu" if args.quick else "cuda"
    dtype = torch.float32 if args.quick else torch.float16
    batch, seq_len, dim, rounds, steps = ((2, 32, 32, 2, 2) if args.quick else
                                          (args.batch, args.seq_len, args.dim, args.rounds, args.steps))
    torch.manual_seed(1)
    spans = segmentation_like_spans(batch, seq_len, torch.Generator().manual_seed(1)).to(device)
    modules, r, l = contenders(dim, spans, compile_too=not (args.quick or args.no_compile))
    modules = {name: module.to(device, dtype) for name, module in modules.items()}
    features = torch.randn(batch, seq_len, dim, device=device, dtype=dtype, requires_grad=True)
    print(f"{torch.cuda.get_device_name(0) if device == 'cuda' else 'CPU (quick check)'}; torch {torch.__version__}; "
          f"{dtype}; batch {batch}, T {seq_len}, H {dim}; spans: up to {r} an example, {l} tokens wide")
    with torch.no_grad():  # the two formulations compute one function (rounding apart)
        gap = (modules["packed"](features).float() - modules["dense"](features).float()).abs().max().item()
    print(f"packed against dense output: max |difference| {gap:.2e}")
    ms = time_rounds(modules, features, rounds, steps, device)
    layer = ms["transformer layer"]
    print("\n| formulation | ms, forward + backward | x one transformer layer |")
    print("|---|---|---|")
    for name, value in ms.items():
        print(f"| {name} | {value:.3f} | {value / layer:.3f} |")
    for name in ("packed", "packed, compiled"):
        if name in modules:
            print(f"\n{name}: largest {'kernels' if device == 'cuda' else 'operators'} per forward + backward")
            for kernel, value in top_kernels(modules[name], features, device, args.top):
                print(f"   {value:7.3f} ms  {kernel[:110]}")


if __name__ == "__main__":
    main()
