"""Cost of the phrasal head in a transfer fine-tuning step (its speed target: at most 10%).

One base-size ``roberta_span_pair_base`` (12 layers, H = 768, GPT-2 vocabulary) with two
head sets: the sentential head alone, and sentential + phrasal (``--features``, max4 by
default). Each step is forward + loss + backward of the encoder and the heads on the
same batches: B pair items of T = 128 tokens with K phrase pairs each (random
non-empty spans of 1-6 tokens, source in the first half, target in the second; 3
classes). Steps alternate after a warm-up; medians of process CPU time (wall time on a
shared machine mostly measures the neighbours). No optimizer step: it costs both the
same, so leaving it out makes the ratio stricter. The heads alone are also timed on
random ``[B, T, 768]`` features (many repeats).

    .venv/bin/python benchmarks/span_pair_speed.py [--batch 8] [--pairs 16] [--repeats 7]
    .venv/bin/python benchmarks/span_pair_speed.py --quick   # seconds: tiny encoder, T=32

Target: the phrasal head adds at most 10 % to the step of the sentential head alone.
"""

import argparse
import os
import statistics
import sys
from argparse import Namespace

import torch
import torch.nn.functional as F

from common import GPT2_BPE, ROOT
from common import TINY_SIZES as TINY  # --quick
from timing import timed

sys.path.insert(0, str(ROOT))
DICT = os.path.join(GPT2_BPE, "dict.txt")


def batches(count, batch, seq_len, pairs, gen):
    """``count`` batches of (tokens [B, T], phrases [B, K, 4], phrase targets [B * K],
    sentence targets [B])."""
    out = []
    half = seq_len // 2
    for _ in range(count):
        tokens = torch.randint(4, 50000, (batch, seq_len), generator=gen)
        tokens[:, 0], tokens[:, -1] = 0, 2
        src = torch.randint(1, half - 7, (batch, pairs), generator=gen)
        tgt = torch.randint(half + 1, seq_len - 8, (batch, pairs), generator=gen)
        src_len = torch.randint(1, 7, (batch, pairs), generator=gen)
        tgt_len = torch.randint(1, 7, (batch, pairs), generator=gen)
        phrases = torch.stack([src, src + src_len, tgt, tgt + tgt_len], dim=-1)
        out.append((tokens, phrases, torch.randint(0, 3, (batch * pairs,), generator=gen),
                    torch.randint(0, 2, (batch,), generator=gen)))
    return out


def build_model(features, sizes=None):
    from fairseq.data import Dictionary

    from span_plugin.models.roberta_span import RobertaSpanModel, base_architecture

    dictionary = Dictionary.load(DICT)
    dictionary.add_symbol("<mask>")
    args = Namespace(arch="roberta_span_pair_base", max_positions=512, **(sizes or {}))
    base_architecture(args)
    model = RobertaSpanModel.build_model(args, Namespace(source_dictionary=dictionary))
    model.register_head("sentential", "span_pair", phrase_classes=0, sentence_classes=2, features=features)
    model.register_head("both", "span_pair", phrase_classes=3, sentence_classes=2, features=features)
    return model.train()


def loss_of(out, phrase_target, sentence_target):
    loss = F.cross_entropy(out["sentential"], sentence_target)
    if out["phrasal"] is not None:
        loss = loss + F.cross_entropy(out["phrasal"], phrase_target)
    return loss


def step(model, name, tokens, phrases, phrase_target, sentence_target):
    out, _ = model(tokens, phrases=phrases, classification_head_name=name)
    loss_of(out, phrase_target, sentence_target).backward()


def head_alone(model, name, features, tokens, phrases, phrase_target, sentence_target):
    head = model.classification_heads[name]
    out = head(features, phrases=phrases, valid=phrases[..., 1] > phrases[..., 0])
    loss_of(out, phrase_target, sentence_target).backward()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--pairs", type=int, default=16, help="phrase pairs per item (K)")
    p.add_argument("--features", default="max4", choices=("max4", "mean2"))
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--head-repeats", type=int, default=30)
    p.add_argument("--quick", action="store_true",
                   help="a check in seconds: a tiny encoder, B=2, T=32, K=4, 1 repeat")
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.seq_len, args.pairs, args.repeats, args.head_repeats = 2, 32, 4, 1, 2
    gen = torch.Generator().manual_seed(0)
    data = batches(args.repeats + args.warmup, args.batch, args.seq_len, args.pairs, gen)
    model = build_model(args.features, TINY if args.quick else None)
    dim = model.args.encoder_embed_dim
    print(f"B={args.batch} T={args.seq_len} K={args.pairs} features={args.features}; torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads")
    times = {"sentential": [], "both": []}
    for k, batch in enumerate(data):
        for name in times:
            model.zero_grad(set_to_none=True)
            t = timed(step, model, name, *batch)[1]  # CPU seconds
            if k >= args.warmup:
                times[name].append(t)
    alone = {"sentential": [], "both": []}
    for k in range(args.head_repeats):
        for name in alone:
            features = torch.randn(args.batch, args.seq_len, dim, requires_grad=True)
            model.zero_grad(set_to_none=True)
            alone[name].append(timed(head_alone, model, name, features, *data[k % len(data)])[1])
    med = {n: statistics.median(v) for n, v in times.items()}
    med_alone = {n: statistics.median(v) for n, v in alone.items()}
    for n in times:
        print(f"{n:>10}: full step CPU {med[n]:.3f} s (median of {len(times[n])}), "
              f"heads alone {1000 * med_alone[n]:.1f} ms (median of {len(alone[n])})")
    print(f"full steps, sentential + phrasal / sentential (CPU, median): "
          f"{med['both'] / med['sentential']:.3f}")
    print(f"phrasal head overhead = (heads alone difference) / sentential step: "
          f"{100 * (med_alone['both'] - med_alone['sentential']) / med['sentential']:+.1f}% "
          f"(target <= 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
