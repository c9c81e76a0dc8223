"""Where a fine-tuning update's time goes on a GPU: the torch profiler on CUDA.

``gpu_throughput.py`` measures what ``fairseq-train`` achieves; this says why. For each
variant it builds fairseq's own task, model, criterion and ``Trainer`` (fp16 with the
recipes' flags, batch 32 of the long-pair folder, the batches ``fairseq-train`` draws),
runs warm-up updates (the compiled variants build their graphs there; ``--from-loader``:
each batch from fairseq's epoch iterator, as fairseq-train draws them), times updates
with the device synchronised, the variants interleaved in ``--rounds`` rounds (all of
them are built first; span / plain is then a ratio per round, so a drifting machine
does not read as a difference: single 12-16-update timings of one variant after another
moved by 10-25% between runs), then profiles a few with CPU and CUDA activity and reports
per update:

- wall ms, GPU busy ms (the union of kernel intervals: two overlapping kernels count
  once) and busy % = the share of the update a kernel runs (what nvidia-smi's SM
  utilisation samples);
- kernels launched (graph replays count their kernels), CUDA graph launches, and
  host-device syncs (``cudaStreamSynchronize``/``cudaDeviceSynchronize``/
  ``cudaEventSynchronize``: a ``.item()`` or blocking copy waits in one of them);
- the GPU time of the model's parts: encoder forward, head forward (eager variants:
  ``record_function`` ranges around them), and the largest kernels by total time;
- host time per fairseq phase (forward, backward, clip-grads, optimizer, ...; ``other``:
  the rest of ``train_step``, fairseq's bookkeeping between the optimizer step and the
  next forward) and the GPU's idle time inside each; the host's operators and runtime
  calls by their own time; tokens per update (batches compare across variants).

    python benchmarks/gpu_profile.py [--data .gpu/wiki-pairs] [--variants span plain span+compile plain+compile span+compile+amp]
    python benchmarks/gpu_profile.py --quick     # CPU, tiny model: checks the script, no figures

Variants as in ``gpu_throughput.py``: ``span`` (span_classification, cnn-cnn head),
``plain`` (fairseq's sentence_prediction), ``+compile`` (``--compile --compile-mode
reduce-overhead --length-multiple 64``; ``plain+compile`` is the span model with
``--sentence-head plain``), ``+amp`` (``--amp --optimizer torch_adamw`` instead of fp16
and fairseq's adam; its ratio to the same variant without it is printed too). Without a
GPU (and without ``--quick``) it says so and exits 0.
"""

import argparse
import bisect
import collections
import contextlib
import itertools
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import ROOT  # noqa: E402
from gpu_throughput import prepare, training_args, variant_args  # noqa: E402

# fairseq's own record_function ranges in a training update, and this script's.
PHASES = ("train_step", "forward", "backward", "reduce-grads", "multiply-grads", "clip-grads", "optimizer")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def build(data, variant, batch, quick, from_loader=False):
    """fairseq's Trainer for ``variant`` and its batches: an endless iterator over 8
    real training batches loaded beforehand, or with ``from_loader`` fairseq's epoch
    iterator as fairseq-train draws from it (2 loader workers)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    parsed = options.parse_args_and_arch(options.get_training_parser(), [
        data, *variant_args(variant, "tiny" if quick else "base", quick), *training_args(batch)])
    cfg = convert_namespace_to_omegaconf(parsed)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    epochs = trainer.get_train_iterator(epoch=1)
    if from_loader:
        def batches():
            while True:
                yield from epochs.next_epoch_itr(shuffle=True)
        return trainer, model, batches()
    itr = epochs.next_epoch_itr(shuffle=True)
    return trainer, model, itertools.cycle([next(itr) for _ in range(8)])


@contextlib.contextmanager
def labelled_parts(model):
    """``record_function`` ranges around the encoder's and the head's forward (hooks)."""
    parts = [("encoder forward", model.encoder)] + [
        ("head forward", head) for head in getattr(model, "classification_heads", {}).values()]
    handles, ranges = [], {}
    for label, module in parts:
        def pre(module, inputs, label=label):
            ranges[id(module)] = torch.profiler.record_function(label)
            ranges[id(module)].__enter__()

        def post(module, inputs, output):
            ranges.pop(id(module)).__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def merged(intervals):
    """Sorted, disjoint union of ``(start, end)`` intervals."""
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def busy_within(busy, start, end):
    """Length of ``[start, end]`` covered by the merged intervals ``busy``."""
    i = bisect.bisect_right([b[0] for b in busy], start) - 1
    covered = 0.0
    for b_start, b_end in busy[max(i, 0):]:
        if b_start >= end:
            break
        covered += max(0.0, min(end, b_end) - max(start, b_start))
    return covered


def _start_end_us(event):
    """A raw (kineto) event's start and end in us since the epoch."""
    if hasattr(event, "start_ns"):
        start = event.start_ns() / 1e3
        return start, start + event.duration_ns() / 1e3
    return event.start_us(), event.start_us() + event.duration_us()


