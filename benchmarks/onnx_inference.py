"""ONNX Runtime against torch eager: MRPC dev pairs/s of one fine-tuned model, one thread.

The checkpoint is exported by ``span-export onnx`` (timed), then both run the same
encoded batches: the MRPC dev pairs in file order, encoded once by the hub's own code
(BPE, segmentation, the layout of training; its rate is printed apart, as it is the same
for both), cut into batches of 1 and 32, each padded to its longest pair. torch: the
hub's model (``HeadGraph``, the module the export traced) under ``torch.no_grad``; ONNX
Runtime: a CPU session of ``model.onnx``. One intra-op thread each
(``torch.set_num_threads(1)``, ``intra_op_num_threads=1``). Each round times every
(batch size, runtime) pass over all pairs, the runtimes alternating; the figures are
medians over rounds, and the two sides' outputs are compared on every batch.

    .venv/bin/python benchmarks/onnx_inference.py --checkpoint runs/all-MiniLM-L6-v2/MRPC/checkpoints/checkpoint_best.pt
    .venv/bin/python benchmarks/onnx_inference.py --quick   # a tiny model trained here, 32 pairs

``--checkpoint`` defaults to the README's first run; ``--data`` and ``--wordpiece`` /
``--gpt2-encoder-json``... as for the hub when the record's paths are elsewhere. The
machine may be shared: wall times move with the neighbours' load, which the alternation
spreads over both sides alike.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

from common import DATA, ROOT
from common import GPT2_BPE as GPT2
from common import TINY_ROBERTA as TINY
from common import mrpc_dev_pairs as dev_pairs

sys.path.insert(0, str(ROOT))
FIRST_RUN = os.path.join(ROOT, "runs", "all-MiniLM-L6-v2", "MRPC", "checkpoints",
                         "checkpoint_best.pt")
BATCH_SIZES = (1, 32)


def tiny_checkpoint(work):
    """--quick: a tiny span model trained 1 update on 40 real MRPC rows (GPT-2 BPE)."""
    import subprocess

    glue = os.path.join(work, "glue", "MRPC")
    os.makedirs(glue)
    for split, rows in (("train", 40), ("dev", 8), ("test", 8)):
        with open(os.path.join(DATA, "glue", "MRPC", f"{split}.tsv"), encoding="utf-8") as f:
            keep = f.read().splitlines()[:rows + 1]
        with open(os.path.join(glue, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("\n".join(keep) + "\n")
    binary = os.path.dirname(sys.executable)
    folder = os.path.join(work, "MRPC-bin")
    subprocess.run([os.path.join(binary, "span-preprocess"), "glue", "--task", "MRPC",
                    "--glue-dir", os.path.dirname(glue), "--out", folder, "--gpt2-encoder-json",
                    os.path.join(GPT2, "encoder.json"), "--gpt2-vocab-bpe",
                    os.path.join(GPT2, "vocab.bpe"), "--srcdict", os.path.join(GPT2, "dict.txt"),
                    "--workers", "1"], check=True, stdout=subprocess.DEVNULL)
    save = os.path.join(work, "ckpt")
    subprocess.run([os.path.join(binary, "fairseq-train"), folder, "--user-dir",
                    os.path.join(ROOT, "span_plugin"), "--task", "span_classification",
                    "--criterion", "span_classification", "--arch", "roberta_span_base", *TINY,
                    "--num-classes", "2", "--init-token", "0", "--separator-token", "2",
                    "--shorten-method", "truncate", "--optimizer", "adam", "--lr", "1e-3",
                    "--batch-size", "8", "--max-update", "1", "--save-dir", save, "--cpu",
                    "--num-workers", "0", "--no-progress-bar", "--disable-validation",
                    "--no-epoch-checkpoints"], check=True, stdout=subprocess.DEVNULL)
    return os.path.join(save, "checkpoint_last.pt")


def throughput(run, batches, pairs):
    """pairs/s of ``run(batch)`` over every batch, wall time."""
    start = time.perf_counter()
    for batch in batches:
        run(batch)
    return pairs / (time.perf_counter() - start)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=FIRST_RUN)
    p.add_argument("--data", help="its task folder, when not where its record says")
    p.add_argument("--wordpiece", help="its WordPiece files (a span-convert folder, ...)")
    p.add_argument("--gpt2-encoder-json")
    p.add_argument("--gpt2-vocab-bpe")
    p.add_argument("--pairs", type=int, help="the first N dev pairs (default: all 408)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true",
                   help="seconds: a tiny model trained here, 32 pairs, 1 round")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    from span_plugin.hub import SpanHubInterface
    from span_plugin.export.onnx_export import (MODEL, export_onnx, max_abs_diff,
                                                   open_session, run_session)
    from span_plugin.export.onnx_graph import HeadGraph
    from span_plugin.portable.onnx_inputs import model_inputs

    with tempfile.TemporaryDirectory() as work:
        files = {k: v for k, v in (("wordpiece", args.wordpiece),
                                   ("gpt2_encoder_json", args.gpt2_encoder_json),
                                   ("gpt2_vocab_bpe", args.gpt2_vocab_bpe)) if v}
        if args.quick:
            args.checkpoint, args.pairs, args.rounds = tiny_checkpoint(work), 32, 1
            files = {"gpt2_encoder_json": os.path.join(GPT2, "encoder.json"),
                     "gpt2_vocab_bpe": os.path.join(GPT2, "vocab.bpe")}
        if not os.path.isfile(args.checkpoint):
            sys.exit(f"{args.checkpoint}: no such checkpoint; run the README's first run or "
                     f"pass --checkpoint")
        start = time.perf_counter()
        export_onnx(args.checkpoint, os.path.join(work, "onnx"), data=args.data, **files)
        print(f"span-export onnx: {time.perf_counter() - start:.1f} s (trace, write, check)")
        hub = SpanHubInterface.from_pretrained(args.checkpoint, data=args.data, **files)
        graph = HeadGraph(hub)
        session = open_session(os.path.join(work, "onnx", MODEL), threads=1)
        pairs = dev_pairs(args.pairs)
        batches, encode = {}, {}  # encode: pairs/s of the encoding at each batch size
        for b in BATCH_SIZES:
            start = time.perf_counter()
            batches[b] = [model_inputs(hub, pairs[k:k + b], graph.input_names)
                          for k in range(0, len(pairs), b)]
            encode[b] = len(pairs) / (time.perf_counter() - start)
        layers = len(hub.model.encoder.sentence_encoder.layers)
        dim = hub.model.encoder.sentence_encoder.embed_tokens.embedding_dim
        print(f"model: {graph.head_kind} head, {layers} layers, H={dim}; {len(pairs)} MRPC dev "
              f"pairs; encoding (BPE + segmentation + layout): "
              + ", ".join(f"batch {b}: {encode[b]:.0f}" for b in BATCH_SIZES) + " pairs/s")

        worst = 0.0
        for inputs in batches[BATCH_SIZES[-1]]:
            with torch.no_grad():
                ref = graph(*graph.args_of(inputs))[0]
            worst = max(worst, max_abs_diff(run_session(session, inputs)["logits"], ref.numpy()))
        print(f"largest |ONNX Runtime - torch| logit over all pairs: {worst:.2e}")

        def torch_run(inputs):
            with torch.no_grad():
                graph(*graph.args_of(inputs))

        sides = {"torch eager": torch_run, "ONNX Runtime": lambda x: run_session(session, x)}
        rates = {(b, name): [] for b in BATCH_SIZES for name in sides}
        for side in sides.values():  # warm-up: first calls allocate
            for b in BATCH_SIZES:
                side(batches[b][0])
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for b in BATCH_SIZES:
                for name in order:
                    rates[(b, name)].append(throughput(sides[name], batches[b], len(pairs)))
        print(f"\n| batch | torch eager pairs/s | ONNX Runtime pairs/s | ONNX / torch | rounds "
              f"(torch/ONNX) |  (one thread, medians of {args.rounds} rounds)")
        print("|---|---|---|---|---|")
        ratios, whole = {}, []
        for b in BATCH_SIZES:
            t, o = (statistics.median(rates[(b, n)]) for n in sides)
            ratios[b] = o / t
            each = ", ".join(f"{x:.1f}/{y:.1f}" for x, y in zip(*(rates[(b, n)] for n in sides)))
            print(f"| {b} | {t:.1f} | {o:.1f} | {o / t:.2f} | {each} |")
            # raw text in: the encoding's time per pair added to the model's
            whole.append(f"batch {b}: torch {1 / (1 / encode[b] + 1 / t):.1f}, ONNX Runtime "
                         f"{1 / (1 / encode[b] + 1 / o):.1f}")
        print(f"with the hub's encoding of the raw pairs, pairs/s: {'; '.join(whole)}")
        print("ONNX Runtime / torch eager, pairs/s: "
              + ", ".join(f"batch {b}: {ratios[b]:.2f}x" for b in BATCH_SIZES))


if __name__ == "__main__":
    main()
