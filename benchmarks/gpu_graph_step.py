"""The whole fine-tuning update as CUDA graph replays (issue 69, part 4). Written without
a GPU: NOT RUN on one yet; ``--quick`` checks its update on the CPU.

Where the sixth run left training (benchmarks/RESULTS.md: the compiled span model's GPU
66-71% busy, the host's Python setting the pace), the next step is to take the host out
of the update: fairseq's task, span model and criterion (``gpu_profile.build``: the
long-pair folder of ``gpu_throughput.py --prepare``, base size, batch 32, ``--amp``
weights in fp32), and one update written out in plain torch:

    forward + loss under fp16 autocast -> backward of GradScaler's scaled loss / sample size
    -> torch's fused AdamW (``capturable=True``) stepped through GradScaler (an
    overflowing step skipped on the device, no read) -> the scaler's update (on the device)

Modes, each timed with the device synchronised after every ``--per-graph`` updates:

- ``eager``: that update from Python every time (the host's pace, as today);
- ``graph`` (``--per-graph 1``): captured once, after warm-up updates on a side stream,
  into one ``torch.cuda.CUDAGraph``; each update copies the next batch into the graph's
  static inputs and replays it: one launch an update;
- ``graph xK`` (``--per-graph K``): K updates on K static batches captured into one graph:
  one launch and one Python step for K updates.

A graph needs fixed shapes: every batch is padded to the largest of the preloaded ones
(the pairs hold 321-384 tokens, so 384 tokens, as ``--length-multiple 64`` pads the
compiled runs; spans with empty ``(0, 0)`` rows, which the span head reads as padding).
The learning rate is constant here (a schedule would copy a device tensor ``lr`` before
each replay). Reports updates/s, words/s, SM % (``nvidia-smi`` every 100 ms, as
``gpu_throughput.py``) and, with ``--hf-ups`` (Hugging Face's compiled ``Trainer`` on the
same card: ``hf_peer.py --compile``), the ratio to it. Goals (the issue): SM >= 80% at
base batch 32, >= 1.15x the compiled Trainer.

    python benchmarks/gpu_throughput.py --prepare .gpu/wiki-pairs     # CPU: the pairs
    python benchmarks/hf_peer.py --updates 200 --compile               # GPU: the peer's updates/s
    python benchmarks/gpu_graph_step.py --per-graph 1 4 --updates 200 --hf-ups UPS   # GPU
    python benchmarks/gpu_graph_step.py --quick      # CPU, tiny model: the update and the padding

Without a GPU (and without ``--quick``) it says so and exits 0.
"""

import argparse
import os
import statistics
import sys
import time

import torch

from common import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

DATA = os.path.join(ROOT, ".gpu", "wiki-pairs")


def static_batches(samples, pad):
    """The net inputs, targets and ids of fairseq ``samples`` (same batch size), each tensor
    padded to the largest of its kind: ``src_tokens`` with ``pad``, the rest (spans) with
    zeros. Returns ``(batches, words)``: dicts of tensors of one shape each, and each
    batch's real token count (``ntokens``)."""
    keys = sorted(samples[0]["net_input"])
    tensors = {k: [s["net_input"][k] for s in samples] for k in keys}
    tensors["target"] = [s["target"] for s in samples]
    tensors["id"] = [s["id"] for s in samples]
    out = [{} for _ in samples]
    for key, items in tensors.items():
        shape = [max(t.shape[d] for t in items) for d in range(items[0].dim())]
        for batch, t in zip(out, items):
            padded = torch.full(shape, pad if key == "src_tokens" else 0, dtype=t.dtype)
            padded[tuple(slice(0, n) for n in t.shape)] = t
            batch[key] = padded
    return out, [int(s["ntokens"]) for s in samples]


def as_sample(inputs):
    """A fairseq sample of the flat tensors of :func:`static_batches`."""
    return {"net_input": {k: v for k, v in inputs.items() if k not in ("target", "id")},
            "target": inputs["target"], "id": inputs["id"], "ntokens": 0}


def update_fn(model, criterion, optimizer, scaler, inputs, device):
    """One update on the tensors of ``inputs`` (a dict: net inputs, ``target`` and ``id``),
    with no read of the device: returns the loss tensor."""
    sample = as_sample(inputs)
    with torch.autocast(device.type, dtype=torch.float16 if device.type == "cuda"
                        else torch.bfloat16):
        loss, sample_size, _ = criterion(model, sample)
    scaler.scale(loss / sample_size).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def build(data, batch, quick):
    """``(model, criterion, batches on the device, words per batch, pad, samples)``:
    fairseq's span model and criterion (``span+amp``: fp32 weights), 8 real batches padded
    to one shape, and the same batches as fairseq gives them (on the CPU)."""
    from gpu_profile import build as fairseq_build

    trainer, _, batches = fairseq_build(data, "span+amp", batch, quick)
    samples = [next(batches) for _ in range(8)]
    samples = [s for s in samples if s["target"].shape[0] == batch] or samples[:1]
    samples = [{"net_input": {k: v.cpu() for k, v in s["net_input"].items()},
                "target": s["target"].cpu(), "id": s["id"].cpu(), "ntokens": s["ntokens"]}
               for s in samples]
    pad = trainer.task.source_dictionary.pad()
    device = torch.device("cpu" if quick else "cuda")
    statics, words = static_batches(samples, pad)
    statics = [{k: v.to(device) for k, v in b.items()} for b in statics]
    return (trainer.model.to(device).train(), trainer.criterion.to(device), statics, words,
            pad, samples)


