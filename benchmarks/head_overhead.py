"""Cost of the span head in a real fine-tuning step, and against the dense formulation.

1. Full training step (forward, backward, optimizer; fairseq's Trainer.train_step):
   ``roberta_span_base`` (task span_classification, criterion span_classification,
   cnn-cnn head) against plain ``roberta_base`` (sentence_prediction criterion and
   head), both at base size (H=768, 12 layers, GPT-2 vocabulary), on the same batches
   (pair layout ``<s> A </s> </s> B </s>`` filling T tokens, spans as the greedy
   segmenter makes them, limited to r spans of at most l tokens). Runs alternate
   (span, plain, span, plain, ...) after a warm-up; the median of each is reported,
   as wall time and as this process's CPU time. The ratio is taken on CPU time: on a
   machine shared with other jobs, wall time mostly measures the neighbours.
2. Span head alone, forward + backward on ``[B, T, H]`` features: the packed, masked
   cnn-cnn encoder against the dense padded ``[B, r, l, H]`` formulation of the public
   reference code (``benchmarks/dense_span_head.py``: buffer by one gather, and filled
   by Python loops as the public code does).

    .venv/bin/python benchmarks/head_overhead.py [--batch 4] [--repeats 9] [--head-repeats 3]
    .venv/bin/python benchmarks/head_overhead.py --quick   # seconds: a tiny model, T=32

The last line is the step-time ratio (span / plain, CPU time), the largest over the lengths.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import GPT2_BPE, ROOT, TINY  # noqa: E402  (TINY: --quick)
from dense_span_head import (  # noqa: E402
    dense_span_encoder,
    dense_span_encoder_loop_filled,
    segmentation_like_spans,
)

GPT2_DICT = os.path.join(GPT2_BPE, "dict.txt")


def make_dicts(folder, dict_txt):
    """A task folder with only dictionaries (the benchmark builds its own batches)."""
    os.makedirs(os.path.join(folder, "input0"), exist_ok=True)
    os.makedirs(os.path.join(folder, "label"), exist_ok=True)
    with open(dict_txt, encoding="utf-8") as src, open(os.path.join(folder, "input0", "dict.txt"), "w") as dst:
        dst.write(src.read())
    with open(os.path.join(folder, "label", "dict.txt"), "w") as h:
        h.write("0 1\n1 1\n")
    return folder


def build_trainer(data, span, extra=()):
    """fairseq's own setup of task, model, criterion and Trainer, as fairseq-train."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    common = [
        data, "--user-dir", os.path.join(ROOT, "span_plugin"), "--num-classes", "2",
        "--init-token", "0", "--separator-token", "2", "--max-positions", "512",
        "--optimizer", "adam", "--lr", "1e-5", "--cpu", "--batch-size", "64",
        "--dropout", "0.1", "--attention-dropout", "0.1", *extra,
    ]
    if span:
        common += ["--task", "span_classification", "--criterion", "span_classification",
                   "--arch", "roberta_span_base", "--span-encoder", "cnn-cnn"]
    else:
        common += ["--task", "sentence_prediction", "--criterion", "sentence_prediction",
                   "--arch", "roberta_base"]
    args = options.parse_args_and_arch(options.get_training_parser(), common)
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    return Trainer(cfg, task, model, criterion), model


