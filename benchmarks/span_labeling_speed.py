"""Cost of the span-labeling head against the token head in a training step.

One base-size encoder (``roberta_tagging_base``: 12 layers, H = 768, GPT-2 vocabulary)
with both heads on it; each step is forward + loss + backward of the encoder and one
head, on the same batches: B items of T = 128 tokens (``<s>`` + 126 + ``</s>``) filled
with consecutive real CoNLL-2003 dev sentences (their words and entities, GPT-2 BPE as
``span-preprocess conll`` cuts them). The span head enumerates all spans of up to L = 8
words, pools them (endpoints + self-attention + width), scores them against the 4 types
+ none and takes the cross-entropy over every candidate; the token head scores every
token and takes the cross-entropy at word starts. Steps alternate (token, span, token,
...) after a warm-up; medians of wall and process CPU time are reported, and the ratio
is taken on CPU time (on a shared machine wall time mostly measures the neighbours).
No optimizer step: it costs both the same, so leaving it out makes the ratio stricter.

    .venv/bin/python benchmarks/span_labeling_speed.py [--batch 4] [--repeats 7]
    .venv/bin/python benchmarks/span_labeling_speed.py --quick   # seconds: tiny encoder, T=32

The heads are also timed alone (forward, loss, backward on random ``[B, T, 768]``
features, many repeats). The last line is the overhead: the span head's extra CPU time
over the token head's, in percent of the median token-head step.
"""

import argparse
import os
import statistics
import sys
from argparse import Namespace

import torch
import torch.nn.functional as F

from common import DATA, GPT2_BPE, ROOT
from common import TINY_SIZES as TINY  # --quick
from timing import timed

sys.path.insert(0, str(ROOT))


def real_batches(batch, seq_len, count):
    """``count`` batches of (tokens [B, T], words [B, W, 2], tags [B, W], entities) from
    consecutive real dev sentences, each item filled up to T - 2 own tokens."""
    from span_plugin.formats.conll import read_conll
    from span_plugin.preprocess.folders.conll import word_token_counts
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec
    from span_plugin.formats.tags import entities, tag_names, types_of

    bpe = GPT2_BPE
    enc = EncoderSpec(bpe="gpt2", encoder_json=os.path.join(bpe, "encoder.json"),
                      vocab_bpe=os.path.join(bpe, "vocab.bpe"), segmentation="none").build()
    names = tag_names(["LOC", "MISC", "ORG", "PER"])
    type_id = {t: i + 1 for i, t in enumerate(types_of(names))}
    items, words, tags, used = [], [], [], 0
    for s in read_conll(os.path.join(DATA, "conll2003", "valid.txt")).sentences:
        counts = word_token_counts(enc, s.words, "dev")
        if sum(counts) > seq_len - 2:
            continue
        if used + sum(counts) > seq_len - 2:  # the item is full: start the next one
            items.append((words, tags))
            words, tags, used = [], [], 0
            if len(items) == batch * count:
                break
        for c, t in zip(counts, s.tags):
            words.append((1 + used, 1 + used + c))  # after <s>
            used += c
            tags.append(t)
    out = []
    for k in range(count):
        chunk = items[k * batch:(k + 1) * batch]
        width = max(len(w) for w, _ in chunk)
        word_t = torch.zeros(batch, width, 2, dtype=torch.long)
        tag_t = torch.full((batch, width), -100, dtype=torch.long)
        ents = []
        for b, (w, t) in enumerate(chunk):
            word_t[b, :len(w)] = torch.tensor(w)
            tag_t[b, :len(t)] = torch.tensor([names.index(x) for x in t])
            ents.append([(s, e, type_id[x]) for s, e, x in entities(t)])
        ent_t = torch.zeros(batch, max(1, max(len(e) for e in ents)), 3, dtype=torch.long)
        for b, e in enumerate(ents):
            if e:
                ent_t[b, :len(e)] = torch.tensor(e)
        tokens = torch.randint(4, 50000, (batch, seq_len))
        tokens[:, 0] = 0
        tokens[:, -1] = 2
        out.append((tokens, word_t, tag_t, ent_t))
    return out, len(names)


