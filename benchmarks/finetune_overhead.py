"""What the GLUE recipe costs over a hand-written torch loop.

Side by side, in one run, on the same binarized folder (``span-preprocess glue`` of
MRPC with the converted all-MiniLM-L6-v2 WordPiece; prepared once, timed apart, since
the grid shares it between variants and seeds):

recipe
    launched as ``experiments/glue_grid.py`` launches it (the same recipe variables and
    extra flags, variant ``plain``, ``--cpu``): ``recipes/glue/MRPC.sh`` ->
    ``recipes/glue/common.sh`` -> ``fairseq-train`` (``sentence_prediction``; BERT's
    classifier over the converted model), then the dev result of ``checkpoint_best.pt``
    from its ``results.json``. Its checkpoints are kept
    (the grid deletes them afterwards; the plain loop's stays too). After each run, and
    outside its time, the ``fairseq-validate`` pass the recipe made before it read the
    dev result from its training log is timed on the same checkpoint, for the figure of
    the recipe as it was.
plain
    a fresh ``python`` process running :func:`plain_main`: the same fairseq model
    (built by fairseq's ``sentence_prediction`` task from the same flags, the converted
    weights loaded into it), then a loop written here in plain torch: the same rows, the
    same batches (fairseq's fixed random order cut into batches of at most
    ``--batch-size`` rows and 4,400 tokens, padded to each batch's longest row, the batch
    order reshuffled each epoch), ``torch.optim.AdamW`` with fairseq's betas, eps and
    weight decay, fairseq's polynomial decay with linear warm-up over the first 6 %, the
    same dropout, a dev evaluation after every epoch. The fair comparator of a resumable
    recipe: after every epoch it saves one checkpoint that resumes the run (model,
    optimizer, epoch, RNG, best dev result and its predictions), written as the recipe
    writes its checkpoints (temporary file, fsync, rename). It keeps the best epoch's dev
    predictions in memory instead of a second checkpoint, and writes the grid's outputs:
    ``results.json`` (dev accuracy and F1 of the best epoch) and the dev predictions.

Runs alternate (recipe, plain, plain, recipe, ...); wall times are taken around each
whole run (process start-ups and imports included), with the CPU seconds of the
processes it started. The recipe's time is split by phase: its bash trace (``BASH_ENV``
turns on ``set -x`` with microsecond stamps) gives each command's span, fairseq's log
gives its checkpoint writes. The last line is the ratio of medians, recipe / plain.

    .venv/bin/python benchmarks/finetune_overhead.py --quick       # 200 rows, 1 epoch
    .venv/bin/python benchmarks/finetune_overhead.py --repeats 2   # MRPC, 3 epochs, b 32

The machine is shared: wall times move with the neighbours' load; the two sides are
interleaved so that a steady load weighs on both alike.
"""

import argparse
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from common import GLUE, ROOT

sys.path.insert(0, str(ROOT))
MODEL_DIR = os.path.join(os.path.expanduser("~"), ".cache", "span_plugin", "models",
                         "all-MiniLM-L6-v2")
TASK = "MRPC"
HEAD = "sentence_classification_head"
MAX_TOKENS = 4400  # the recipe's --max-tokens
MAX_POSITIONS = 512
INIT_TOKEN = 0  # BERT layout (MODEL_DIR): [CLS] A [SEP] B [SEP], no extra separator
CHECKPOINT = "checkpoint_last.pt"


# ---------------------------------------------------------------------------------
# The plain torch loop