def host_ranges(prof, names):
    """``[(name, start us, end us)]`` of the host's ``record_function`` ranges called one
    of ``names``, on the raw events' clock (the parsed events count from the trace's
    start, the device events do not)."""
    return [(e.name(), *_start_end_us(e)) for e in prof.profiler.kineto_results.events()
            if e.device_type() == torch.autograd.DeviceType.CPU and e.name() in names]


def device_events(prof):
    """``[(name, start us, end us)]`` of every kernel, copy and set on the device, from
    the profiler's raw (kineto) events."""
    raw = prof.profiler.kineto_results.events()
    # The device timeline also mirrors every record_function range (fairseq's phases):
    # those are not work, and carry the names of host events.
    host_names = {e.name() for e in raw if e.device_type() == torch.autograd.DeviceType.CPU}
    return [(e.name(), *_start_end_us(e)) for e in raw
            if e.device_type() == torch.autograd.DeviceType.CUDA and e.name() not in host_names]


def timed_rounds(runs, warmup, timed, rounds, device):
    """Synchronised ms/update of every variant, interleaved: after ``warmup`` updates
    each, ``rounds`` rounds in which every variant runs ``timed // rounds`` updates in
    turn, so a drift of the machine (clocks, another tenant) falls on all variants alike.
    ``runs``: variant -> (trainer, endless batch iterator). Returns variant ->
    ``{"ms": [per update], "round_ms": [median per round], "tokens": mean per update}``."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for trainer, batches in runs.values():
        for _ in range(warmup):
            trainer.train_step([next(batches)])
    sync()
    out = {variant: {"ms": [], "round_ms": [], "tokens": []} for variant in runs}
    per_round = max(1, timed // rounds)
    for _ in range(rounds):
        for variant, (trainer, batches) in runs.items():
            this_round = []
            for _ in range(per_round):
                start = time.perf_counter()  # drawing the batch counts, as in fairseq-train
                sample = next(batches)
                trainer.train_step([sample])
                sync()
                this_round.append((time.perf_counter() - start) * 1e3)
                out[variant]["tokens"].append(sample["ntokens"])
            out[variant]["ms"] += this_round
            out[variant]["round_ms"].append(statistics.median(this_round))
    for figures in out.values():
        figures["tokens"] = statistics.mean(figures["tokens"])
    return out


def variant_pairs(variants):
    """The pairs worth a ratio among the timed ``variants``: each span variant against
    its plain twin, and each ``+amp`` variant against the same without it."""
    pairs = [(v, v.replace("span", "plain", 1)) for v in variants if v.startswith("span")]
    pairs += [(v, v.replace("+amp", "")) for v in variants if "+amp" in v]
    return [(a, b) for a, b in pairs if b in variants]


def paired_ratios(timings, pairs=None):
    """First / second updates per second round by round (the second's ms over the
    first's in the same round): ``{(first, second): (median, lowest, highest)}`` for the
    pairs timed (default: :func:`variant_pairs`)."""
    out = {}
    for span, plain in variant_pairs(list(timings)) if pairs is None else pairs:
        if span in timings and plain in timings:
            ratios = [p / s for s, p in zip(timings[span]["round_ms"], timings[plain]["round_ms"])]
            out[(span, plain)] = (statistics.median(ratios), min(ratios), max(ratios))
    return out


def profile(trainer, model, batches, profiled, device):
    """Per-update figures of one variant under the profiler (see the module docstring);
    ``batches``: an endless iterator."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    labelled = labelled_parts(model) if not getattr(model, "compile_mode", None) else contextlib.nullcontext()
    with labelled, torch.profiler.profile(activities=activities) as prof:
        sync()
        start = time.perf_counter()
        for _ in range(profiled):
            with torch.profiler.record_function("train_step"):
                trainer.train_step([next(batches)])
        sync()
        wall = (time.perf_counter() - start) / profiled
    kernels = device_events(prof)  # (name, start us, end us)
    busy_intervals = merged([(start, end) for _, start, end in kernels])
    busy = sum(end - start for start, end in busy_intervals) / 1e3 / profiled
    # Each phase's host time and the device's idle time inside it, per update: where the
    # GPU waits for the host.
    phases = collections.defaultdict(lambda: [0.0, 0.0])
    for name, start, end in host_ranges(prof, PHASES):
        phases[name][0] += (end - start) / 1e3 / profiled
        phases[name][1] += (end - start - busy_within(busy_intervals, start, end)) / 1e3 / profiled
    if "train_step" in phases:  # the update's host work outside fairseq's named phases
        inside = [sum(phases[name][i] for name in PHASES[1:] if name in phases) for i in (0, 1)]
        phases["other"] = [phases["train_step"][i] - inside[i] for i in (0, 1)]
    # Where the host's time goes: operators and runtime calls by their own (self) time.
    host_top = sorted(((avg.key, avg.self_cpu_time_total / 1e3 / profiled, avg.count / profiled)
                       for avg in prof.key_averages()), key=lambda item: -item[1])[:15]
    runtime = collections.Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU)
    syncs = sum(runtime[name] for name in SYNC_CALLS)
    by_kernel = collections.defaultdict(float)
    for name, start, end in kernels:
        by_kernel[name] += (end - start) / 1e3 / profiled
    parts = {}
    for avg in prof.key_averages():
        if avg.key in ("encoder forward", "head forward"):
            parts[avg.key] = getattr(avg, "device_time_total", getattr(avg, "cuda_time_total", 0)) / 1e3 / profiled
    return {
        "profiled_wall_ms": wall * 1e3, "busy_ms": busy,
        "busy_pct": 100 * busy / (wall * 1e3), "kernels": len(kernels) / profiled,
        "graph_launches": runtime["cudaGraphLaunch"] / profiled,
        "launches": (runtime["cudaLaunchKernel"] + runtime["cuLaunchKernel"] + runtime["cuLaunchKernelEx"]) / profiled,
        "syncs": syncs / profiled, "parts": parts, "phases": dict(phases),
        "top": sorted(by_kernel.items(), key=lambda kv: -kv[1])[:12], "host_top": host_top,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.path.join(ROOT, ".gpu", "wiki-pairs"))
    parser.add_argument("--variants", nargs="+", default=["span", "plain", "span+compile", "plain+compile"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=12)
    parser.add_argument("--timed", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4,
                        help="the timed updates are split into this many rounds, the variants in turn")
    parser.add_argument("--profiled", type=int, default=6)
    parser.add_argument("--from-loader", action="store_true",
                        help="draw each update's batch from fairseq's epoch iterator (2 workers), "
                        "as fairseq-train does, instead of 8 batches loaded beforehand")
    parser.add_argument("--quick", action="store_true", help="CPU, tiny model: checks the script")
    args = parser.parse_args()
    if not args.quick and not torch.cuda.is_available():
        print("gpu_profile: no GPU on this machine: nothing to profile (--quick checks the script on the CPU)")
        return
    import span_plugin

    span_plugin.register()
    if not os.path.isdir(args.data):
        prepare(args.data, count=64 if args.quick else 3200)
    device = "cpu" if args.quick else "cuda"
    batch, warmup, timed, rounds, profiled = ((4, 2, 2, 2, 1) if args.quick else
                                              (args.batch, args.warmup, args.timed, args.rounds, args.profiled))
    print(f"{torch.cuda.get_device_name(0) if device == 'cuda' else 'CPU (quick check)'}; torch {torch.__version__}; "
          f"batch {batch}, {timed} timed updates in {rounds} rounds, {profiled} profiled", flush=True)
    runs, models = {}, {}
    for variant in args.variants:
        torch.manual_seed(1)
        trainer, models[variant], batches = build(args.data, variant, batch, args.quick, args.from_loader)
        runs[variant] = (trainer, batches)
    timings = timed_rounds(runs, warmup, timed, rounds, device)
    results = {}
    for variant, (trainer, batches) in runs.items():
        r = results[variant] = profile(trainer, models[variant], batches, profiled, device)
        r["wall_ms"] = statistics.median(timings[variant]["ms"])
        r["tokens"] = timings[variant]["tokens"]
        print(f"\n== {variant}: {r['wall_ms']:.1f} ms/update ({1e3 / r['wall_ms']:.1f} updates/s, "
              f"{r['tokens']:.0f} tokens an update), "
              f"profiled {r['profiled_wall_ms']:.1f} ms; GPU busy {r['busy_ms']:.1f} ms = {r['busy_pct']:.0f}%; "
              f"kernels {r['kernels']:.0f} (launches {r['launches']:.0f}, graph launches "
              f"{r['graph_launches']:.0f}); syncs {r['syncs']:.0f}", flush=True)
        for part, ms in r["parts"].items():
            print(f"   {part}: {ms:.2f} ms GPU")
        for phase in (*PHASES, "other"):
            if phase in r["phases"]:
                host, idle = r["phases"][phase]
                print(f"   phase {phase}: {host:.2f} ms host, GPU idle {idle:.2f} ms of it")
        for name, ms in r["top"]:
            print(f"   {ms:7.3f} ms  {name[:110]}")
        print("   host, by self time per update:")
        for name, ms, count in r["host_top"]:
            print(f"   {ms:7.3f} ms  {count:6.1f}x  {name[:100]}")
    print("\n| variant | ms/update | tokens/update | GPU busy ms | busy % | kernels | launches | syncs |")
    print("|---|---|---|---|---|---|---|---|")
    for variant, r in results.items():
        print(f"| {variant} | {r['wall_ms']:.1f} | {r['tokens']:.0f} | {r['busy_ms']:.1f} | {r['busy_pct']:.0f} | "
              f"{r['kernels']:.0f} | {r['launches']:.0f} | {r['syncs']:.0f} |")
    for (span, plain), (median, low, high) in paired_ratios(timings).items():
        print(f"{span} / {plain} updates/s, round by round: median {median:.3f} (rounds {low:.3f}-{high:.3f})")


if __name__ == "__main__":
    main()
