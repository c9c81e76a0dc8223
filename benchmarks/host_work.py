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
    .venv/bin/python benchmarks/host_work.py --loop [--sizes minilm base] [--precisions amp fp16 fp32]
    .venv/bin/python benchmarks/host_work.py --loop --quick   # tiny model, one precision

``--loop`` counts the device reads of whole updates of fairseq-train's own loop
(``fairseq_cli.train.main``: the train loop, ``Trainer.train_step``, logging every
``--log-interval`` updates) on real MRPC rows, with the plugin's one-read update
(``span_plugin/runtime/update_reads.py``) and with fairseq's (``SPAN_PLUGIN_FAIRSEQ_UPDATE=1``),
span and plain. Reads are counted by a dispatch mode: the sync operators above on any
tensor except copies the update already brought to the host (and what is computed from
them only), which a GPU run reads without waiting; each ``read_once`` counts as one.
``--amp`` runs with an enabled CPU GradScaler, so its device path is the one a GPU takes.
Each line: reads per update between log boundaries (mean, max) and at the boundaries.

Each optimizer ends with a line giving the span/plain operator ratio and both sync
counts per update (fp32 weights, as on the CPU and under ``--amp``: fairseq's ``adam``
then steps each parameter tensor in a Python loop, ``torch_adamw`` all of them at once).
"""

import argparse
import collections
import contextlib
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import traceback

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from span_plugin.runtime import update_reads

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import GLUE, MINILM, ROOT, encoder_flags  # noqa: E402
from common import GPT2_BPE as GPT2_DIR  # noqa: E402
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
    "tiny": encoder_flags(encoder_embed_dim=64, encoder_ffn_embed_dim=128, encoder_attention_heads=4),
    "minilm": MINILM,
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


# ----------------------------------------------------------------------------------
# --loop: device reads per update of fairseq-train's own loop

# fp16 flattens its fp32 master weights on a CUDA device only: unflattened here (the same reads)
PRECISION_FLAGS = {"fp32": [], "amp": ["--amp"],
                   "fp16": ["--fp16", "--fp16-init-scale", "4", "--fp16-no-flatten-grads"]}
# Datasets index CPU tensors on any machine (batches reach the device in _prepare_sample)
DATA_PIPELINE = (f"{os.sep}fairseq{os.sep}data{os.sep}", f"{os.sep}span_plugin{os.sep}data{os.sep}",
                 f"{os.sep}torch{os.sep}utils{os.sep}data{os.sep}")


class ReadCounter(TorchDispatchMode):
    """Counts, per training update, the operators that make a GPU's host wait.

    A tensor that ``update_reads.read_once`` returned is already on the host, and so is
    every result computed from such tensors alone: reading those waits for nothing; nor
    do the datasets' reads of the CPU tensors they index. Each ``read_once`` counts one."""

    def __init__(self):
        super().__init__()
        self.update = 0
        self.reads = collections.Counter()  # update -> reads
        self.sites = collections.Counter()  # (op, call site) -> reads

    def __enter__(self):
        read_once = self._read_once = update_reads.read_once

        def counted_read_once(*scalars):
            self.record("span_plugin::read_once")
            return read_once(*scalars)

        update_reads.read_once = counted_read_once
        return super().__enter__()

    def __exit__(self, *exc):
        update_reads.read_once = self._read_once
        return super().__exit__(*exc)

    def record(self, name):
        stack = traceback.extract_stack()[:-2]
        if any(part in f.filename for f in stack for part in DATA_PIPELINE):
            return
        self.reads[self.update] += 1
        frames = [f for f in stack if f"{os.sep}torch{os.sep}" not in f.filename and f.filename != __file__]
        site = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in frames[-2:][::-1])
        self.sites[(name, site)] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_host = bool(tensors) and all(update_reads.is_host_copy(t) for t in tensors)
        name = "aten::" + func.__name__.split(".")[0]
        if name in SYNC_OPS and not on_host:
            self.record(name)
        out = func(*args, **kwargs)
        if on_host:
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    update_reads.mark_host_copy(t)
        return out


