"""Inference without fairseq (issue 52, part 3): cold start and pairs/s of an exported
folder through :func:`span_plugin.portable.load_model`, with each of its encoders (the
plugin's plain-torch one, which imports no ``transformers``, and ``transformers``'
``AutoModel``), against the fairseq hub on the checkpoint it was exported from, and a plain ``transformers`` forward of the same encoder
(``AutoTokenizer`` + ``AutoModel`` + a linear layer on the first token), on MRPC dev
pairs, one thread, each measurement in a fresh process; and ONNX Runtime on the graph
``span-export onnx`` makes of the same checkpoint, fed by the portable encoder.

- cold start: from the child's first line to a model ready to predict (imports + load);
- pairs/s at batch 32, then at batch 1, over the same pairs in order, after one
  untimed batch of 32 (each path's first-call set-up, caches warm as in a server).

The model: the README's first run (all-MiniLM-L6-v2 Span Fine-tuned on MRPC,
``recipes/glue/MRPC.sh``), trained for 2 updates here (the weights do not change the
timings), exported with ``span-export hf``; built once into ``--work``.

    python benchmarks/portable_inference.py [--work runs/bench-portable] [--runs 5]
    python benchmarks/portable_inference.py --quick   # a tiny random model, 16 pairs
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")
GLUE = os.path.join(DATA, "glue")
BIN = os.path.dirname(sys.executable)
PATHS = ("portable-torch", "portable-hf", "hub", "plain", "onnx")
NAMES = {"portable-torch": "portable, torch encoder", "portable-hf": "portable, transformers enc.",
         "hub": "fairseq hub", "plain": "plain transformers", "onnx": "ONNX Runtime"}
PORTABLE = {"portable-torch": "torch", "portable-hf": "transformers"}  # path -> load_model's encoder
TINY = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "2", "--max-positions", "128"]


def dev_pairs(n):
    """The first ``n`` (sentence1, sentence2) pairs of MRPC dev."""
    with open(os.path.join(GLUE, "MRPC", "dev.tsv"), encoding="utf-8-sig") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [(r[3], r[4]) for r in rows[:n]]


def run(*argv, env=None):
    proc = subprocess.run([str(a) for a in argv], cwd=ROOT, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"],
                                   **(env or {})))
    if proc.returncode != 0:
        sys.exit(f"{argv[0]} exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    return proc.stdout


def mini_glue(work, rows=64):
    """A GLUE folder of the first ``rows`` MRPC rows of each split (quick mode)."""
    out = os.path.join(work, "glue", "MRPC")
    os.makedirs(out, exist_ok=True)
    for split in ("train", "dev", "test"):
        with open(os.path.join(GLUE, "MRPC", f"{split}.tsv"), encoding="utf-8-sig") as f:
            lines = f.read().splitlines()[:rows + 1]
        with open(os.path.join(out, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return os.path.dirname(out)


def prepare(work, quick):
    """``(checkpoint, exported folder)`` in ``work``, built when missing."""
    checkpoint = os.path.join(work, "run", "checkpoints", "checkpoint_last.pt")
    folder = os.path.join(work, "hf")
    if os.path.isfile(os.path.join(folder, "files.json")) and \
            os.path.isfile(os.path.join(onnx_folder(work), "model.onnx")):
        return checkpoint, folder
    if quick:
        gpt2 = os.path.join(DATA, "gpt2_bpe")
        data = os.path.join(work, "data")
        run("span-preprocess", "glue", "--task", "MRPC", "--glue-dir", mini_glue(work),
            "--out", data, "--gpt2-encoder-json", os.path.join(gpt2, "encoder.json"),
            "--gpt2-vocab-bpe", os.path.join(gpt2, "vocab.bpe"), "--srcdict",
            os.path.join(gpt2, "dict.txt"), "--workers", "1")
        run("fairseq-train", data, "--user-dir", os.path.join(ROOT, "span_plugin"), "--task",
            "span_classification", "--criterion", "sentence_prediction", "--arch",
            "roberta_span_base", *TINY, "--num-classes", "2", "--init-token", "0",
            "--separator-token", "2", "--optimizer", "adam", "--lr", "1e-3", "--batch-size",
            "8", "--max-update", "2", "--save-dir", os.path.dirname(checkpoint), "--cpu",
            "--no-epoch-checkpoints", "--disable-validation", "--num-workers", "0")
    else:
        run("bash", os.path.join(ROOT, "recipes", "glue", "MRPC.sh"), "--max-update", "2",
            env={"GLUE_DIR": GLUE, "DATA_DIR": os.path.join(work, "data"),
                                         "OUT_DIR": os.path.join(work, "run"),
                                         "TEST_PREDICTIONS": "0", "NUM_GPUS": "0"})
    run("span-export", "hf", checkpoint, "--out", folder, "--force")
    run("span-export", "onnx", checkpoint, "--out", onnx_folder(work), "--force")
    return checkpoint, folder


def onnx_folder(work):
    return os.path.join(work, "onnx")


# ---------------------------------------------------------------------------------------
# One measurement (a fresh process)
# ---------------------------------------------------------------------------------------

def child(path, checkpoint, folder, n):
    """Cold start and pairs/s of one path, as a dict (printed as JSON)."""
    start = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    if path in PORTABLE:
        from span_plugin.portable import load_model

        model = load_model(folder, encoder=PORTABLE[path])
        forward = model.predict_logits
    elif path == "onnx":
        # span-export onnx's graph in ONNX Runtime, fed by the portable encoder (the
        # layout of training); load_model also reads the torch weights, which this path
        # leaves unused: its cold start is an upper bound.
        import onnxruntime as ort

        from span_plugin.portable import load_model
        from span_plugin.portable.batches import pad_rows, pad_tokens

        model = load_model(folder, encoder="torch")
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(os.path.join(onnx_folder(os.path.dirname(folder)),
                                                    "model.onnx"), options,
                                       providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]

        def forward(pairs, batch_size):
            encoded, out = model.encode(pairs), []
            for b in range(0, len(encoded), batch_size):
                chunk = encoded[b:b + batch_size]
                feed = {"src_tokens": pad_tokens([t for t, _ in chunk], model.vocab.pad),
                        "spans": pad_rows([sp for _, sp in chunk], 2)}
                out.append(session.run(None, {n: feed[n].numpy() for n in names})[0])
            return out
    elif path == "hub":
        from span_plugin.hub import SpanHubInterface

        model = SpanHubInterface.from_pretrained(checkpoint)
        forward = model.predict_logits
    else:
        from transformers import AutoModel, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        encoder = AutoModel.from_pretrained(folder).eval()
        linear = torch.nn.Linear(encoder.config.hidden_size, 2)

        @torch.no_grad()
        def forward(pairs, batch_size):
            out = []
            for b in range(0, len(pairs), batch_size):
                chunk = pairs[b:b + batch_size]
                enc = tokenizer([a for a, _ in chunk], [c for _, c in chunk], padding=True,
                                truncation=True, return_tensors="pt")
                out.append(linear(encoder(**enc).last_hidden_state[:, 0]))
            return torch.cat(out)
    ready = time.perf_counter() - start
    pairs = dev_pairs(n)
    forward(pairs[:32], batch_size=32)  # first-call set-up, untimed
    rates = {}
    for batch in (32, 1):
        t = time.perf_counter()
        forward(pairs, batch_size=batch)
        rates[batch] = len(pairs) / (time.perf_counter() - t)
    return {"start": ready, "batch32": rates[32], "batch1": rates[1],
            "fairseq_loaded": "fairseq" in sys.modules,
            "transformers_loaded": "transformers" in sys.modules}


def measure(path, checkpoint, folder, n):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", LOGLEVEL="ERROR")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", path,
                           "--checkpoint", checkpoint, "--folder", folder, "--pairs", str(n)],
                          cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"{path} child exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default=os.path.join(ROOT, "runs", "bench-portable"))
    p.add_argument("--runs", type=int, default=5, help="fresh processes per path")
    p.add_argument("--pairs", type=int, default=408, help="MRPC dev pairs (408: all)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.checkpoint, args.folder, args.pairs)))
        return
    if args.quick:
        import shutil
        import tempfile

        args.work, args.runs, args.pairs = tempfile.mkdtemp(prefix="portable_bench_"), 1, 16
        try:
            report(args)
        finally:
            shutil.rmtree(args.work, ignore_errors=True)
        return
    report(args)


def report(args):
    """Measure every path ``args.runs`` times and print the medians and ratios."""
    checkpoint, folder = prepare(args.work, args.quick)
    found = {path: [] for path in PATHS}
    for r in range(args.runs):  # interleaved, so a change in the machine's load hits all
        for path in PATHS:
            found[path].append(measure(path, checkpoint, folder, args.pairs))
    for path in PORTABLE:
        assert not any(m["fairseq_loaded"] for m in found[path]), f"{path} loaded fairseq"
    assert not any(m["transformers_loaded"] for m in found["portable-torch"]), \
        "the torch encoder's path loaded transformers"
    med = {path: {k: statistics.median(m[k] for m in found[path])
                  for k in ("start", "batch1", "batch32")} for path in PATHS}
    print(f"{args.pairs} MRPC dev pairs, {args.runs} fresh process(es) per path, one thread; "
          f"medians (all runs: start s / pairs/s b1 / b32)")
    for path in PATHS:
        runs = "; ".join(f"{m['start']:.2f}/{m['batch1']:.1f}/{m['batch32']:.1f}"
                         for m in found[path])
        print(f"  {NAMES[path]:28s} start {med[path]['start']:.2f} s, batch 1 "
              f"{med[path]['batch1']:.1f} pairs/s, batch 32 {med[path]['batch32']:.1f} "
              f"pairs/s   ({runs})")

    def ratio(a, b, key):
        return med[a][key] / med[b][key]

    for path, encoder in PORTABLE.items():
        goal = " (goal <= 0.7)" if encoder == "torch" else ""
        print(f"cold start portable ({encoder} encoder) / hub: "
              f"{ratio(path, 'hub', 'start'):.2f}{goal}")
    for path, encoder in PORTABLE.items():
        goal = " (goal >= 0.95)" if encoder == "torch" else ""
        print(f"pairs/s portable ({encoder} encoder) / plain transformers: batch 1 "
              f"{ratio(path, 'plain', 'batch1'):.2f}, batch 32 "
              f"{ratio(path, 'plain', 'batch32'):.2f}{goal}")
    for path, encoder in PORTABLE.items():
        print(f"pairs/s portable ({encoder} encoder) / hub: batch 1 "
              f"{ratio(path, 'hub', 'batch1'):.2f}, batch 32 {ratio(path, 'hub', 'batch32'):.2f}")
    print(f"pairs/s ONNX Runtime / portable (torch encoder): batch 1 "
          f"{ratio('onnx', 'portable-torch', 'batch1'):.2f}, batch 32 "
          f"{ratio('onnx', 'portable-torch', 'batch32'):.2f}")

if __name__ == "__main__":
    main()