def read_split(data, split):
    """Rows of a ``sentence_prediction`` folder's split, built as the task builds them
    (``[CLS] A [SEP] B [SEP]``, cut at 512 tokens): (list of int64 arrays ``[T_i]``,
    int64 array ``[N]`` of class ids, the label dictionary's class names)."""
    from span_plugin.preprocess.binary.indexed import IndexedReader

    inputs = [IndexedReader(os.path.join(data, k, split)) for k in ("input0", "input1")
              if os.path.exists(os.path.join(data, k, split + ".idx"))]
    labels = IndexedReader(os.path.join(data, "label", split))
    n = len(inputs[0])
    if any(len(r) != n for r in inputs + [labels]):
        raise ValueError(f"{data} {split}: inputs and labels have different row counts "
                         f"{[len(r) for r in inputs + [labels]]}")
    rows = [np.concatenate([[INIT_TOKEN], *(r[i] for r in inputs)])[:MAX_POSITIONS]
            .astype(np.int64) for i in range(n)]
    with open(os.path.join(data, "label", "dict.txt"), encoding="utf-8") as f:
        names = [line.split()[0] for line in f if not line.startswith("madeupword")]
    nspecial = 4  # fairseq's <s> <pad> </s> <unk> come before the labels
    y = np.array([int(labels[i][0]) - nspecial for i in range(n)], dtype=np.int64)
    if n and not (0 <= y.min() and y.max() < len(names)):
        raise ValueError(f"{data}/label/{split}: class ids {y.min()}..{y.max()} outside "
                         f"the {len(names)} labels of label/dict.txt")
    return rows, y, names


def make_batches(sizes, seed, batch_size, max_tokens=MAX_TOKENS):
    """fairseq's batches of a ``sentence_prediction`` split: the rows in a fixed random
    order (``np.random`` seeded with ``seed``), cut greedily into batches of at most
    ``batch_size`` rows whose rows x longest row stays within ``max_tokens``. List of
    int64 index arrays."""
    order = np.argsort(np.random.RandomState(seed).permutation(len(sizes)), kind="stable")
    batches, current, longest = [], [], 0
    for i in order:
        n = int(sizes[i])
        if current and (len(current) == batch_size
                        or (len(current) + 1) * max(longest, n) > max_tokens):
            batches.append(np.array(current, dtype=np.int64))
            current, longest = [], 0
        current.append(int(i))
        longest = max(longest, n)
    if current:
        batches.append(np.array(current, dtype=np.int64))
    return batches


def epoch_order(batches, seed, epoch):
    """The batches of epoch ``epoch`` (1-based) in fairseq's shuffled order."""
    shuffled = list(batches)
    np.random.RandomState(seed + epoch).shuffle(shuffled)
    return shuffled


def collate(rows, index, pad):
    """``[B, T]`` int64 tokens of rows ``index``, right-padded to the longest."""
    import torch

    longest = max(len(rows[i]) for i in index)
    out = torch.full((len(index), longest), pad, dtype=torch.long)
    for k, i in enumerate(index):
        out[k, : len(rows[i])] = torch.from_numpy(rows[i])
    return out


def polynomial_decay(warmup, total):
    """fairseq's ``polynomial_decay`` (power 1, end 0) as a factor of the peak learning
    rate for the update that follows ``n`` finished updates."""
    def factor(n):
        if warmup > 0 and n <= warmup:
            return max(n, 1) / warmup
        if n >= total:
            return 0.0
        return 1.0 - (n - warmup) / (total - warmup)
    return factor


def build_model(data, num_classes, seed, size_flags, dropout=0.1):
    """The model fairseq-train builds for the recipe: fairseq's ``sentence_prediction``
    task from the same flags, with a fresh classification head: fairseq's ``roberta``,
    or, for a model with BERT's segment B and pooler, the plugin's ``roberta_span``
    with BERT's classifier (``--sentence-head plain``), as recipes/glue/common.sh picks.
    Returns (model, the input dictionary's pad index)."""
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import span_plugin

    span_plugin.register()  # imported before fairseq: --user-dir would not register it
    arch = ["--arch", "roberta"]
    if {"--bert-token-types", "--bert-pooler"} & set(size_flags):
        arch = ["--arch", "roberta_span", "--sentence-head", "plain"]
    args = options.parse_args_and_arch(options.get_training_parser(), [
        data, "--task", "sentence_prediction", "--criterion", "sentence_prediction", *arch,
        "--num-classes", str(num_classes), "--init-token", str(INIT_TOKEN),
        "--max-positions", str(MAX_POSITIONS), *size_flags, "--shorten-method", "truncate",
        "--dropout", str(dropout), "--attention-dropout", str(dropout), "--cpu",
        "--seed", str(seed)])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(seed)
    return task.build_model(cfg.model), task.source_dictionary.pad()


