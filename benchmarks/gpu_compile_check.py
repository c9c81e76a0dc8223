"""Compiled against eager on a GPU: the check the CPU suite cannot make (issue 40).

``tests/test_compile.py`` proves the compiled fine-tuning path equal to the eager one on
the CPU, with ``aot_eager`` (inductor needs minutes per graph there). This runs inductor
on CUDA, the code a GPU run executes: the span model (``roberta_span_base``, cnn-cnn
head) built by fairseq's own task setup, real batches of the long-pair folder of
``benchmarks/gpu_throughput.py``, dropout 0, one forward and backward each, eager and
compiled (``--compile-mode`` default and reduce-overhead) from the same weights, in
fp32 (TF32 off) and fp16. Reported per dtype and mode: the relative loss difference and
the largest gradient difference over the parameters (see :func:`compare`), and the
parameter it occurs at.

    python benchmarks/gpu_compile_check.py [--data .gpu/wiki-pairs] [--batch 16]
    python benchmarks/gpu_compile_check.py --quick    # CPU, tiny model, aot_eager

Exits 1 when a difference passes the tolerance (fp32 1e-3, fp16 2e-2).
"""

import argparse
import copy
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2}
TINY = ["--encoder-layers", "2", "--encoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128",
        "--encoder-attention-heads", "2"]


def build(data, batch, extra):
    """Task, eager span model and criterion as fairseq-train builds them, and two real
    validation batches."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [
        data, "--user-dir", os.path.join(ROOT, "span_plugin"), "--task", "span_classification",
        "--criterion", "span_classification", "--arch", "roberta_span_base", "--num-classes", "2",
        "--init-token", "0", "--separator-token", "2", "--max-positions", "512",
        "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0",
        "--pooler-dropout", "0", "--span-dropout", "0", "--length-multiple", "64",
        "--batch-size", str(batch), "--optimizer", "adam", "--lr", "1e-5", "--seed", "1", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("valid")
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=batch, seed=1).next_epoch_itr(shuffle=False)
    return model, criterion, [next(itr), next(itr)]


def step(model, criterion, sample):
    """Loss and gradients (name -> tensor) of one training step, without an optimizer."""
    model.zero_grad(set_to_none=True)
    loss, _, _ = criterion(model, sample)
    loss.backward()
    return loss.detach().float(), {n: p.grad.detach().float() for n, p in model.named_parameters()
                                   if p.grad is not None}


def compare(eager, compiled):
    """(relative loss difference, worst gradient difference, its parameter).

    A parameter's difference is ``|g_c - g_e| / (|g_e| + 1e-3 |G_e|)`` (norms; G: every
    gradient together): the floor keeps gradients that are zero in exact arithmetic
    (the key projection's bias, which softmax cancels) from turning rounding noise
    into a large relative error, as they did in the first GPU run of this check."""
    (le, ge), (lc, gc) = eager, compiled
    missing = set(ge) ^ set(gc)
    if missing:
        return float("inf"), float("inf"), f"gradients missing: {sorted(missing)[:3]}"
    loss = float((lc - le).abs() / le.abs().clamp(min=1e-12))
    floor = 1e-3 * float(torch.stack([g.norm() for g in ge.values()]).norm())
    worst, where = 0.0, ""
    for name, g in ge.items():
        rel = float((gc[name] - g).norm()) / (float(g.norm()) + floor)
        if rel > worst:
            worst, where = rel, name
    return loss, worst, where


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.path.join(ROOT, ".gpu", "wiki-pairs"))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--cases", nargs="+", default=["fp32:default", "fp32:reduce-overhead",
                                                       "fp16:default", "fp16:reduce-overhead"],
                        help="DTYPE:MODE pairs to check (GPU)")
    parser.add_argument("--quick", action="store_true", help="CPU, tiny model, aot_eager: seconds")
    args = parser.parse_args()
    import span_plugin

    span_plugin.register()
    quick = args.quick or not torch.cuda.is_available()
    if quick and not args.quick:
        print("gpu_compile_check: no GPU here; running the --quick CPU check instead")
    if not os.path.isdir(args.data):  # the folder of gpu_throughput.py, built the same way
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from gpu_throughput import prepare

        prepare(args.data, count=64 if quick else 3200)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1)
    model, criterion, samples = build(args.data, args.batch, TINY + ["--cpu"] if quick else [])
    device = "cpu" if quick else "cuda"
    from fairseq import utils

    samples = [utils.move_to_cuda(s) if device == "cuda" else s for s in samples]
    names = {"fp32": torch.float32, "fp16": torch.float16}
    cases = [("fp32", "default")] if quick else [tuple(c.split(":")) for c in args.cases]
    failed = False
    print(f"{'dtype':>8} {'mode':>16} {'batch':>5} {'T':>4} {'loss rel diff':>14} "
          f"{'worst grad rel diff':>20}  parameter")
    for dtype_name, mode in cases:
        dtype = names[dtype_name]
        eager = copy.deepcopy(model).to(device=device, dtype=dtype).train()
        compiled = copy.deepcopy(eager)
        compiled.args.compile_mode = mode
        compiled.args.compile_backend = "aot_eager" if quick else "inductor"
        compiled.compile_for_training()
        for i, sample in enumerate(samples):
            if dtype == torch.float16:
                sample = utils.apply_to_sample(lambda t: t.half() if t.is_floating_point() else t, sample)
            loss, grad, where = compare(step(eager, criterion, sample), step(compiled, criterion, sample))
            ok = loss <= TOLERANCE[dtype] and grad <= TOLERANCE[dtype]
            failed |= not ok
            tokens = sample["net_input"]["src_tokens"]
            print(f"{str(dtype).removeprefix('torch.'):>8} {mode:>16} {tokens.size(0):>5} "
                  f"{tokens.size(1):>4} {loss:>14.2e} {grad:>20.2e}  {where}{'' if ok else '  <- over'}",
                  flush=True)
    print("compiled = eager within tolerance" if not failed else "compiled differs from eager")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
