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

int8 (issue 69, part 3), in the same rounds, at one thread and at all threads: the span
model in int8 through ONNX Runtime (``span-export onnx --quantize int8``) and through
the portable torch encoder (``load_model(DIR, quantize="int8")``), against plain
``transformers`` in float32 and against the peer a deploying user would pick: the plain
encoder (the same ``AutoModel`` and linear layer as "plain") exported to ONNX and
quantized by ONNX Runtime's own ``quantize_dynamic`` (``optimum-onnx``, which wraps the
same call, requires transformers < 4.58 and does not install beside 5.23). The span
graphs (the exported folder's ``span-export onnx``) run behind the folder's predictor,
``load_model(DIR, onnx=GRAPH)``, as ``span-predict --onnx`` runs them. Every span path
predicts through its predictor, which batches pairs of like length together; the plain
paths take the pairs in file order, as their users' loops do. The dev metric of float32
and int8 is the accuracy guard's (``onnx.json``'s and ``config.json``'s ``int8``).

The model: the README's first run (all-MiniLM-L6-v2 Span Fine-tuned on MRPC,
``recipes/glue/MRPC.sh``), trained for 2 updates here (the weights do not change the
timings), exported with ``span-export hf``; built once into ``--work``.

    python benchmarks/portable_inference.py [--work runs/bench-portable] [--runs 5]
    python benchmarks/portable_inference.py --checkpoint CKPT --work runs/bench-int8 \
        --paths plain plain-onnx-int8 portable-torch portable-int8 onnx onnx-int8 --runs 3
    python benchmarks/portable_inference.py --quick   # a tiny random model, 16 pairs
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from common import DATA, GLUE, ROOT
from common import TINY_ROBERTA as TINY
from common import mrpc_dev_pairs as dev_pairs

BIN = os.path.dirname(sys.executable)
PATHS = ("portable-torch", "portable-hf", "hub", "plain", "onnx", "portable-int8", "onnx-int8",
         "plain-onnx-int8")
NAMES = {"portable-torch": "portable, torch encoder", "portable-hf": "portable, transformers enc.",
         "hub": "fairseq hub", "plain": "plain transformers", "onnx": "ONNX Runtime",
         "portable-int8": "span int8, portable torch", "onnx-int8": "span int8, ONNX Runtime",
         "plain-onnx-int8": "plain int8, ONNX Runtime"}
PORTABLE = {"portable-torch": "torch", "portable-hf": "transformers"}  # path -> load_model's encoder
SPAN_INT8 = ("onnx-int8", "portable-int8")


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


def prepare(work, quick, checkpoint=None):
    """``(checkpoint, exported folder)`` in ``work``, built when missing: the span
    model's ``span-export hf`` folder (its int8 figures measured by ``span-export
    int8-check``), the folder's ``span-export onnx`` graph in float32 and in int8, and the plain
    peer's graphs (:func:`export_plain`). ``checkpoint``: a fine-tuned one to use instead
    of training one here."""
    checkpoint = checkpoint or os.path.join(work, "run", "checkpoints", "checkpoint_last.pt")
    folder = os.path.join(work, "hf")
    if os.path.isfile(os.path.join(folder, "files.json")) and \
            os.path.isfile(os.path.join(plain_folder(work), "model.int8.onnx")):
        return checkpoint, folder
    if os.path.isfile(checkpoint):
        pass
    elif quick:
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
            env={"GLUE_DIR": str(GLUE), "DATA_DIR": os.path.join(work, "data"),
                                         "OUT_DIR": os.path.join(work, "run"),
                                         "TEST_PREDICTIONS": "0", "NUM_GPUS": "0"})
    run("span-export", "hf", checkpoint, "--out", folder, "--force")
    # the guard's figures are printed, whatever they are: --force-int8 keeps the graph
    # and --max-drop 100 the folder's record, so that the speed is measured either way
    run("span-export", "int8-check", folder, "--max-drop", "100")
    run("span-export", "onnx", folder, "--out", onnx_folder(work), "--force")
    run("span-export", "onnx", folder, "--out", onnx_folder(work, "int8"), "--force",
        "--quantize", "int8", "--force-int8")
    export_plain(folder, plain_folder(work))
    return checkpoint, folder