def build_model(dict_path, max_words, sizes=None):
    from fairseq.data import Dictionary

    import span_plugin  # noqa: F401  (registers the model)
    from span_plugin.models.roberta_span import RobertaSpanModel, base_architecture

    dictionary = Dictionary.load(dict_path)
    dictionary.add_symbol("<mask>")
    args = Namespace(arch="roberta_tagging_base", max_positions=512, **(sizes or {}))
    base_architecture(args)
    model = RobertaSpanModel.build_model(args, Namespace(source_dictionary=dictionary))
    model.register_head("token", "token", num_classes=9)
    model.register_head("span", "span", num_classes=5, max_words=max_words)
    return model.train()


def token_step(model, tokens, words, tags, entities):
    from span_plugin.modules.entities import word_logits

    logits, _ = model(tokens, words=words, classification_head_name="token")
    scores = word_logits(logits, words)
    loss = F.cross_entropy(scores.flatten(0, 1), tags.flatten(), ignore_index=-100, reduction="sum")
    loss.backward()


def span_step(model, tokens, words, tags, entities):
    from span_plugin.modules.entities import labeling_targets

    (logits, valid), _ = model(tokens, words=words, classification_head_name="span")
    target, _ = labeling_targets(entities, valid)
    loss = F.cross_entropy(logits[valid], target[valid], reduction="sum")
    loss.backward()


def head_alone(model, name, features, tokens, words, tags, entities):
    """The head's part of a step: head forward, loss, backward into the features."""
    from span_plugin.modules.entities import labeling_targets, word_logits

    head = model.classification_heads[name]
    out = head(features, words=words)
    if name == "token":
        loss = F.cross_entropy(word_logits(out, words).flatten(0, 1), tags.flatten(),
                               ignore_index=-100, reduction="sum")
    else:
        logits, valid = out
        target, _ = labeling_targets(entities, valid)
        loss = F.cross_entropy(logits[valid], target[valid], reduction="sum")
    loss.backward()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--max-words", type=int, default=8)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--head-repeats", type=int, default=30)
    p.add_argument("--quick", action="store_true",
                   help="a check in seconds: a tiny encoder, B=2, T=32, 1 repeat")
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.seq_len, args.repeats, args.head_repeats = 2, 32, 1, 2
    torch.manual_seed(0)
    batches, _ = real_batches(args.batch, args.seq_len, args.repeats + args.warmup)
    model = build_model(os.path.join(GPT2_BPE, "dict.txt"), args.max_words,
                        TINY if args.quick else None)
    dim = model.args.encoder_embed_dim
    words = [int((b[1][..., 0] < b[1][..., 1]).sum(-1).float().mean()) for b in batches]
    print(f"B={args.batch} T={args.seq_len} L={args.max_words}, words per item (mean): "
          f"{statistics.mean(words):.1f}, candidates per item ~{statistics.mean(words) * args.max_words:.0f}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    times = {"token": [], "span": []}
    for k, batch in enumerate(batches):
        for name, step in (("token", token_step), ("span", span_step)):
            model.zero_grad(set_to_none=True)
            t = timed(step, model, *batch)
            if k >= args.warmup:
                times[name].append(t)
    # The heads alone, on encoder-shaped features: many repeats, so a steady figure for
    # the difference, which the full steps (few, long, noisy) only bound.
    alone = {"token": [], "span": []}
    for k in range(args.head_repeats):
        batch = batches[k % len(batches)]
        for name in alone:
            features = torch.randn(args.batch, args.seq_len, dim, requires_grad=True)
            model.zero_grad(set_to_none=True)
            alone[name].append(timed(head_alone, model, name, features, *batch))
    med = {n: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for n, v in times.items()}
    med_alone = {n: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                 for n, v in alone.items()}
    for n, (w, c) in med.items():
        print(f"{n:>5} head, full step (encoder + head, fwd+bwd): median wall {w:.3f} s, "
              f"CPU {c:.3f} s over {len(times[n])} steps")
    for n, (w, c) in med_alone.items():
        print(f"{n:>5} head alone (fwd+loss+bwd): median wall {1000 * w:.1f} ms, "
              f"CPU {1000 * c:.1f} ms over {len(alone[n])} runs")
    ratio = med["span"][1] / med["token"][1]
    extra = med_alone["span"][1] - med_alone["token"][1]
    print(f"full steps, span / token (CPU time, median): {ratio:.3f}")
    print(f"span head overhead = (span head - token head) / token-head step, CPU medians: "
          f"{100 * extra / med['token'][1]:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
