"""A peer on the same card: Hugging Face's ``Trainer`` fine-tuning
``RobertaForSequenceClassification`` of the same size on the same pairs as
``benchmarks/gpu_throughput.py``'s fairseq-train runs.

The pairs are the task folder's own (``gpu_throughput.py --prepare``): fairseq's binarized
``input0``/``input1``/``label`` read back into ``<s> A </s> </s> B </s>``, 32 pairs an update,
padded to a multiple of 64 (the fairseq runs' ``--length-multiple 64``). Random weights,
fp16 autocast with a loss scaler (``fp16=True``: the ``--amp`` of fairseq-train), torch's
fused AdamW with the same betas, eps, weight decay and learning rate, no clipping (the
fairseq runs' ``--clip-norm 0``), dropout 0.1, 2 loader workers. Updates/s: the median over
logging intervals of 25 updates after the first two (start-up, compilation), timed on the
host as fairseq times its ``ups``; ``--compile`` sets ``torch_compile``.

    python benchmarks/hf_peer.py [--data .gpu/wiki-pairs] [--updates 200] [--compile]
    python benchmarks/hf_peer.py --quick     # CPU: a tiny config, a few updates (no figure)
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

from common import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
INTERVAL = 25  # updates between stamps (fairseq-train's --log-interval in gpu_throughput.py)
SIZES = {  # hidden, layers, heads, ffn
    "base": (768, 12, 12, 3072),
    "large": (1024, 24, 16, 4096),
    "tiny": (64, 2, 2, 128),
}


class Pairs(torch.utils.data.Dataset):
    """The train split of a fairseq pair folder as Hugging Face examples."""

    def __init__(self, folder):
        from fairseq.data import Dictionary, data_utils

        def split(column):
            dictionary = Dictionary.load(os.path.join(folder, column, "dict.txt"))
            return dictionary, data_utils.load_indexed_dataset(
                os.path.join(folder, column, "train"), dictionary)

        self.vocab, self.first = split("input0")
        _, self.second = split("input1")
        labels, self.labels = split("label")
        self.label_offset = labels.nspecial

    def __len__(self):
        return len(self.first)

    def __getitem__(self, i):
        # fairseq's items end with </s>: <s> A </s> + </s> B </s>
        ids = [self.vocab.bos()] + self.first[i].tolist() + [self.vocab.eos()] + self.second[i].tolist()
        return {"input_ids": ids, "labels": int(self.labels[i][0]) - self.label_offset}


def collate(pad, multiple):
    def batch(examples):
        longest = max(len(e["input_ids"]) for e in examples)
        length = -(-longest // multiple) * multiple
        ids = torch.full((len(examples), length), pad, dtype=torch.long)
        for row, e in enumerate(examples):
            ids[row, : len(e["input_ids"])] = torch.tensor(e["input_ids"])
        return {"input_ids": ids, "attention_mask": (ids != pad).long(),
                "labels": torch.tensor([e["labels"] for e in examples])}

    return batch


def run(data, size, updates, batch, compile_, quick, interval=INTERVAL):
    """Updates/s of one Trainer run (median over the intervals after the first two)."""
    from transformers import (RobertaConfig, RobertaForSequenceClassification, Trainer,
                              TrainerCallback, TrainingArguments)

    pairs = Pairs(data)
    hidden, layers, heads, ffn = SIZES[size]
    config = RobertaConfig(vocab_size=len(pairs.vocab), hidden_size=hidden, num_hidden_layers=layers,
                           num_attention_heads=heads, intermediate_size=ffn, max_position_embeddings=514,
                           type_vocab_size=1, pad_token_id=pairs.vocab.pad(), num_labels=2,
                           hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    torch.manual_seed(1)
    model = RobertaForSequenceClassification(config)
    stamps = []

    class Stamps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % interval == 0:
                stamps.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=batch, max_steps=updates,
            learning_rate=1e-5, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.98, adam_epsilon=1e-6,
            warmup_steps=max(1, updates // 16), lr_scheduler_type="linear", max_grad_norm=0.0,
            optim="adamw_torch_fused", fp16=not quick, use_cpu=quick, torch_compile=compile_,
            logging_steps=interval, save_strategy="no", report_to=[], disable_tqdm=True,
            dataloader_num_workers=0 if quick else 2, seed=1)
        trainer = Trainer(model=model, args=args, train_dataset=pairs,
                          data_collator=collate(pairs.vocab.pad(), 64), callbacks=[Stamps()])
        trainer.train()
    rates = [interval / (b - a) for a, b in zip(stamps, stamps[1:])]
    steady = rates[1:] if len(rates) > 2 else rates
    return statistics.median(steady), len(steady)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.path.join(ROOT, ".gpu", "wiki-pairs"))
    parser.add_argument("--size", default="base", choices=SIZES)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--compile", action="store_true", help="TrainingArguments(torch_compile=True)")
    parser.add_argument("--quick", action="store_true", help="CPU, tiny config, 3 intervals of 2 updates")
    args = parser.parse_args()
    interval = INTERVAL
    if args.quick:
        args.size, args.updates, args.batch, interval = "tiny", 6, 4, 2
    elif not torch.cuda.is_available():
        print("hf_peer: no GPU on this machine: nothing to measure (--quick checks it on the CPU)")
        return
    if not os.path.isdir(args.data):  # gpu_throughput.py's pairs (a few for --quick)
        sys.path.insert(0, HERE)
        from gpu_throughput import prepare

        prepare(args.data, count=64 if args.quick else 3200)
    device = "CPU" if args.quick else torch.cuda.get_device_name(0)
    ups, intervals = run(args.data, args.size, args.updates, args.batch, args.compile, args.quick, interval)
    print(f"{device}, torch {torch.__version__}: HF Trainer RobertaForSequenceClassification {args.size}"
          f"{' compiled' if args.compile else ''}, batch {args.batch}: {ups:.2f} updates/s "
          f"(median of {intervals} intervals of {interval})")


if __name__ == "__main__":
    main()