def onnx_folder(work, kind="fp32"):
    return os.path.join(work, "onnx" if kind == "fp32" else "onnx-int8")


def plain_folder(work):
    return os.path.join(work, "plain-onnx")


def plain_network(folder):
    """The plain path's network: ``transformers``' own model class of the folder's
    encoder family (an exported span model names the plugin's model type, which only an
    import of span_plugin registers; the plain path imports none of it) without the
    pooler, and a seeded linear layer on the first token."""
    import torch
    from transformers import AutoConfig, AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the span heads' tensors are not this model's
    hf_logging.disable_progress_bar()
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        raw = json.load(f)
    family = raw["model_type"].removeprefix("span_plugin_")
    config = AutoConfig.for_model(family, **{k: v for k, v in raw.items()
                                             if k not in ("model_type", "architectures",
                                                          "auto_map")})
    encoder = AutoModel.from_pretrained(folder, config=config, add_pooling_layer=False).eval()
    torch.manual_seed(0)
    return encoder, torch.nn.Linear(encoder.config.hidden_size, 2)


def export_plain(folder, out):
    """The plain peer: ``AutoModel`` + linear of ``folder`` exported as optimum exports
    an encoder (torch's TorchScript-based ONNX exporter, opset 17, dynamic batch and
    length) to ``out/model.onnx``, then quantized by ONNX Runtime's ``quantize_dynamic``
    (MatMul/Gemm weights int8, :func:`span_plugin.export.onnx_quantize.quantize_graph`)
    to ``out/model.int8.onnx``; ``out/inputs.json`` names the tokenizer outputs it reads."""
    import warnings

    import torch
    from transformers import AutoTokenizer

    from span_plugin.export.onnx_quantize import quantize_graph

    os.makedirs(out, exist_ok=True)
    encoder, linear = plain_network(folder)

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.linear = encoder, linear

        def forward(self, *inputs):
            named = dict(zip(names, inputs))
            return self.linear(self.encoder(**named).last_hidden_state[:, 0])

    tokenizer = AutoTokenizer.from_pretrained(folder)
    example = tokenizer(*zip(*dev_pairs(2)), padding=True, return_tensors="pt")
    names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in example]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(Plain().eval(), tuple(example[k] for k in names),
                          os.path.join(out, "model.onnx"), dynamo=False, input_names=names,
                          output_names=["logits"], opset_version=17,
                          dynamic_axes={**{k: {0: "batch", 1: "length"} for k in names},
                                        "logits": {0: "batch"}})
    quantize_graph(os.path.join(out, "model.onnx"), os.path.join(out, "model.int8.onnx"))
    with open(os.path.join(out, "inputs.json"), "w", encoding="utf-8") as f:
        json.dump(names, f)


def ort_session(path, threads):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------------------------
# One measurement (a fresh process)
# ---------------------------------------------------------------------------------------