def mrpc_folder(root, rows=64):
    """A span_classification folder of the first ``rows`` real MRPC train and dev rows,
    made by span-preprocess (fairseq's sentence_prediction reads the same folder)."""
    glue = os.path.join(root, "glue", "MRPC")
    os.makedirs(glue)
    for split in ("train", "dev"):
        with open(os.path.join(GLUE, "MRPC", f"{split}.tsv"), encoding="utf-8") as src:
            lines = src.readlines()[: rows + 1]
        with open(os.path.join(glue, f"{split}.tsv"), "w", encoding="utf-8") as dst:
            dst.writelines(lines)
    with open(os.path.join(glue, "test.tsv"), "w", encoding="utf-8") as dst:
        dst.write("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
    out = os.path.join(root, "MRPC-bin")
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "span-preprocess"), "glue",
                    "--task", "MRPC", "--glue-dir", os.path.join(root, "glue"), "--out", out,
                    "--gpt2-encoder-json", os.path.join(GPT2_DIR, "encoder.json"),
                    "--gpt2-vocab-bpe", os.path.join(GPT2_DIR, "vocab.bpe"),
                    "--srcdict", os.path.join(GPT2_DIR, "dict.txt"), "--workers", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    return out


@contextlib.contextmanager
def cpu_grad_scaler():
    """fairseq's AMP wrapper makes ``torch.cuda.amp.GradScaler``, disabled on the CPU:
    here an enabled CPU GradScaler takes its place, so ``--amp`` takes the GPU's path."""
    from fairseq.optim.amp_optimizer import AMPOptimizer

    init = AMPOptimizer.__init__

    def enabled_init(self, cfg, params, fp32_optimizer, **kwargs):
        init(self, cfg, params, fp32_optimizer, **kwargs)
        self._grad_scaler = torch.amp.GradScaler("cpu", init_scale=cfg.common.fp16_init_scale)

    AMPOptimizer.__init__ = enabled_init
    try:
        yield
    finally:
        AMPOptimizer.__init__ = init