def optimizer_and_scaler(model, device, lr=1e-5):
    """torch's fused AdamW (the recipes' betas, eps and decay; ``capturable`` on CUDA, so
    its step count lives on the device) and a GradScaler (enabled on CUDA)."""
    cuda = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-6,
                                  weight_decay=0.1, fused=cuda, capturable=cuda)
    scaler = torch.amp.GradScaler(device.type, enabled=cuda)
    return optimizer, scaler


def captured(step, statics, per_graph, warmup=3):
    """``replay(k)``: runs updates on batches k..k+per_graph-1 (mod len) as one graph
    replay. ``step(inputs)`` is one update; the graph reads ``per_graph`` static input
    sets, each refilled from ``statics`` before a replay."""
    inputs = [{k: v.clone() for k, v in statics[j % len(statics)].items()}
              for j in range(per_graph)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # allocations and lazy state made outside the capture
        for j in range(warmup):
            step(inputs[j % per_graph])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for j in range(per_graph):
            step(inputs[j])

    def replay(k):
        for j in range(per_graph):
            for name, t in inputs[j].items():
                t.copy_(statics[(k + j) % len(statics)][name], non_blocking=True)
        graph.replay()

    return replay


def timed(run, updates, per_graph, device):
    """Seconds per update: ``run(k)`` does ``per_graph`` updates; synchronised after each."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for k in range(0, updates, per_graph):
        start = time.perf_counter()
        run(k)
        sync()
        times.append((time.perf_counter() - start) / per_graph)
    return statistics.median(times[len(times) // 4:])  # the first quarter warms up


def quick_check():
    """CPU, tiny model: a batch padded to a longer static shape has the loss it had (eval
    mode), and the update, run eagerly on one batch, lowers its loss."""
    import shutil
    import tempfile

    from gpu_throughput import prepare

    work = tempfile.mkdtemp(prefix="graph_step_")
    try:
        prepare(os.path.join(work, "pairs"), count=64)
        model, criterion, statics, _, pad, samples = build(os.path.join(work, "pairs"), 8,
                                                           quick=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sample = samples[0]
    tokens = sample["net_input"]["src_tokens"]
    longer = dict(sample, net_input=dict(sample["net_input"], src_tokens=torch.cat(
        [tokens, torch.full((tokens.shape[0], 5), pad, dtype=tokens.dtype)], 1)))
    padded = static_batches([sample, longer], pad)[0][0]
    model.eval()
    with torch.no_grad():
        plain = float(criterion(model, sample)[0])
        wider = float(criterion(model, as_sample(padded))[0])
    print(f"quick check: loss of a batch {plain:.6f}, padded by 5 tokens to a static "
          f"shape {wider:.6f}")
    device = torch.device("cpu")  # eval mode: no dropout, so the loss falls step by step
    optimizer, scaler = optimizer_and_scaler(model, device, lr=1e-3)
    losses = [float(update_fn(model, criterion, optimizer, scaler, statics[0], device))
              for _ in range(4)]
    print(f"quick check: loss over 4 eager updates on one batch (eval mode, lr 1e-3): "
          f"{' '.join(f'{x:.4f}' for x in losses)}")
    print("quick check: the graph capture needs CUDA (not run here)")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DATA)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--per-graph", type=int, nargs="+", default=[1, 4])
    p.add_argument("--hf-ups", type=float, help="hf_peer.py --compile's updates/s, same card")
    p.add_argument("--quick", action="store_true", help="CPU, tiny model (no figure)")
    args = p.parse_args()
    import span_plugin

    span_plugin.register()  # the plugin's tasks and models, as fairseq-train's --user-dir loads them
    if args.quick:
        quick_check()
        return 0
    if not torch.cuda.is_available():
        print("gpu_graph_step: no GPU on this machine: nothing to measure (--quick checks "
              "the update on the CPU)")
        return 0
    from gpu_throughput import SmiSampler

    device = torch.device("cuda")
    model, criterion, statics, words, _, _ = build(args.data, args.batch, quick=False)
    optimizer, scaler = optimizer_and_scaler(model, device)

    def step(inputs):
        update_fn(model, criterion, optimizer, scaler, inputs, device)

    modes = {"eager": (lambda k: step(statics[k % len(statics)]), 1)}
    for k in args.per_graph:
        modes[f"graph x{k}"] = (captured(step, statics, k), k)
    print(f"{torch.cuda.get_device_name()}: base span model, batch {args.batch}, "
          f"{statics[0]['src_tokens'].shape[1]} tokens a row, fp16 autocast, fused AdamW")
    base = None
    for name, (run, per_graph) in modes.items():
        smi = SmiSampler()
        start = time.time()
        seconds = timed(run, args.updates, per_graph, device)
        end = time.time()
        smi.stop()
        sm, mem = smi.window(start + (end - start) / 4, end)
        ups = 1 / seconds
        base = base or ups
        vs_hf = f", {ups / args.hf_ups:.2f}x HF compiled Trainer" if args.hf_ups else ""
        print(f"  {name:10s} {ups:6.2f} updates/s, {ups * statistics.mean(words):,.0f} words/s, "
              f"SM {sm:.0f}%, {mem:.0f} MiB; {ups / base:.2f}x eager{vs_hf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