def child(path, checkpoint, folder, n, threads=1):
    """Cold start and pairs/s of one path, as a dict (printed as JSON)."""
    start = time.perf_counter()
    import torch

    torch.set_num_threads(threads)
    work = os.path.dirname(folder)
    if path in PORTABLE or path == "portable-int8":
        from span_plugin.portable import load_model

        model = load_model(folder, encoder=PORTABLE.get(path, "torch"),
                           quantize="int8" if path == "portable-int8" else None)
        forward = model.predict_logits
    elif path in ("onnx", "onnx-int8"):
        # the folder's span-export onnx graph in ONNX Runtime behind the folder's own
        # predictor (load_model(DIR, onnx=GRAPH): its encoding, batches by length, no
        # torch weights read), as span-predict --onnx runs it
        from span_plugin.portable import load_model

        model = load_model(folder, onnx=onnx_folder(work, path[5:] or "fp32"))
        forward = model.predict_logits
    elif path == "plain-onnx-int8":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        session = ort_session(os.path.join(plain_folder(work), "model.int8.onnx"), threads)
        with open(os.path.join(plain_folder(work), "inputs.json"), encoding="utf-8") as f:
            names = json.load(f)

        def forward(pairs, batch_size):
            out = []
            for b in range(0, len(pairs), batch_size):
                chunk = pairs[b:b + batch_size]
                enc = tokenizer([a for a, _ in chunk], [c for _, c in chunk], padding=True,
                                truncation=True, return_tensors="np")
                out.append(session.run(None, {k: enc[k].astype("int64") for k in names})[0])
            return out
    elif path == "hub":
        from span_plugin.hub import SpanHubInterface

        model = SpanHubInterface.from_pretrained(checkpoint)
        forward = model.predict_logits
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        encoder, linear = plain_network(folder)

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


def measure(path, checkpoint, folder, n, threads=1):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               LOGLEVEL="ERROR")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", path,
                           "--checkpoint", checkpoint, "--folder", folder, "--pairs", str(n),
                           "--threads", str(threads)],
                          cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"{path} child exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", help="where the model and graphs are built, once (default: "
                   "runs/bench-portable; with --quick a temporary folder, or this one, kept, "
                   "which onnx_graph_alone.py --quick --work can reuse)")
    p.add_argument("--runs", type=int, default=5, help="fresh processes per path")
    p.add_argument("--pairs", type=int, default=408, help="MRPC dev pairs (408: all)")
    p.add_argument("--checkpoint", help="a fine-tuned MRPC checkpoint to export and measure "
                   "(default: the recipe's, trained 2 updates into --work)")
    p.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    p.add_argument("--threads", nargs="+", default=["1", "all"],
                   help="intra-op threads of each measurement (all: every core)")
    p.add_argument("--json", help="write every measurement and the medians here")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.checkpoint, args.folder, args.pairs,
                               int(args.threads[0]))))
        return
    args.threads = sorted({os.cpu_count() if t == "all" else int(t) for t in args.threads})
    if args.quick:
        import shutil
        import tempfile

        given = args.work
        args.work = given or tempfile.mkdtemp(prefix="portable_bench_")
        args.runs, args.pairs, args.threads = 1, 16, [1]
        try:
            report(args)
        finally:
            if not given:
                shutil.rmtree(args.work, ignore_errors=True)
        return
    args.work = args.work or os.path.join(ROOT, "runs", "bench-portable")
    report(args)


def guard_figures(work, folder):
    """The accuracy guard's records: ``{"onnx": onnx.json's int8, "portable": config.json's}``."""
    out = {}
    with open(os.path.join(onnx_folder(work, "int8"), "onnx.json"), encoding="utf-8") as f:
        out["onnx"] = json.load(f)["int8"]
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        out["portable"] = json.load(f)["span_plugin"]["int8"]
    return out


