"""Host work per fine-tuning update: operators dispatched and host-device syncs.

On a GPU every operator the training thread dispatches is (at least) one kernel launch,
and every synchronisation stalls the host until the device has caught up: at the small
batches of fine-tuning the two set the update time (issue 40). Both are counted here, on
the CPU, with the torch profiler, around fairseq's own ``Trainer.train_step`` (forward,
backward, optimizer, fairseq's per-update metric reduction) of the span model
(``span_classification``, cnn-cnn head) and of plain RoBERTa (``sentence_prediction``),
on the same batches as ``benchmarks/head_overhead.py``:

- operators: leaf ``aten::`` calls (an operator that calls no other operator), forward
  and backward, and of those the kernels: leaves other than views, allocations and
  no-op casts (each is one kernel launch on a GPU);
- syncs: the calls that make the host wait for the device: ``aten::_local_scalar_dense``
  (``.item()``, ``int(t)``, ``bool(t)``, ``.tolist()``), ``aten::nonzero``,
  ``aten::masked_select``, ``aten::unique*``; each is listed with its count. The CPU
  kernel of torch's fused AdamW reads each tensor's step count with ``item()``, which
  its CUDA kernel reads on the device: those are listed apart and not counted.

    .venv/bin/python benchmarks/host_work.py [--sizes minilm base] [--steps 3]
    .venv/bin/python benchmarks/host_work.py --optimizers adam torch_adamw   # fairseq's adam against the plugin's
    .venv/bin/python benchmarks/host_work.py --quick          # tiny model, seconds

Each optimizer ends with a line giving the span/plain operator ratio and both sync
counts per update (fp32 weights, as on the CPU and under ``--amp``: fairseq's ``adam``
then steps each parameter tensor in a Python loop, ``torch_adamw`` all of them at once).
"""

import argparse
import collections
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from head_overhead import GPT2_DICT, build_trainer, make_batch, make_dicts  # noqa: E402

# Leaf operators that launch no kernel on a GPU: views, allocations, no-op casts.
NO_KERNEL_OPS = frozenset(
    "aten::" + name for name in (
        "as_strided", "view", "_unsafe_view", "_reshape_alias", "alias", "empty", "empty_strided",
        "detach", "resolve_conj", "resolve_neg", "to", "lift_fresh", "set_", "resize_",
        "unsqueeze", "squeeze", "expand", "permute", "transpose", "t", "slice", "select",
        "reshape", "_to_copy_noop"))
SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select",
            "aten::unique", "aten::_unique2", "aten::unique_consecutive")
SIZES = {
    # name: fairseq model flags (both models), default sequence length
    "tiny": ["--encoder-layers", "2", "--encoder-embed-dim", "64", "--encoder-ffn-embed-dim",
             "128", "--encoder-attention-heads", "4"],
    "minilm": ["--encoder-layers", "6", "--encoder-embed-dim", "384", "--encoder-ffn-embed-dim",
               "1536", "--encoder-attention-heads", "12"],
    "base": [],
}


# Fused optimizer kernels whose CPU implementation reads each tensor's step count with
# ``item()`` where the CUDA kernel reads it on the device: not a sync on a GPU.
CPU_ONLY_READS = frozenset({"aten::_fused_adamw_", "aten::_fused_adam_"})


def inside(event, names):
    """Whether a profiler event runs inside an operator named in ``names``."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in names:
            return True
        parent = parent.cpu_parent
    return False


def count_step(trainer, sample, steps):
    """Per update, averaged over ``steps`` updates: (leaf operators, kernels,
    {sync op: count}); the step reads of fused optimizers' CPU kernels are counted apart,
    under ``fused step reads (CPU only)``."""
    trainer.train_step([sample])  # warm-up (optimizer state, lazy inits)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            trainer.train_step([sample])
    leaves, kernels, syncs = 0, 0, collections.Counter()
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        if event.name in SYNC_OPS:
            syncs["fused step reads (CPU only)" if inside(event, CPU_ONLY_READS) else event.name] += 1
        if not any(child.name.startswith("aten::") for child in event.cpu_children):
            leaves += 1
            kernels += event.name not in NO_KERNEL_OPS
    return leaves / steps, kernels / steps, {k: v / steps for k, v in syncs.items()}


def device_syncs(syncs):
    """The syncs a GPU would make: all but the fused kernels' CPU-only step reads."""
    return sum(v for k, v in syncs.items() if k.startswith("aten::"))


def measure(size, seq_len, batch, steps, optimizer="adam", r=64, l=16):
    """Operators and syncs per update of the span and the plain model at one size."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    extra = [*SIZES[size], "--optimizer", optimizer]
    with tempfile.TemporaryDirectory() as tmp:
        data = make_dicts(tmp, GPT2_DICT)
        span_trainer, _ = build_trainer(data, span=True, extra=extra)
        plain_trainer, _ = build_trainer(data, span=False, extra=extra)
    vocab = len(span_trainer.task.source_dictionary)
    sample = make_batch(batch, seq_len, r, l, vocab, generator)
    plain_sample = dict(sample, net_input={k: v for k, v in sample["net_input"].items() if k != "spans"})
    return {"span": count_step(span_trainer, sample, steps),
            "plain": count_step(plain_trainer, plain_sample, steps)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["minilm", "base"], choices=SIZES)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="profiled updates (after a warm-up)")
    parser.add_argument("--optimizers", nargs="+", default=["adam"], choices=["adam", "torch_adamw"])
    parser.add_argument("--quick", action="store_true", help="tiny model, one step: seconds")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.steps, args.seq_len = ["tiny"], 1, 64

    import span_plugin

    span_plugin.register()
    print(f"torch {torch.__version__}, CPU; B={args.batch}, T={args.seq_len}; per update "
          f"(fairseq Trainer.train_step), mean of {args.steps} after a warm-up")
    print(f"{'size':>7} {'model':>6} {'optimizer':>11} {'operators':>10} {'kernels':>8} {'syncs':>6}  sync ops")
    for optimizer in args.optimizers:
        summary = []
        for size in args.sizes:
            result = measure(size, args.seq_len, args.batch, args.steps, optimizer)
            for model, (ops, kernels, syncs) in result.items():
                detail = ", ".join(f"{k.removeprefix('aten::')} {v:g}" for k, v in sorted(syncs.items()))
                print(f"{size:>7} {model:>6} {optimizer:>11} {ops:>10.0f} {kernels:>8.0f} "
                      f"{device_syncs(syncs):>6g}  {detail}", flush=True)
            (span_ops, span_kernels, span_syncs), (plain_ops, plain_kernels, plain_syncs) = result["span"], result["plain"]
            summary.append(f"{size}: operators x{span_ops / plain_ops:.3f}, kernels "
                           f"x{span_kernels / plain_kernels:.3f}, syncs "
                           f"{device_syncs(span_syncs):g} vs {device_syncs(plain_syncs):g}")
        print(f"span / plain per update ({optimizer}): " + "; ".join(summary))


if __name__ == "__main__":
    main()