def f1_accuracy(preds, gold, positive):
    """(F1 of class ``positive``, accuracy), in percent."""
    tp = int(((preds == positive) & (gold == positive)).sum())
    fp = int(((preds == positive) & (gold != positive)).sum())
    fn = int(((preds != positive) & (gold == positive)).sum())
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return 100.0 * f1, 100.0 * float((preds == gold).mean())


def save_checkpoint(path, state):
    """The resumable state, written as the recipe writes its checkpoints (temporary
    file, fsync, rename): a run killed at any point resumes from the last whole one."""
    import torch

    from span_plugin.files.atomic import atomic_write

    atomic_write(path, lambda f: torch.save(state, f))


def plain_main(args):
    """Fine-tune, evaluate every epoch, keep the best epoch's dev predictions; resumes
    from ``OUT/checkpoint_last.pt``. Prints one JSON line of phase times."""
    t = {"start": time.perf_counter()}
    import torch
    import torch.nn.functional as F

    times = {"train": 0.0, "valid": 0.0, "save": 0.0}
    os.makedirs(args.out, exist_ok=True)
    train_rows, train_y, names = read_split(args.data, "train")
    dev_rows, dev_y, _ = read_split(args.data, "valid")
    if args.model_dir:
        from span_plugin.convert.flags import checkpoint_train_flags

        size_flags = checkpoint_train_flags(args.model_dir)
    else:  # a random model of the sizes given (tests)
        size_flags = args.sizes.split()
    model, pad = build_model(args.data, len(names), args.seed, size_flags)
    batches = make_batches([len(r) for r in train_rows], args.seed, args.batch_size)
    dev_batches = make_batches([len(r) for r in dev_rows], args.seed, args.batch_size)
    total = len(batches) * args.epochs
    warmup = int(round(args.warmup * total))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-6,
                                  weight_decay=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, polynomial_decay(warmup, total))
    positive = names.index(args.positive_label)
    state = {"epoch": 0, "updates": 0, "best": None}
    path = os.path.join(args.out, CHECKPOINT)
    if os.path.exists(path):  # a relaunch resumes the run
        from span_plugin.convert.safe_load import load_torch_file

        state = load_torch_file(path)  # allow-listed types only: tensors, numbers, containers
        model.load_state_dict(state.pop("model"))
        optimizer.load_state_dict(state.pop("optimizer"))
        schedule.load_state_dict(state.pop("schedule"))
        torch.set_rng_state(state.pop("rng"))
        print(f"resuming {path} after epoch {state['epoch']} ({state['updates']} updates)",
              file=sys.stderr)
    elif args.model_dir:
        from span_plugin.runtime.checkpoints import load_state

        pretrained = load_state(os.path.join(args.model_dir, "model.pt"))
        # fairseq's own load: the fresh head is kept, every encoder weight must fit.
        model.load_state_dict(pretrained["model"])
        del pretrained
    t["loaded"] = time.perf_counter()

    for epoch in range(state["epoch"] + 1, args.epochs + 1):
        start = time.perf_counter()
        model.train()
        for index in epoch_order(batches, args.seed, epoch):
            tokens = collate(train_rows, index, pad)
            target = torch.from_numpy(train_y[index])
            logits, _ = model(tokens, features_only=True, classification_head_name=HEAD)
            loss = F.cross_entropy(logits.float(), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            state["updates"] += 1
        times["train"] += time.perf_counter() - start

        start = time.perf_counter()
        model.eval()
        preds = np.zeros(len(dev_rows), dtype=np.int64)
        with torch.no_grad():
            for index in dev_batches:
                logits, _ = model(collate(dev_rows, index, pad), features_only=True,
                                  classification_head_name=HEAD)
                preds[index] = logits.argmax(-1).numpy()
        f1, accuracy = f1_accuracy(preds, dev_y, positive)
        if state["best"] is None or f1 >= state["best"]["f1"]:
            state["best"] = {"epoch": epoch, "f1": f1, "accuracy": accuracy,
                             "predictions": [names[p] for p in preds]}
        times["valid"] += time.perf_counter() - start
        print(f"epoch {epoch}: dev f1 {f1:.2f} accuracy {accuracy:.2f}", file=sys.stderr)

        start = time.perf_counter()
        state["epoch"] = epoch
        save_checkpoint(path, {**state, "model": model.state_dict(),
                               "optimizer": optimizer.state_dict(),
                               "schedule": schedule.state_dict(), "rng": torch.get_rng_state()})
        times["save"] += time.perf_counter() - start

    best = state["best"]
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"task": TASK, "metric": "f1", "epoch": best["epoch"],
                   "dev": {"dev": {"f1": best["f1"], "accuracy": best["accuracy"]}}}, f, indent=2)
    os.makedirs(os.path.join(args.out, "dev_predictions"), exist_ok=True)
    with open(os.path.join(args.out, "dev_predictions", f"{TASK}.tsv"), "w", encoding="utf-8") as f:
        f.write("index\tprediction\n" + "".join(f"{i}\t{p}\n" for i, p in enumerate(best["predictions"])))
    times["load"] = t["loaded"] - t["start"]
    times["loop"] = time.perf_counter() - t["start"]
    print(json.dumps({"f1": best["f1"], "updates": state["updates"], "times": times}))
    return 0