def report(args):
    """Measure every path ``args.runs`` times at each thread count and print the medians
    and ratios."""
    checkpoint, folder = prepare(args.work, args.quick, args.checkpoint)
    paths = [p for p in PATHS if p in args.paths]
    load = [open("/proc/loadavg").read().split()[0]] if os.path.exists("/proc/loadavg") else []
    found = {(path, t): [] for path in paths for t in args.threads}
    for r in range(args.runs):  # interleaved, so a change in the machine's load hits all
        for t in args.threads:
            for path in paths:
                found[path, t].append(measure(path, checkpoint, folder, args.pairs, t))
        if load:
            load.append(open("/proc/loadavg").read().split()[0])
    for path in PORTABLE:
        assert not any(m["fairseq_loaded"] for t in args.threads for m in found.get((path, t), ())), \
            f"{path} loaded fairseq"
    assert not any(m["transformers_loaded"] for t in args.threads
                   for m in found.get(("portable-torch", t), ())), \
        "the torch encoder's path loaded transformers"
    med = {key: {k: statistics.median(m[k] for m in ms) for k in ("start", "batch1", "batch32")}
           for key, ms in found.items()}
    print(f"{args.pairs} MRPC dev pairs, {args.runs} fresh process(es) per path and thread "
          f"count, interleaved; load average (1 min) at the start and after each round: "
          f"{', '.join(load) or 'not known'}; medians (all runs: start s / pairs/s b1 / b32)")
    for t in args.threads:
        print(f"{t} thread(s):")
        for path in paths:
            runs = "; ".join(f"{m['start']:.2f}/{m['batch1']:.1f}/{m['batch32']:.1f}"
                             for m in found[path, t])
            print(f"  {NAMES[path]:28s} start {med[path, t]['start']:.2f} s, batch 1 "
                  f"{med[path, t]['batch1']:.1f} pairs/s, batch 32 {med[path, t]['batch32']:.1f} "
                  f"pairs/s   ({runs})")

    def ratio(a, b, key, t=1):
        return med[a, t][key] / med[b, t][key]

    def have(*names):
        return all((n, args.threads[0]) in med for n in names)

    one = 1 if 1 in args.threads else args.threads[0]
    if have("portable-torch", "portable-hf", "hub"):
        for path, encoder in PORTABLE.items():
            goal = " (goal <= 0.7)" if encoder == "torch" else ""
            print(f"cold start portable ({encoder} encoder) / hub: "
                  f"{ratio(path, 'hub', 'start', one):.2f}{goal}")
    if have("portable-torch", "portable-hf", "plain"):
        for path, encoder in PORTABLE.items():
            goal = " (goal >= 0.95)" if encoder == "torch" else ""
            print(f"pairs/s portable ({encoder} encoder) / plain transformers: batch 1 "
                  f"{ratio(path, 'plain', 'batch1', one):.2f}, batch 32 "
                  f"{ratio(path, 'plain', 'batch32', one):.2f}{goal}")
    if have("portable-torch", "portable-hf", "hub"):
        for path, encoder in PORTABLE.items():
            print(f"pairs/s portable ({encoder} encoder) / hub: batch 1 "
                  f"{ratio(path, 'hub', 'batch1', one):.2f}, batch 32 "
                  f"{ratio(path, 'hub', 'batch32', one):.2f}")
    if have("onnx", "portable-torch"):
        print(f"pairs/s ONNX Runtime / portable (torch encoder): batch 1 "
              f"{ratio('onnx', 'portable-torch', 'batch1', one):.2f}, batch 32 "
              f"{ratio('onnx', 'portable-torch', 'batch32', one):.2f}")
    for t in args.threads:
        for path in SPAN_INT8:
            for peer, goal in (("plain", 2.0), ("plain-onnx-int8", 0.95)):
                if have(path, peer):
                    print(f"pairs/s {NAMES[path]} / {NAMES[peer]}, {t} thread(s): batch 1 "
                          f"{ratio(path, peer, 'batch1', t):.2f}, batch 32 "
                          f"{ratio(path, peer, 'batch32', t):.2f} (goal >= {goal})")
    figures = guard_figures(args.work, folder)
    for kind, record in figures.items():
        print(f"dev {record['metric']} ({kind}, {record['examples']} examples): float32 "
              f"{record['fp32']:.2f}, int8 {record['int8']:.2f}, drop {record['drop']:.2f} "
              f"(goal <= 0.5), {record['agreement_of']} agreeing {record['agreement']:.2f}%")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"pairs": args.pairs, "runs": args.runs, "load": load,
                       "checkpoint": checkpoint, "guard": figures,
                       "medians": {f"{p} x{t}": v for (p, t), v in med.items()},
                       "runs_each": {f"{p} x{t}": v for (p, t), v in found.items()}},
                      f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