def make_batch(batch, seq_len, r, l, vocab, generator):
    """One batch for both models: tokens, the spans (r x l limits applied, as the
    task's dataset applies them) and labels."""
    from span_plugin.modules import clip_spans

    spans = clip_spans(segmentation_like_spans(batch, seq_len, generator), r, l)
    tokens = torch.randint(4, vocab, (batch, seq_len), generator=generator)
    tokens[:, 0] = 0
    tokens[:, seq_len // 2] = 2
    tokens[:, seq_len // 2 + 1] = 2
    tokens[:, -1] = 2
    return {
        "id": torch.arange(batch),
        "nsentences": batch,
        "ntokens": batch * seq_len,
        "net_input": {"src_tokens": tokens, "src_lengths": torch.full((batch,), seq_len), "spans": spans},
        "target": torch.randint(0, 2, (batch,), generator=generator),
    }


def time_interleaved_cpu(contenders, repeats):
    """Median wall and process-CPU seconds of each contender (a no-argument callable).

    Runs alternate (A, B, A, B, ...) after one warm-up round. On a machine shared with
    other jobs wall time mostly measures the neighbours; the CPU time of this process
    (all its threads) measures the work, so ratios are taken on CPU time.
    Returns ``{name: (wall, cpu)}``.
    """
    wall = {name: [] for name in contenders}
    cpu = {name: [] for name in contenders}
    for round_ in range(repeats + 1):
        for name, fn in contenders.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            w1, c1 = time.perf_counter(), time.process_time()
            if round_:
                wall[name].append(w1 - w0)
                cpu[name].append(c1 - c0)
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in contenders}


def _fwd_bwd(fn, features):
    def run():
        leaf = features.detach().requires_grad_(True)
        fn(leaf).sum().backward()
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--r", type=int, default=64)
    parser.add_argument("--l", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--head-batch", type=int, default=16, help="batch of the head-only figure")
    parser.add_argument("--head-repeats", type=int, default=3, help="repeats of the head-only figure")
    parser.add_argument("--dict", default=GPT2_DICT, help="fairseq dict.txt (vocabulary size)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--model-args", nargs=argparse.REMAINDER, default=[],
                        help="extra fairseq model flags for both models (e.g. smaller dims)")
    parser.add_argument("--quick", action="store_true",
                        help="a check in seconds: tiny model, B=2, T=32, r=8, l=4, 1 repeat")
    args = parser.parse_args()
    if args.quick:
        args.batch, args.seq_lens, args.r, args.l = 2, [32], 8, 4
        args.repeats, args.head_batch, args.head_repeats = 1, 2, 1
        args.model_args = TINY + args.model_args
    if args.threads:
        torch.set_num_threads(args.threads)

    import span_plugin

    span_plugin.register()  # span_plugin is imported before fairseq here

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        data = make_dicts(tmp, args.dict)
        span_trainer, span_model = build_trainer(data, span=True, extra=args.model_args)
        plain_trainer, plain_model = build_trainer(data, span=False, extra=args.model_args)
    vocab = len(span_trainer.task.source_dictionary)
    n_span = sum(p.numel() for p in span_model.parameters())
    n_plain = sum(p.numel() for p in plain_model.parameters())
    dim = span_model.args.encoder_embed_dim
    encoder = span_model.classification_heads["sentence_classification_head"].span_encoder

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; H={dim}, "
          f"{span_model.args.encoder_layers} layers, vocab {vocab}; r={args.r} l={args.l}; "
          f"median of {args.repeats} (after 1 warm-up)")
    print(f"parameters: roberta_span_base {n_span:,}, roberta_base {n_plain:,}, "
          f"extra {n_span - n_plain:,} (6H^2 = {6 * dim * dim:,}; span encoder "
          f"{sum(p.numel() for p in encoder.parameters()):,})")

    print(f"\n1. full training step, B={args.batch} (Trainer.train_step: forward, backward, adam); "
          f"seconds, wall and process CPU")
    print(f"{'T':>5} {'spans':>6} {'plain wall':>11} {'span wall':>10} {'plain cpu':>10} "
          f"{'span cpu':>9} {'ratio wall':>11} {'ratio cpu':>10}")
    step_ratios = []
    for seq_len in args.seq_lens:
        sample = make_batch(args.batch, seq_len, args.r, args.l, vocab, generator)
        plain_sample = dict(sample, net_input={k: v for k, v in sample["net_input"].items() if k != "spans"})
        m = time_interleaved_cpu({
            "span": lambda: span_trainer.train_step([sample]),
            "plain": lambda: plain_trainer.train_step([plain_sample]),
        }, args.repeats)
        ratio_wall = m["span"][0] / m["plain"][0]
        ratio_cpu = m["span"][1] / m["plain"][1]
        step_ratios.append(ratio_cpu)
        print(f"{seq_len:>5} {sample['net_input']['spans'].size(1):>6} {m['plain'][0]:>11.3f} "
              f"{m['span'][0]:>10.3f} {m['plain'][1]:>10.3f} {m['span'][1]:>9.3f} "
              f"{ratio_wall:>11.3f} {ratio_cpu:>10.3f}", flush=True)

    from span_plugin.modules import clip_spans

    print(f"\n2. span head alone, forward+backward, B={args.head_batch}, H={dim}, "
          f"median of {args.head_repeats}; process CPU ms (wall ms)")
    print(f"{'T':>5} {'packed':>16} {'dense-gather':>16} {'dense-loops':>16} "
          f"{'x vs gather':>12} {'x vs loops':>11}")
    for seq_len in args.seq_lens:
        spans = segmentation_like_spans(args.head_batch, seq_len, generator)
        features = torch.randn(args.head_batch, seq_len, dim, generator=generator)
        m = time_interleaved_cpu({
            "packed": _fwd_bwd(lambda f: encoder(f, clip_spans(spans, args.r, args.l)), features),
            "gather": _fwd_bwd(lambda f: dense_span_encoder(encoder, f, spans, args.r, args.l), features),
            "loops": _fwd_bwd(lambda f: dense_span_encoder_loop_filled(encoder, f, spans, args.r, args.l), features),
        }, args.head_repeats)
        cell = {k: f"{v[1] * 1e3:.0f} ({v[0] * 1e3:.0f})" for k, v in m.items()}
        print(f"{seq_len:>5} {cell['packed']:>16} {cell['gather']:>16} {cell['loops']:>16} "
              f"{m['gather'][1] / m['packed'][1]:>12.2f} {m['loops'][1] / m['packed'][1]:>11.2f}", flush=True)

    print("\nstep-time ratio roberta_span_base / roberta_base (process CPU time, median): " + ", ".join(
        f"T={t}: {r:.3f}" for t, r in zip(args.seq_lens, step_ratios)) + f"; max {max(step_ratios):.3f}")


if __name__ == "__main__":
    main()