# ---------------------------------------------------------------------------------
# The side-by-side run


def cut_glue(out, train_rows, dev_rows):
    """A glue folder with the first rows of MRPC's files (--quick)."""
    os.makedirs(os.path.join(out, TASK), exist_ok=True)
    for name, rows in (("train", train_rows), ("dev", dev_rows), ("test", 8)):
        with open(os.path.join(GLUE, TASK, name + ".tsv"), "rb") as f:
            head = [line for _, line in zip(range(rows + 1), f)]  # header + rows
        with open(os.path.join(out, TASK, name + ".tsv"), "wb") as f:
            f.writelines(head)
    return out


def prepare(glue_dir, data, model_dir, workers):
    """The folder the recipe would prepare (span-preprocess glue, greedy spans)."""
    start = time.perf_counter()
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "span-preprocess"), "glue",
                    "--task", TASK, "--glue-dir", glue_dir, "--out", data, "--bpe", "wordpiece",
                    "--wordpiece", model_dir, "--srcdict", os.path.join(model_dir, "dict.txt"),
                    "--segmentation", "greedy", "--workers", str(workers)],
                   check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


TRACE_RC = """exec 9>>"$FINETUNE_TRACE"
BASH_XTRACEFD=9
PS4='+ ${EPOCHREALTIME} '
set -x
"""
PHASES = (  # (pattern of a traced command, phase); the first match counts
    (r"^fairseq-train |^torchrun |^tee -a \S*train\.log", "fairseq-train"),
    (r"^fairseq-validate |^tee \S*dev\.log", "dev result (fairseq-validate)"),
    (r"write_results\.py", "dev result (write_results.py)"),
    (r"^span-predict ", "dev predictions (span-predict)"),
    (r"^span-preprocess ", "folder check (span-preprocess check)"),
    (r"^span-convert ", "model sizes (span-convert flags)"),
    (r"span_plugin\.runtime\.checkpoints", "resume check"),
    (r"^python", "other python"),
)


