"""fairseq's ``adam`` against the plugin's ``torch_adamw``, per update on the CPU.

fairseq's ``Trainer.train_step`` of the span model (``span_classification``, cnn-cnn
head) in fp32, as CPU fine-tuning and ``--amp`` run it: the same model, weights and
batches, only ``--optimizer`` differs. Updates alternate (adam, torch_adamw, ...) after
a warm-up; the figure is the median process-CPU time of an update and the ratio
torch_adamw / adam. Operator counts of the same step: ``benchmarks/host_work.py
--optimizers adam torch_adamw``.

    .venv/bin/python benchmarks/optimizer_step.py [--size minilm] [--repeats 20]
    .venv/bin/python benchmarks/optimizer_step.py --quick     # tiny model: seconds
"""

import argparse
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from head_overhead import GPT2_DICT, build_trainer, make_batch, make_dicts, time_interleaved_cpu  # noqa: E402
from host_work import SIZES  # noqa: E402

OPTIMIZERS = ("adam", "torch_adamw")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="minilm", choices=SIZES)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=20, help="timed updates of each optimizer")
    parser.add_argument("--quick", action="store_true", help="tiny model, 3 updates each: seconds")
    args = parser.parse_args()
    if args.quick:
        args.size, args.seq_len, args.batch, args.repeats = "tiny", 64, 4, 3

    import span_plugin

    span_plugin.register()
    generator = torch.Generator().manual_seed(0)
    trainers = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = make_dicts(tmp, GPT2_DICT)
        for name in OPTIMIZERS:
            torch.manual_seed(0)  # the same initial weights for both
            trainers[name], _ = build_trainer(data, span=True, extra=[*SIZES[args.size], "--optimizer", name])
    vocab = len(trainers["adam"].task.source_dictionary)
    sample = make_batch(args.batch, args.seq_len, 64, 16, vocab, generator)
    params = sum(1 for _ in trainers["adam"].model.parameters())
    timings = time_interleaved_cpu({name: (lambda t=t: t.train_step([sample])) for name, t in trainers.items()},
                                   args.repeats)
    print(f"torch {torch.__version__}, CPU, {torch.get_num_threads()} thread(s); span model {args.size} "
          f"({params} parameter tensors), B={args.batch}, T={args.seq_len}, fp32; median of {args.repeats} "
          "updates each, interleaved")
    for name, (wall, cpu) in timings.items():
        print(f"{name:>12}: {1000 * cpu:8.1f} ms CPU ({1000 * wall:.1f} ms wall) an update")
    print(f"update CPU time torch_adamw / adam (median): {timings['torch_adamw'][1] / timings['adam'][1]:.3f}")


if __name__ == "__main__":
    main()