def loop_reads(data, save_dir, size, span, precision, optimizer, one_read, updates, log_interval):
    """Reads per update of ``fairseq_cli.train.main`` over ``updates`` updates:
    ({update: reads}, {(op, site): reads}); updates count from 1, reads after the last
    update's step (the train loop's) go to that update."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer
    from fairseq_cli import train

    model = (["--task", "span_classification", "--criterion", "span_classification",
              "--arch", "roberta_span_base"] if span else
             ["--task", "sentence_prediction", "--criterion", "sentence_prediction", "--arch", "roberta_base"])
    args = options.parse_args_and_arch(options.get_training_parser(), [
        data, "--user-dir", os.path.join(ROOT, "span_plugin"), *model, *SIZES[size],
        "--num-classes", "2", "--init-token", "0", "--separator-token", "2", "--max-positions", "512",
        "--optimizer", optimizer, "--lr", "1e-5", "--clip-norm", "1.0", "--batch-size", "8", "--cpu",
        "--max-update", str(updates), "--log-interval", str(log_interval), "--log-format", "simple",
        "--no-progress-bar", "--disable-validation", "--no-save", "--save-dir", save_dir, "--seed", "1",
        # batches loaded in this process: a loader worker reads no device, and one left
        # behind by a run that stops mid-epoch costs seconds to join when collected
        "--num-workers", "0", *PRECISION_FLAGS[precision]])
    cfg = convert_namespace_to_omegaconf(args)
    counter = ReadCounter()
    train_step = Trainer.train_step

    def counted_train_step(self, samples, raise_oom=False):
        if counter.update == self.get_num_updates():  # not an AMP retry of the same update
            counter.update += 1
        return train_step(self, samples, raise_oom)

    saved = os.environ.pop(update_reads.OPT_OUT, None)
    if not one_read:
        os.environ[update_reads.OPT_OUT] = "1"
    Trainer.train_step = counted_train_step
    logging.disable(logging.WARNING)
    try:
        with cpu_grad_scaler(), counter:
            train.main(cfg)
    finally:
        Trainer.train_step = train_step
        logging.disable(logging.NOTSET)
        os.environ.pop(update_reads.OPT_OUT, None)
        if saved is not None:
            os.environ[update_reads.OPT_OUT] = saved
    return counter.reads, counter.sites


def summarize(reads, updates, log_interval):
    """(mean, max) reads of the updates strictly between log boundaries (not the first,
    whose lazy set-up reads once), and the mean at the boundaries."""
    between = [reads[u] for u in range(2, updates + 1) if u % log_interval]
    boundary = [reads[u] for u in range(1, updates + 1) if u % log_interval == 0]
    return statistics.mean(between), max(between), statistics.mean(boundary)


def main_loop(args):
    updates, log_interval = args.updates, args.log_interval
    print(f"torch {torch.__version__}, CPU; fairseq_cli.train.main, {updates} updates of 8 real MRPC "
          f"pairs, --log-interval {log_interval}; device reads per update")
    print(f"{'size':>7} {'model':>6} {'precision':>9} {'update':>14} {'between (mean, max)':>20} {'at a log':>9}")
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        data = mrpc_folder(tmp)
        for size in args.sizes:
            for precision in args.precisions:
                for span in (True, False):
                    row = {}
                    for one_read in (False, True):
                        reads, sites = loop_reads(data, os.path.join(tmp, "save"), size, span, precision,
                                                  args.optimizer, one_read, updates, log_interval)
                        mean, most, at_log = summarize(reads, updates, log_interval)
                        row[one_read] = most
                        name = "plugin (1 read)" if one_read else "fairseq"
                        print(f"{size:>7} {'span' if span else 'plain':>6} {precision:>9} {name:>14} "
                              f"{mean:>12.2f}, {most:>5} {at_log:>9.1f}", flush=True)
                        if args.sites:
                            per_update = {k: v / updates for k, v in sites.items()}
                            for (op, site), n in sorted(per_update.items(), key=lambda kv: -kv[1]):
                                print(f"{'':>10}{n:6.2f}  {op.removeprefix('aten::')}  {site}")
                    summary.append(f"{size} {'span' if span else 'plain'} {precision}: {row[False]} -> {row[True]}")
    print("most reads per update between log boundaries, fairseq -> plugin: " + "; ".join(summary))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["minilm", "base"], choices=SIZES)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="profiled updates (after a warm-up)")
    parser.add_argument("--optimizers", nargs="+", default=["adam"], choices=["adam", "torch_adamw"])
    parser.add_argument("--quick", action="store_true", help="tiny model, one step: seconds")
    parser.add_argument("--loop", action="store_true",
                        help="count device reads per update of fairseq-train's loop (see above)")
    parser.add_argument("--precisions", nargs="+", default=["amp", "fp16", "fp32"], choices=PRECISION_FLAGS)
    parser.add_argument("--optimizer", default="torch_adamw", choices=["adam", "torch_adamw"],
                        help="--loop: the optimizer (torch_adamw: AMP's device path)")
    parser.add_argument("--updates", type=int, default=8, help="--loop: updates a run")
    parser.add_argument("--log-interval", type=int, default=4, help="--loop: fairseq's --log-interval")
    parser.add_argument("--sites", action="store_true", help="--loop: list each read's call site")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.steps, args.seq_len = ["tiny"], 1, 64
        if args.loop:
            args.precisions = args.precisions if "--precisions" in sys.argv else ["amp"]

    import span_plugin

    span_plugin.register()
    if args.loop:
        return main_loop(args)
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