def trace_phases(trace, wall):
    """Seconds per phase of one recipe run from its bash trace: each traced command
    lasts until the next trace line. What precedes the first line (bash start-up) and
    follows the last (the grid reading the results) is "bash and the rest"."""
    stamps = []
    with open(trace, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"\++ (\d+\.\d+) (.*)", line)
            if m:
                stamps.append((float(m.group(1)), m.group(2)))
    out = {name: 0.0 for _, name in PHASES}
    out["bash and the rest"] = 0.0
    for (t0, command), (t1, _) in zip(stamps, stamps[1:]):
        name = next((n for pattern, n in PHASES if re.search(pattern, command)),
                    "bash and the rest")
        out[name] += t1 - t0
    if stamps:
        out["bash and the rest"] += wall - (stamps[-1][0] - stamps[0][0])
    return out


def log_figures(log):
    """What fairseq-train's log tells of its own time: start-up until the first epoch
    begins (1 s stamps), the training loop (epochs, validations and checkpoint saves,
    "done training in"), and the checkpoint writes within it."""
    stamps = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \| \w+ \| (.*)$", log, flags=re.M)
    seconds = [time.mktime(time.strptime(t, "%Y-%m-%d %H:%M:%S")) for t, _ in stamps]
    begin = next((s for s, (_, text) in zip(seconds, stamps) if "begin training epoch" in text), None)
    loop = re.findall(r"done training in ([\d.]+) seconds", log)
    writes = [float(s) for s in re.findall(r"\(writing took ([\d.]+) seconds\)", log)]
    return {"fairseq start-up": (begin - seconds[0]) if begin is not None else 0.0,
            "fairseq training loop": float(loop[-1]) if loop else 0.0,
            "checkpoint writes": sum(writes), "checkpoints saved": len(writes)}


REMOVED = "(not run any more: fairseq-validate of checkpoint_best.pt)"


def recipe_flags(args, updates):
    """The fairseq-train flags the grid adds to the recipe (``--cpu``)."""
    return ["--lr", f"{args.lr:g}", "--batch-size", args.batch_size, "--max-epoch", args.epochs,
            "--max-update", updates, "--total-num-update", updates,
            "--warmup-updates", int(round(args.warmup * updates)), "--log-interval", "50",
            "--num-workers", "0", "--cpu"]


def run_recipe_side(args, data, glue_dir, out, updates):
    """One recipe run as the grid launches it; (wall s, CPU s, phases, dev f1)."""
    trace = os.path.join(out + ".trace")
    rc = os.path.join(os.path.dirname(out), "trace.rc")
    os.makedirs(out, exist_ok=True)
    with open(rc, "w") as f:
        f.write(TRACE_RC)
    # The grid's recipe variables (variant plain); the checkpoints stay, as the plain
    # loop's does (the grid deletes them after).
    env = dict(os.environ, GLUE_DIR=os.path.abspath(glue_dir),
               MODEL_DIR=os.path.abspath(args.model_dir), SEED=str(args.seed), DATA_DIR=data,
               OUT_DIR=out, WORKERS=str(args.workers), TEST_PREDICTIONS="0", HEAD="plain",
               SEGMENTATION="greedy", BASH_ENV=rc, FINETUNE_TRACE=trace)
    cpu0, start = children_cpu(), time.perf_counter()
    with open(os.path.join(out, "recipe.log"), "a", encoding="utf-8") as log:
        proc = subprocess.run(["bash", os.path.join(ROOT, "recipes", "glue", f"{TASK}.sh"),
                               *map(str, recipe_flags(args, updates))],
                              env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"recipes/glue/{TASK}.sh failed; see {out}/recipe.log")
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu0
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        dev = next(iter(json.load(f)["dev"].values()))
    phases = trace_phases(trace, wall)
    with open(os.path.join(out, "recipe.log"), encoding="utf-8", errors="replace") as f:
        phases.update(log_figures(f.read()))
    # What the recipe ran before reading the dev result from train.log (not in its time).
    start = time.perf_counter()
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "fairseq-validate"), data,
                    "--user-dir", os.path.join(ROOT, "span_plugin"), "--task", "sentence_prediction",
                    "--criterion", "span_classification", "--path",
                    os.path.join(out, "checkpoints", "checkpoint_best.pt"), "--valid-subset", "valid",
                    "--batch-size", "32", "--log-format", "json", "--cpu"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    phases[REMOVED] = time.perf_counter() - start
    return wall, cpu, phases, dev["f1"]


