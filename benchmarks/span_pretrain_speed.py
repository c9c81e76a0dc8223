"""Does span masking keep up with training, and what does the SBO head cost?

1. Masking: blocks of T tokens of real WikiText-2 (GPT-2 BPE, ``--sample-break-mode
   none``: full blocks), masked by the task's own masker with each ``--masking`` scheme
   (word starts, then geometric spans / whole words / single tokens, 80/10/10), in this
   process: blocks per second of process CPU time.
2. A base-size (12 layers, H = 768, GPT-2 vocabulary) ``roberta_spanbert_base`` training
   step through fairseq's ``Trainer.train_step`` (forward, backward, Adam) on B masked
   blocks, with the SBO head (criterion ``--sbo-weight 1``) and without it (``0``: the
   plain masked-LM step of the same model), interleaved after a warm-up; medians of
   process CPU time (this machine is shared: wall time mostly measures the neighbours).

    .venv/bin/python benchmarks/span_pretrain_speed.py [--tokens 512] [--batch 2] [--repeats 3]
    .venv/bin/python benchmarks/span_pretrain_speed.py --quick   # seconds: tiny model, T=64

Targets: masking >= 20x the sequences/s of the training step; SBO <= +10 % of the step.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import DATA, ROOT, TINY  # noqa: E402
from common import GPT2_BPE as BPE  # noqa: E402
from head_overhead import time_interleaved_cpu  # noqa: E402

WIKI = os.path.join(DATA, "wikitext-2", "wiki.valid.tokens")


def prepare(folder, lines):
    """A binarized folder of the first ``lines`` lines of WikiText-2 (valid split too)."""
    from span_plugin.preprocess.binary.binarize import binarize_file, write_dict
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec

    spec = EncoderSpec(encoder_json=os.path.join(BPE, "encoder.json"),
                       vocab_bpe=os.path.join(BPE, "vocab.bpe"))
    with open(WIKI, encoding="utf-8") as f:
        text = "".join(line for _, line in zip(range(lines), f))
    path = os.path.join(folder, "text.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    for split in ("train", "valid"):
        binarize_file(path, os.path.join(folder, split), spec, os.path.join(BPE, "dict.txt"))
    write_dict(os.path.join(BPE, "dict.txt"), folder)
    return folder


def build_trainer(data, tokens, batch, extra=()):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    args = options.parse_args_and_arch(options.get_training_parser(), [
        data, "--user-dir", os.path.join(ROOT, "span_plugin"), "--task", "spanbert_masked_lm",
        "--criterion", "spanbert_masked_lm", "--arch", "roberta_spanbert_base",
        "--tokens-per-sample", str(tokens), "--encoder-json", os.path.join(BPE, "encoder.json"),
        "--sample-break-mode", "none",  # full blocks of T tokens (the task's default packs lines)
        "--optimizer", "adam", "--lr", "1e-4", "--cpu", "--batch-size", str(batch),
        "--dropout", "0.1", "--attention-dropout", "0.1", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    return Trainer(cfg, task, model, criterion), task


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=512, help="block size T")
    p.add_argument("--batch", type=int, default=2, help="blocks per training step")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lines", type=int, default=600, help="WikiText-2 lines to mask")
    p.add_argument("--quick", action="store_true",
                   help="a check in seconds: a tiny model, T=64, 60 lines, 1 repeat")
    args = p.parse_args()
    if args.quick:
        args.tokens, args.repeats, args.lines = 64, 1, 60
    import span_plugin

    span_plugin.register()  # span_plugin is imported before fairseq here

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare(tmp, args.lines)
        trainer, task = build_trainer(data, args.tokens, args.batch, TINY if args.quick else ())
        task.load_dataset("train")
        dataset = task.dataset("train")
        masked = dataset.dataset.defn["net_input.src_tokens"].dataset.dataset
        blocks = [masked.dataset[i] for i in range(len(masked))]

        # 1. masking, every block of several epochs (the item cache is bypassed), as the
        # dataset does it: word starts (not for token masking), then the scheme.
        rule, masker = masked.word_boundaries, masked.masker
        rates = {}
        for scheme in ("span", "whole-word", "token"):
            masker.scheme = scheme
            c0, n = time.process_time(), 0
            for epoch in range(1, 6):
                for i, b in enumerate(blocks):
                    tokens = b.numpy()
                    rng = np.random.default_rng((1, epoch, i))
                    masker(rng, tokens, word_start=None if scheme == "token" else rule(tokens))
                    n += 1
            rates[scheme] = n / (time.process_time() - c0)
            print(f"1. masking {scheme:10}: {n} blocks of <= {args.tokens} tokens, "
                  f"{rates[scheme]:,.0f} blocks/s (process CPU)", flush=True)
        masker.scheme = "span"
        mask_rate = min(rates.values())

        # 2. base-size step with and without the SBO head, same batch.
        full = [i for i in range(len(dataset)) if dataset.size(i) == args.tokens][: args.batch]
        sample = dataset.collater([dataset[i] for i in full])
        criterion = trainer.criterion

        def step(weight):
            def run():
                criterion.sbo_weight = weight
                trainer.train_step([sample])
            return run

        m = time_interleaved_cpu({"mlm": step(0.0), "mlm+sbo": step(1.0)}, args.repeats)
    step_rate = args.batch / m["mlm+sbo"][1]
    overhead = m["mlm+sbo"][1] / m["mlm"][1] - 1
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; "
          f"T={args.tokens}, B={args.batch}, {int(sample['target'].ne(1).sum())} masked tokens; "
          f"median of {args.repeats} (after 1 warm-up)")
    print("2. training step, roberta_spanbert_base: seconds wall / process CPU")
    for name, (wall, cpu) in m.items():
        print(f"   {name:8} {wall:8.2f} {cpu:8.2f}")
    print(f"masking (slowest scheme) / training: {mask_rate:,.0f} / {step_rate:.3f} sequences/s = "
          f"{mask_rate / step_rate:,.0f}x (target >= 20x)")
    print(f"SBO head: +{100 * overhead:.1f}% of the masked-LM step (process CPU; target <= 10%)")


if __name__ == "__main__":
    main()
