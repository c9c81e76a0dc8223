"""int8 graphs timed alone: the span model's against the plain int8 peer's, inputs built once.

Where ``portable_inference.py`` times each path end to end (raw text in, a fresh
process each), this one times only ``session.run``: every graph's feeds for the MRPC dev
pairs are built once (the span graph's by its folder's predictor, the peer's by the
folder's WordPiece tokenizer), then rounds of every graph over all its feeds, the graphs
interleaved within a round; medians of the rounds, as pairs/s and as a ratio to the peer.
It separates what the graph costs from what building its inputs costs.

    .venv/bin/python benchmarks/onnx_graph_alone.py --work runs/bench-int8/bench \\
        --graph span=runs/bench-int8/bench/onnx-int8/model.onnx --threads 1 2
    .venv/bin/python benchmarks/onnx_graph_alone.py --quick   # a tiny model trained here

``--work``: a folder ``portable_inference.py`` prepared (its ``hf`` folder and the peer's
``plain-onnx/model.int8.onnx``); ``--graph NAME=PATH`` (repeatable): span graphs to time,
default the folder's ``onnx-int8``; ``--peer NAME=PATH``: more graphs of the peer's inputs.
"""

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

from portable_inference import dev_pairs, onnx_folder, ort_session, plain_folder, prepare


def encoders(work):
    """``(tokenizer, span predictor)`` of the folder: the peer's WordPiece tokenizer and
    the span model's predictor, which builds the span graph's inputs."""
    # the tokenizer first: loading the predictor registers the folder's model type with
    # transformers' Auto classes, whose tokenizer for it makes spans
    from transformers import AutoTokenizer

    folder = os.path.join(work, "hf")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    from span_plugin.portable import load_model

    return tokenizer, load_model(folder, encoder="torch")


def feeds(encoded_by, pairs, batch, names_of):
    """``{kind: [feed]}``: the span graph's feeds (kind "span") and the peer's ("plain")
    for ``pairs`` in batches of ``batch``; ``names_of[kind]``: the graph's input names."""
    from span_plugin.portable.onnx_inputs import model_inputs

    tokenizer, model = encoded_by
    chunks = [pairs[b:b + batch] for b in range(0, len(pairs), batch)]
    span = [{n: t.numpy() for n, t in model_inputs(model, c, names_of["span"]).items()} for c in chunks]
    plain = []
    for c in chunks:
        enc = tokenizer([a for a, _ in c], [b for _, b in c], padding=True, truncation=True,
                        return_tensors="np")
        plain.append({k: enc[k].astype("int64") for k in names_of["plain"]})
    return {"span": span, "plain": plain}


def measure(work, encoded_by, graphs, threads, pairs, rounds):
    """Print, per batch size, each graph's median pairs/s and its ratio to the peer."""
    sessions = {name: (kind, ort_session(path, threads)) for name, (kind, path) in graphs.items()}
    with open(os.path.join(plain_folder(work), "inputs.json"), encoding="utf-8") as f:
        names_of = {"plain": json.load(f)}
    names_of["span"] = next(tuple(i.name for i in s.get_inputs())
                            for kind, s in sessions.values() if kind == "span")
    for batch in (1, 32):
        fed = feeds(encoded_by, pairs, batch, names_of)
        times = {name: [] for name in sessions}
        for name, (kind, s) in sessions.items():  # first calls, untimed
            for feed in fed[kind][:2]:
                s.run(None, feed)
        for _ in range(rounds):
            for name, (kind, s) in sessions.items():
                start = time.perf_counter()
                for feed in fed[kind]:
                    s.run(None, feed)
                times[name].append(time.perf_counter() - start)
        rate = {name: len(pairs) / statistics.median(t) for name, t in times.items()}
        print(f"{threads} thread(s), batch {batch}: " + ", ".join(
            f"{name} {r:.1f} pairs/s ({r / rate['peer']:.3f}x the peer)" for name, r in rate.items()),
            flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", help="a folder portable_inference.py prepared")
    p.add_argument("--graph", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--peer", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--threads", nargs="+", type=int, default=[1])
    p.add_argument("--pairs", type=int, default=204)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    work = args.work
    if args.quick:  # a tiny model, built here unless --work holds one (portable_inference.py --quick --work)
        work = work or tempfile.mkdtemp(prefix="graph_alone_")
        args.pairs, args.rounds, args.threads = 16, 1, [1]
        prepare(work, quick=True)
    elif not work:
        p.error("--work is required (or --quick)")
    try:
        graphs = {"peer": ("plain", os.path.join(plain_folder(work), "model.int8.onnx"))}
        for kind, given in (("span", args.graph or [f"span={onnx_folder(work, 'int8')}/model.onnx"]),
                            ("plain", args.peer)):
            for item in given:
                name, _, path = item.partition("=")
                graphs[name] = (kind, path)
        encoded_by = encoders(work)
        for threads in args.threads:
            measure(work, encoded_by, graphs, threads, dev_pairs(args.pairs), args.rounds)
    finally:
        if args.quick and not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