def run_plain_side(args, data, out):
    cmd = [sys.executable, os.path.abspath(__file__), "plain", "--data", data, "--out", out,
           "--model-dir", args.model_dir, "--epochs", str(args.epochs), "--batch-size",
           str(args.batch_size), "--lr", str(args.lr), "--seed", str(args.seed), "--warmup", str(args.warmup)]
    cpu0, start = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"plain loop failed:\n{proc.stderr[-4000:]}")
    with open(os.path.join(out, "plain.log"), "w", encoding="utf-8") as f:
        f.write(proc.stderr)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    return wall, cpu, report["times"], report["f1"]


def side_by_side(args):
    from span_plugin.formats.glue import TASKS, read_split

    work = tempfile.mkdtemp(prefix="finetune_overhead.", dir=args.work_dir)
    try:
        glue_dir = cut_glue(os.path.join(work, "glue"), args.rows, args.dev_rows) if args.rows else GLUE
        data = os.path.join(work, "data", f"{TASK}-greedy")
        prep = prepare(glue_dir, data, args.model_dir, args.workers)
        rows = read_split(TASKS[TASK], os.path.join(glue_dir, TASK, "train.tsv"), "train").rows
        updates = math.ceil(rows / args.batch_size) * args.epochs
        print(f"{TASK}: {rows} train rows, {args.epochs} epochs of batch {args.batch_size}, "
              f"{updates} updates, lr {args.lr:g}, seed {args.seed}, torch threads "
              f"{os.environ.get('OMP_NUM_THREADS', 'default')}; folder prepared in "
              f"{prep:.1f} s (span-preprocess glue, once, not in the times below); "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        runs = {"recipe": [], "plain": []}
        for r in range(args.repeats):
            order = ("recipe", "plain") if r % 2 == 0 else ("plain", "recipe")
            for side in order:
                out = os.path.join(work, "runs", f"{side}{r}")
                load = os.getloadavg()[0]
                if side == "recipe":
                    wall, cpu, phases, f1 = run_recipe_side(args, data, glue_dir, out, updates)
                else:
                    wall, cpu, phases, f1 = run_plain_side(args, data, out)
                runs[side].append({"wall": wall, "cpu": cpu, "f1": f1, "phases": phases,
                                   "load_before": load, "load_after": os.getloadavg()[0]})
                shown = ", ".join(f"{k} {v:.1f}" for k, v in phases.items() if v)
                print(f"  [{r}] {side:6s} wall {wall:7.1f} s  cpu {cpu:7.1f} s  f1 {f1:.2f}  "
                      f"load {load:.2f}->{os.getloadavg()[0]:.2f}  ({shown})", flush=True)
                if args.logs:
                    os.makedirs(args.logs, exist_ok=True)
                    for name in ("recipe.log", "plain.log"):
                        if os.path.exists(os.path.join(out, name)):
                            shutil.copy(os.path.join(out, name), os.path.join(args.logs, f"{side}{r}.log"))
                    if os.path.exists(out + ".trace"):
                        shutil.copy(out + ".trace", os.path.join(args.logs, f"{side}{r}.trace"))
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"rows": rows, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
            "seed": args.seed, "updates": updates, "prepare_s": prep, "runs": runs}


