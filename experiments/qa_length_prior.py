"""Is the span QA head's short answers a length bias a prior would fix?

The span head answers with 1.9-2.0 words where the gold has 2.9 (RESULTS_QA_MINILM.md).
One explanation: its candidate scores favour short widths beyond what the data holds,
a bias a per-width prior added at decoding would undo. This tests it on one checkpoint
without tuning anything on the evaluation questions:

1. On a fixed sample of *training* questions (seeded), the checkpoint's top answers'
   widths in tokens against the gold answers' widths.
2. The prior: ``b(w) = log (gold(w) + 1) - log (predicted(w) + 1)`` over widths
   0..A-1 (add-one counts), which moves the training predictions' widths towards the
   gold's; nothing is fitted on the evaluation split.
3. The evaluation split decoded twice from one pass of the model, without and with
   ``b`` added to every window's candidate scores (the checkpoint's own decoding,
   word or token boundaries): the official EM/F1, the mean answer length in words,
   and how many questions changed.

If the prior lengthens the answers and raises F1, the shortness is a width bias of the
scores; if the training predictions are already as long as the gold there (b near 0),
the short answers on held-out questions are not a bias of the scores but their
uncertainty, and a prior has nothing to correct.

    python experiments/qa_length_prior.py --checkpoint RUN/checkpoints/checkpoint_best.pt \\
        --train SPLIT/train.json --valid SPLIT/valid.json [--sample 600] [--seed 1] \\
        [--results experiments/results/qa_length_prior.jsonl]
"""

import argparse
import collections
import json
import math
import random
import time
from pathlib import Path

import torch

from grid_lib import ROOT


def load(checkpoint):
    from span_plugin.hub import SpanHubInterface

    return SpanHubInterface.from_pretrained(str(checkpoint))


def batches(hub, examples, batch_size):
    """``(questions, question of each window [N], offsets [N, T, 2], head output)`` of each
    batch of ``batch_size`` questions (the predictor's ``batch_outputs``)."""
    for k, (question, offsets, output) in zip(range(0, len(examples), batch_size),
                                              hub.batch_outputs(examples, batch_size)):
        yield examples[k:k + batch_size], question, offsets, output


def token_width(offsets, start, end):
    """Width index (last - first token) of the answer ``[start, end)`` (characters) in a
    window whose passage tokens have ``offsets [T, 2]`` (-1 outside the passage), or
    None when the window does not hold the whole answer."""
    inside = [t for t, (a, b) in enumerate(offsets) if a >= 0 and b > start and a < end]
    if not inside or offsets[inside[0]][0] > start or offsets[inside[-1]][1] < end:
        return None
    return inside[-1] - inside[0]


def widths_on(hub, examples, batch_size):
    """(predicted width counts, gold width counts) on ``examples``: per question, the
    best candidate's width over its windows, and the first gold answer's width in the
    window holding it."""
    predicted, gold = collections.Counter(), {}
    best = {}
    for records, question, offsets, output in batches(hub, examples, batch_size):
        scores = output["scores"]  # [N, T, A]: the flat argmax's remainder is the width
        a = scores.size(-1)
        top, index = scores.flatten(1).max(1)
        for w, q in enumerate(question.tolist()):
            record = records[q]
            key = record.id
            if key not in best or top[w] > best[key][0]:
                best[key] = (float(top[w]), int(index[w]) % a)
            window_offsets = offsets[w].tolist()
            text, start = record.answers[0]
            width = token_width(window_offsets, start, start + len(text))
            if width is not None and key not in gold:
                gold[key] = width
    for _, width in best.values():
        predicted[width] += 1
    return predicted, collections.Counter(gold.values())


def decode(hub, examples, batch_size, bias=None):
    """{question id: answer text} of ``examples`` with ``bias [A]`` added to the scores."""
    from span_plugin.modules.qa_decoding import answers_of_batch

    answers = {}
    boundaries = hub.answer_boundaries
    for records, question, offsets, output in batches(hub, examples, batch_size):
        if bias is not None:
            output = dict(output, scores=output["scores"] + bias.to(output["scores"]))
        for record, answer in zip(records, answers_of_batch(
                output, question, offsets, [r.context for r in records],
                boundaries=boundaries)):
            answers[record.id] = answer["text"]
    return answers


def mean_words(answers):
    from span_plugin.formats.squad_metrics import normalize_answer

    return sum(len(normalize_answer(a).split()) for a in answers.values()) / max(len(answers), 1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--train", required=True, help="the split's training questions (SQuAD JSON)")
    p.add_argument("--valid", required=True, help="the split's evaluation questions (SQuAD JSON)")
    p.add_argument("--sample", type=int, default=600, help="training questions the prior is counted on")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "qa_length_prior.jsonl"))
    args = p.parse_args(argv)
    from span_plugin.formats.squad import read_qa
    from span_plugin.formats.squad_metrics import gold_texts, squad_scores
    from span_plugin.preprocess.file_records import sha256

    started = time.time()
    hub = load(args.checkpoint)
    train = [e for e in read_qa(args.train).examples if e.answers]
    sample = random.Random(args.seed).sample(train, min(args.sample, len(train)))
    predicted, gold = widths_on(hub, sample, args.batch_size)
    span = hub.model.classification_heads[hub.head].max_answer_tokens
    bias = torch.tensor([math.log(gold[w] + 1) - math.log(predicted[w] + 1) for w in range(span)])
    mean = lambda c: sum(w * k for w, k in c.items()) / max(sum(c.values()), 1)  # noqa: E731
    print(f"training sample: {len(sample)} questions; mean width (tokens - 1) predicted "
          f"{mean(predicted):.2f}, gold {mean(gold):.2f}")
    print("prior b(w), w = 0..9: " + " ".join(f"{x:+.2f}" for x in bias[:10].tolist()))

    split = read_qa(args.valid, official=True)
    examples = split.examples
    plain = decode(hub, examples, args.batch_size)
    prior = decode(hub, examples, args.batch_size, bias)
    scores = {name: squad_scores(answers, examples, split.version) for name, answers in
              (("without prior", plain), ("with prior", prior))}
    changed = sum(plain[k] != prior[k] for k in plain)
    gold_words = mean_words({e.id: gold_texts(e)[0] for e in examples})
    for name, answers in (("without prior", plain), ("with prior", prior)):
        s = scores[name]
        print(f"{name}: EM {s['exact_match']:.2f}, F1 {s['f1']:.2f}, answer words {mean_words(answers):.2f} "
              f"(gold {gold_words:.2f})")
    print(f"questions whose answer changed: {changed} of {len(plain)}")
    record = {
        "checkpoint": str(Path(args.checkpoint).resolve()), "checkpoint_sha256": sha256(args.checkpoint),
        "train": str(args.train), "valid": str(args.valid), "sample": len(sample), "seed": args.seed,
        "predicted_widths": dict(sorted(predicted.items())), "gold_widths": dict(sorted(gold.items())),
        "prior": [round(x, 4) for x in bias.tolist()],
        "without_prior": {"exact_match": scores["without prior"]["exact_match"],
                          "f1": scores["without prior"]["f1"], "answer_words": mean_words(plain)},
        "with_prior": {"exact_match": scores["with prior"]["exact_match"],
                       "f1": scores["with prior"]["f1"], "answer_words": mean_words(prior)},
        "gold_words": gold_words, "changed": changed, "questions": len(plain),
        "minutes": round((time.time() - started) / 60, 1),
    }
    with open(args.results, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    print(f"appended to {args.results}")


if __name__ == "__main__":
    main()
