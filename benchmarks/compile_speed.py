"""Compiled (``--compile``) against eager fine-tuning step time on the CPU.

One full training step (fairseq's ``Trainer.train_step``: forward, backward, Adam) of
``roberta_span_base`` with the paper's head (task span_classification, cnn-cnn), built
by fairseq's own setup twice from the same weights: eager, and with ``--compile``
(``torch.compile`` of the encoder and the head in place, inductor by default). Fixed
batch of B pair layouts filling T tokens, spans as the greedy segmenter makes them.
MiniLM-sized by default: 6 layers, H=384, 12 heads, FFN 1536, BERT's 30,522-row
vocabulary, dropout 0.1 as in fine-tuning. The compiled trainer's first steps build its
graph (timed: the compile cost); then the two alternate (eager, compiled, ...) after
a warm-up round, and the median of each is reported as wall time and as this
process's CPU time (on a machine shared with other jobs wall time mostly measures the
neighbours); likewise the model's forward and backward alone (the criterion's loss, no
optimizer): the part compilation changes.

    .venv/bin/python benchmarks/compile_speed.py [--batch 8] [--length 128] [--repeats 7]
    .venv/bin/python benchmarks/compile_speed.py --quick   # seconds: aot_eager, tiny model, B=2, T=32

The last line is the step-time ratio compiled / eager (CPU time, median).
"""

import argparse
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import MINILM, TINY  # noqa: E402
from head_overhead import build_trainer, make_batch, time_interleaved_cpu  # noqa: E402
from timing import timed  # noqa: E402
BERT_VOCAB = 30522


def make_dicts(folder, vocab):
    """A task folder holding only dictionaries: ``vocab`` symbols in input0 (fairseq adds
    its 4 specials and the task ``<mask>``), two labels."""
    os.makedirs(os.path.join(folder, "input0"), exist_ok=True)
    os.makedirs(os.path.join(folder, "label"), exist_ok=True)
    with open(os.path.join(folder, "input0", "dict.txt"), "w") as h:
        h.writelines(f"w{i} 1\n" for i in range(vocab - 5))
    with open(os.path.join(folder, "label", "dict.txt"), "w") as h:
        h.write("0 1\n1 1\n")
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--mode", default="default", help="--compile-mode")
    parser.add_argument("--quick", action="store_true",
                        help="a check in seconds: aot_eager, a tiny model (vocabulary 1000), B=2, "
                        "T=32, 1 repeat")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--model-args", nargs=argparse.REMAINDER, default=[],
                        help="extra fairseq model flags for both (e.g. --sentence-head plain)")
    args = parser.parse_args()
    model_args, vocab = MINILM, BERT_VOCAB
    if args.quick:
        args.backend, args.repeats, model_args, vocab = "aot_eager", 1, TINY, 1000
        args.batch, args.length = 2, 32
    if args.threads:
        torch.set_num_threads(args.threads)

    import span_plugin

    span_plugin.register()  # span_plugin is imported before fairseq here

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        data = make_dicts(tmp, vocab)
        extra = [*model_args, "--max-positions", "512", *args.model_args]
        eager, eager_model = build_trainer(data, span=True, extra=extra)
        compiled, compiled_model = build_trainer(data, span=True, extra=[
            *extra, "--compile", "--compile-backend", args.backend, "--compile-mode", args.mode])
    compiled_model.load_state_dict(eager_model.state_dict())  # compiled in place: same keys
    vocab = len(eager.task.source_dictionary)
    sample = make_batch(args.batch, args.length, 64, 16, vocab, torch.Generator().manual_seed(0))
    cfg = eager_model.args
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; roberta_span_base "
          f"{cfg.sentence_head} head ({cfg.span_encoder}), {cfg.encoder_layers} layers, H={cfg.encoder_embed_dim}, "
          f"{cfg.encoder_attention_heads} heads, FFN {cfg.encoder_ffn_embed_dim}, vocab {vocab}, "
          f"{sum(p.numel() for p in eager_model.parameters()):,} parameters; B={args.batch} "
          f"T={args.length}; compiled: backend {args.backend}, mode {args.mode}")

    first = timed(compiled.train_step, [sample])[0]  # wall seconds
    second = timed(compiled.train_step, [sample])[0]
    print(f"compiled: first step {first:.1f} s (graph built), second {second:.2f} s")
    step = time_interleaved_cpu({
        "eager": lambda: eager.train_step([sample]),
        "compiled": lambda: compiled.train_step([sample]),
    }, args.repeats)
    # The part compilation touches: the model's forward and backward (the criterion's
    # loss), without fairseq's bookkeeping and the optimizer.
    model_only = time_interleaved_cpu({
        "eager": lambda: forward_backward(eager, sample),
        "compiled": lambda: forward_backward(compiled, sample),
    }, args.repeats)
    print(f"\nmedian of {args.repeats} (after 1 warm-up); seconds, wall and process CPU")
    print(f"{'':>9} {'step wall':>10} {'step cpu':>9} {'fwd+bwd wall':>13} {'fwd+bwd cpu':>12}")
    for name in step:
        print(f"{name:>9} {step[name][0]:>10.3f} {step[name][1]:>9.3f} "
              f"{model_only[name][0]:>13.3f} {model_only[name][1]:>12.3f}")
    ratio = {k: [m["compiled"][i] / m["eager"][i] for i in (0, 1)] for k, m in
             (("step", step), ("model", model_only))}
    print(f"\nforward+backward ratio compiled / eager: cpu {ratio['model'][1]:.3f}, "
          f"wall {ratio['model'][0]:.3f}")
    print(f"step-time ratio compiled / eager (process CPU time, median): "
          f"{ratio['step'][1]:.3f} (wall {ratio['step'][0]:.3f})")


def forward_backward(trainer, sample):
    """The criterion's loss and its backward, in training mode (gradients left for the
    next ``train_step`` to zero)."""
    trainer.model.train()
    loss, _, _ = trainer.criterion(trainer.model, sample)
    loss.backward()


if __name__ == "__main__":
    main()