def summary(result):
    med = {side: {k: statistics.median(r[k] for r in runs) for k in ("wall", "cpu", "f1")}
           for side, runs in result["runs"].items()}
    recipe, plain = med["recipe"], med["plain"]
    print(f"median of {len(result['runs']['recipe'])}: recipe wall {recipe['wall']:.1f} s "
          f"(cpu {recipe['cpu']:.1f}, f1 {recipe['f1']:.2f}); plain wall {plain['wall']:.1f} s "
          f"(cpu {plain['cpu']:.1f}, f1 {plain['f1']:.2f})")
    phases = {}
    for r in result["runs"]["recipe"]:
        for k, v in r["phases"].items():
            phases.setdefault(k, []).append(v)
    print("recipe phases, median s: " + ", ".join(f"{k} {statistics.median(v):.1f}"
                                                  for k, v in phases.items()))
    plain_phases = {}
    for r in result["runs"]["plain"]:
        for k, v in r["phases"].items():
            plain_phases.setdefault(k, []).append(v)
    print("plain phases, median s: " + ", ".join(f"{k} {statistics.median(v):.1f}"
                                                 for k, v in plain_phases.items()))
    ratio = recipe["wall"] / plain["wall"]
    result["median"] = med
    result["ratio_wall"] = ratio
    result["ratio_cpu"] = recipe["cpu"] / plain["cpu"]
    before = statistics.median(r["wall"] + r["phases"][REMOVED] for r in result["runs"]["recipe"])
    result["ratio_wall_with_fairseq_validate"] = before / plain["wall"]
    print(f"with the fairseq-validate pass the recipe ran before: {before:.1f} s, "
          f"{before / plain['wall']:.3f} x the plain loop")
    print(f"recipe / plain torch loop, median wall time: {ratio:.3f} "
          f"(cpu time {result['ratio_cpu']:.3f})")
    return result


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["plain"]:
        p = argparse.ArgumentParser(description="the plain torch fine-tuning loop")
        p.add_argument("--data", required=True, help="a span-preprocess glue folder")
        p.add_argument("--out", required=True)
        p.add_argument("--model-dir", help="a span-convert folder (model.pt, dict.txt)")
        p.add_argument("--sizes", default="", help="without --model-dir: model size flags "
                       "of a random model, e.g. '--encoder-layers 2 ...'")
        p.add_argument("--epochs", type=int, default=3)
        p.add_argument("--batch-size", type=int, default=32)
        p.add_argument("--lr", type=float, default=5e-5)
        p.add_argument("--warmup", type=float, default=0.06)
        p.add_argument("--seed", type=int, default=4)
        p.add_argument("--positive-label", default="1")
        return plain_main(p.parse_args(argv[1:]))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="200 train rows, 100 dev rows, 1 epoch")
    p.add_argument("--rows", type=int, help="first ROWS train rows only (default: all)")
    p.add_argument("--dev-rows", type=int, default=408)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--warmup", type=float, default=0.06)
    p.add_argument("--seed", type=int, default=4)
    p.add_argument("--repeats", type=int, default=1, help="runs of each side, interleaved")
    p.add_argument("--model-dir", default=MODEL_DIR)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--work-dir", help="where the runs go (default: the system temp folder)")
    p.add_argument("--threads", type=int, help="torch threads of every process of both sides "
                   "(OMP_NUM_THREADS; default: torch's own choice, as the grid runs). On a "
                   "machine shared with another multi-threaded job, 1 keeps the step times "
                   "from swinging with thread contention")
    p.add_argument("--json", help="also write every figure here")
    p.add_argument("--logs", help="keep every run's log (and the recipe's bash trace) here")
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.dev_rows, args.epochs = args.rows or 200, 100, 1
    if args.threads:  # inherited by the recipe's processes and the plain loop's
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    result = summary(side_by_side(args))
    result["machine"] = {"cpus": os.cpu_count(), "threads": args.threads or "torch default",
                         "load_end": os.getloadavg()}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
