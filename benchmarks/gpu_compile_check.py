"""Compiled against eager on a GPU: the check the CPU suite cannot make.

``tests/test_compile.py`` proves the compiled fine-tuning path equal to the eager one on
the CPU, with ``aot_eager`` (inductor needs minutes per graph there). This runs inductor
on CUDA, the code a GPU run executes: the span model (``roberta_span_base``, cnn-cnn
head) built by fairseq's own task setup, real batches of the long-pair folder of
``benchmarks/gpu_throughput.py``, dropout 0, one forward and backward each, eager and
compiled (``--compile-mode`` default and reduce-overhead) from the same weights, in
fp32 (TF32 off), fp16 or bf16, and the same eager step in float64 as the reference.
Reported per dtype and mode: the relative loss difference and the largest gradient
difference between compiled and eager (see :func:`distances`), the parameter it occurs
at and both steps' distances from float64 there. A compiled step passes when it is no
further from float64 than twice the eager step of its precision, or within the
tolerance (see :func:`judge`: a max over near-equal fp16 values can send a gradient to
another token under either kernel).

    python benchmarks/gpu_compile_check.py [--data .gpu/wiki-pairs] [--batch 16]
    python benchmarks/gpu_compile_check.py --quick    # CPU, tiny model, aot_eager

Exits 1 when a compiled step fails that test (tolerance: fp32 1e-3, fp16 2e-2, bf16 5e-2).
"""

import argparse
import copy
import os
import sys

import torch

from common import ROOT, encoder_flags

TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 5e-2}
TINY = encoder_flags(encoder_embed_dim=64, encoder_ffn_embed_dim=128)  # gpu_throughput.py's tiny


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


def distances(reference, other):
    """(relative loss difference, {parameter: relative gradient difference}) of ``other``
    from ``reference`` (each a ``step`` result).

    A parameter's difference is ``|g - g_ref| / (|g_ref| + 1e-3 |G_ref|)`` (norms; G: every
    gradient together): the floor keeps gradients that are zero in exact arithmetic
    (the key projection's bias, which softmax cancels) from turning rounding noise
    into a large relative error, as they did in the first GPU run of this check."""
    (l_ref, g_ref), (l_other, g_other) = reference, other
    missing = set(g_ref) ^ set(g_other)
    if missing:
        raise AssertionError(f"gradients missing: {sorted(missing)[:3]}")
    loss = float((l_other - l_ref).abs() / l_ref.abs().clamp(min=1e-12))
    floor = 1e-3 * float(torch.stack([g.norm() for g in g_ref.values()]).norm())
    return loss, {name: float((g_other[name] - g).norm()) / (float(g.norm()) + floor)
                  for name, g in g_ref.items()}


def judge(reference, eager, compiled, tolerance):
    """Compiled against eager, both against the float64 eager ``reference``.

    Rounding alone moves a low-precision step away from exact arithmetic, and more
    where a max picks its arg-max among near-equal values (the span head's poolings:
    two kernels that round a conv output differently can send a gradient to another
    token). So the compiled step passes when, per parameter and for the loss, it is no
    further from the reference than twice the eager step of the same precision is,
    or within ``tolerance`` of it. Returns (loss diff to eager, worst gradient diff to
    eager and its parameter, worst excess line or "")."""
    loss_e, grads_e = distances(reference, eager)
    loss_c, grads_c = distances(reference, compiled)
    loss, grads = distances(eager, compiled)
    where = max(grads, key=grads.get)
    excess = ""
    if loss_c > max(2 * loss_e, tolerance):
        excess = f"loss {loss_c:.2e} from float64 against eager's {loss_e:.2e}"
    for name, err in grads_c.items():
        if err > max(2 * grads_e[name], tolerance):
            excess = f"{name}: {err:.2e} from float64 against eager's {grads_e[name]:.2e}"
            break
    return loss, grads[where], f"{where} (eager {grads_e[where]:.1e}, compiled {grads_c[where]:.1e} " \
        f"from float64)", excess


def _to(dtype):
    """Cast a sample's floating tensors to ``dtype`` (tokens and spans stay integers)."""
    return lambda t: t.to(dtype) if t.is_floating_point() else t


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
    names = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    cases = [("fp32", "default")] if quick else [tuple(c.split(":")) for c in args.cases]
    failed = False
    print(f"{'dtype':>8} {'mode':>16} {'batch':>5} {'T':>4} {'loss rel diff':>14} "
          f"{'worst grad rel diff':>20}  parameter (each step's distance from float64)")
    reference = copy.deepcopy(model).to(device=device, dtype=torch.float64).train()
    references = [step(reference, criterion, utils.apply_to_sample(_to(torch.float64), s)) for s in samples]
    del reference
    for dtype_name, mode in cases:
        dtype = names[dtype_name]
        eager = copy.deepcopy(model).to(device=device, dtype=dtype).train()
        compiled = copy.deepcopy(eager)
        compiled.args.compile_mode = mode
        compiled.args.compile_backend = "aot_eager" if quick else "inductor"
        compiled.compile_for_training()
        for sample, ref in zip(samples, references):
            sample = utils.apply_to_sample(_to(dtype), sample)
            loss, grad, where, excess = judge(ref, step(eager, criterion, sample),
                                              step(compiled, criterion, sample), TOLERANCE[dtype])
            failed |= bool(excess)
            tokens = sample["net_input"]["src_tokens"]
            print(f"{str(dtype).removeprefix('torch.'):>8} {mode:>16} {tokens.size(0):>5} "
                  f"{tokens.size(1):>4} {loss:>14.2e} {grad:>20.2e}  {where}"
                  f"{'  <- over: ' + excess if excess else ''}", flush=True)
    print("compiled = eager within tolerance" if not failed else "compiled differs from eager")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
