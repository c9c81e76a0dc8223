"""Resumable masking ablation of SpanBERT's objective on all-MiniLM-L6-v2: does span
masking (with or without the span boundary objective) make a better masked LM than
BERT's whole-word or token masking, in continued pre-training on Wikipedia?

Conditions (recipes/pretrain/spanbert.sh, all from the recipe's default model, the
packaged all-MiniLM-L6-v2 converted by span-convert, ``--arch roberta_spanbert``):
    span+sbo    --masking span (geometric spans), --sbo-weight 1   (SpanBERT)
    span        --masking span, --sbo-weight 0
    whole-word  --masking whole-word, --sbo-weight 0              (BERT-WWM)
    token       --masking token, --sbo-weight 0                   (BERT)
Every run has the same data, seed, batches of blocks (complete_doc, 128 tokens), learning
rate schedule and number of updates; only the masking (and the SBO) differ.

Data: a fixed slice of ../shared/data/wikipedia: the first whole articles of wiki.AB
(--train-lines, rounded up to the end of an article) for training, the first whole
articles of wiki.AD (--valid-lines) held out. Articles are separated by empty lines, so
blocks never cross articles.

Curves: fairseq validates on the held-out text every --interval updates with the run's
own masking (mlm_loss, and sbo_loss for span+sbo). Those losses are over different
positions in each condition, so they are not comparable across conditions. Every
checkpoint (each --interval updates) is therefore ALSO evaluated on the same fixed
maskings of the held-out text, one per scheme of --eval-schemes (default token and
span; seed --eval-seed, 80/10/10 as in training): MLM loss in bits per masked token,
identical positions and replacements for every condition.

Each finished condition is one JSON line of --results; a relaunch skips the conditions
already there (same budget, data and starting model). An unfinished one starts again
from scratch, or with --resume continues from its checkpoint_last.pt (the recipe resumes
it; checkpoints then keep their optimizer state, and the folder must hold a run of the
same settings). The interval checkpoints are deleted after their evaluation and after
the record is written; checkpoint_last.pt (the final weights) is kept.

    .venv/bin/python experiments/masking_ablation.py [--max-runs N]
    .venv/bin/python experiments/masking_report.py

experiments/spanbert_qa.py runs the same code at a larger budget (--resume), then
fine-tunes each encoder on SQuAD.
"""

import argparse
import functools
import gzip
import json
import os
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path

from grid_lib import DATA, ROOT, append_result, cpu_model, read_results, trained_on

DEFAULT_MODEL = "all-MiniLM-L6-v2 (span-convert, recipes/lib.sh default_model)"

WIKI = DATA / "wikipedia"
CONDITIONS = {
    "span+sbo": {"MASKING": "span", "SBO_WEIGHT": "1"},
    "span": {"MASKING": "span", "SBO_WEIGHT": "0"},
    "whole-word": {"MASKING": "whole-word", "SBO_WEIGHT": "0"},
    "token": {"MASKING": "token", "SBO_WEIGHT": "0"},
}


def article_slice(path, min_lines):
    """The first lines of a Wikipedia file up to the end of the article holding line
    ``min_lines`` (the empty line after it included): whole articles."""
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            out.append(line)
            if len(out) >= min_lines and not line.strip():
                break
    return out


def prepare_text(work, args, write=True):
    """work/text/{train,valid}.txt (written once; not with ``write=False``) and their
    line / article counts."""
    info = {}
    for split, name, n in (("train", "wiki.AB.txt.gz", args.train_lines),
                           ("valid", "wiki.AD.txt.gz", args.valid_lines)):
        path = work / "text" / f"{split}.txt"
        lines = article_slice(WIKI / name, n)
        if write and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(lines), encoding="utf-8")
        info[split] = {"file": name, "lines": len(lines),
                       "paragraphs": sum(bool(x.strip()) for x in lines),
                       "articles": sum(not x.strip() for x in lines)}
    return info


TRAIN_KEYS = ("loss", "mlm_loss", "sbo_loss", "num_updates", "wpb", "train_wall")


def parse_log(log):
    """fairseq's simple log -> (train curve, valid curve): lists of dicts of floats, one
    per update count (a resumed run logs the updates after its last checkpoint again:
    the last entry of each count is kept)."""
    train, valid = [], []
    for line in log.splitlines():
        if "valid on 'valid' subset" in line:
            stats = dict(re.findall(r"\| (\w+) ([-\d.]+)", line))
            valid.append({k: float(v) for k, v in stats.items()
                          if k in ("loss", "mlm_loss", "sbo_loss", "num_updates")})
        elif "train_inner" in line or re.search(r"\| INFO \| train_inner \|", line):
            stats = dict(re.findall(r"(\w+)=([-\d.]+)", line))
            if "num_updates" in stats:
                train.append({k: float(stats[k]) for k in TRAIN_KEYS if k in stats})
    return _last_per_update(train), _last_per_update(valid)


def _last_per_update(curve):
    by = {x.get("num_updates"): x for x in curve}
    return [by[k] for k in sorted(by, key=lambda u: -1 if u is None else u)]


class FixedEval:
    """MLM loss of a checkpoint on fixed maskings of the held-out split: one task per
    scheme (seed ``seed``, epoch 1), the same blocks and masks for every checkpoint."""

    def __init__(self, data, tokens_per_sample, seed, schemes, batch_size=32):
        self.data, self.tokens, self.seed, self.batch_size = str(data), tokens_per_sample, seed, batch_size
        self.schemes = schemes
        self.batches = None

    def _tasks(self):
        from omegaconf import OmegaConf

        from span_plugin.tasks.spanbert_masked_lm import SpanBertMaskedLMConfig, SpanBertMaskedLMTask

        tasks = {}
        for scheme in self.schemes:
            cfg = OmegaConf.structured(SpanBertMaskedLMConfig(
                data=self.data, masking=scheme, span_masking="geometric", seed=self.seed,
                tokens_per_sample=self.tokens, sample_break_mode="complete_doc"))
            tasks[scheme] = SpanBertMaskedLMTask.setup_task(cfg)
        return tasks

    def _build_batches(self):
        """scheme -> list of (src_tokens [B, T], target [B, T]) over the whole split."""
        self.tasks = self._tasks()
        self.batches = {}
        for scheme, task in self.tasks.items():
            task.load_dataset("valid")
            ds = task.dataset("valid")
            ds.set_epoch(1)
            items = [ds[i] for i in range(len(ds))]
            self.batches[scheme] = [ds.collater(items[i:i + self.batch_size])
                                    for i in range(0, len(items), self.batch_size)]
        self.masked = {s: int(sum(b["target"].ne(1).sum() for b in bs)) for s, bs in self.batches.items()}

    def __call__(self, checkpoint):
        """scheme -> MLM loss in bits per masked token."""
        import math

        import torch
        import torch.nn.functional as F
        from fairseq import checkpoint_utils

        if self.batches is None:
            self._build_batches()
        state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))
        task = self.tasks[self.schemes[0]]
        model = task.build_model(state["cfg"]["model"])
        model.load_state_dict(state["model"], strict=True, model_cfg=state["cfg"]["model"])
        model.eval()
        pad = task.dictionary.pad()
        out = {}
        with torch.no_grad():
            for scheme, batches in self.batches.items():
                total = n = 0.0
                for b in batches:
                    mask = b["target"].ne(pad)
                    logits = model(b["net_input"]["src_tokens"], masked_tokens=mask)[0]
                    total += F.cross_entropy(logits.float(), b["target"][mask], reduction="sum").item()
                    n += int(mask.sum())
                out[scheme] = round(total / n / math.log(2), 4)
        return out


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def model_dir_of(args):
    """The starting model folder given (absolute), or None: the recipe's default model."""
    return str(Path(args.model_dir).expanduser().resolve()) if args.model_dir else None


def model_sha256(args):
    """The sha256 of the starting model.pt given (--model-dir), or None (the default)."""
    return _file_sha256(str(Path(model_dir_of(args)) / "model.pt")) if args.model_dir else None


@functools.lru_cache(maxsize=None)
def _file_sha256(path):
    """Hashed once a process: :func:`matches` asks for every record it reads."""
    from span_plugin.preprocess.file_records import sha256

    return sha256(path)


def run_dir(name, work):
    return Path(work) / "runs" / name


def settings_of(name, args, work):
    """The recipe's environment for condition ``name``: every setting of the run (the
    thread count, which does not change what is trained, is left out)."""
    settings = {**CONDITIONS[name], **{
        "TRAIN_TEXT": str(work / "text" / "train.txt"), "VALID_TEXT": str(work / "text" / "valid.txt"),
        "DATA_DIR": str(work / "data"), "OUT_DIR": str(run_dir(name, work)), "TOKENS_PER_SAMPLE": str(args.tokens),
        "BREAK_MODE": "complete_doc", "BATCH_SIZE": str(args.batch), "LR": str(args.lr),
        "TOTAL_UPDATES": str(args.updates), "WARMUP_UPDATES": str(args.warmup),
        "SAVE_INTERVAL": str(args.interval), "SEED": str(args.seed), "WORKERS": "1"}}
    if args.model_dir:
        settings["MODEL_DIR"] = model_dir_of(args)
    return settings


OPEN_LAUNCH = "launch_open.json"  # a launch under way; left behind by one killed from outside
LOG_TIME = re.compile(rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \| ", re.M)


def record_interrupted(out):
    """A launch killed from outside (a session's end kills its process group, so
    :func:`launch` never wrote its line) left OUT_DIR/launch_open.json: append its line
    to OUT_DIR/launches.jsonl now, its wall time that of the train.log lines it wrote (from
    the log's size when it started; fairseq stamps every line), its CPU time unknown
    (``cpu_s`` None), ``interrupted`` true."""
    pending = out / OPEN_LAUNCH
    if not pending.exists():
        return
    entry = json.loads(pending.read_text(encoding="utf-8"))
    log = out / "train.log"
    stamps = LOG_TIME.findall(log.read_bytes()[entry.pop("log_offset"):] if log.exists() else b"")
    seconds = [time.mktime(time.strptime(x.decode(), "%Y-%m-%d %H:%M:%S")) for x in stamps[:1] + stamps[-1:]]
    entry.update(wall_s=round(seconds[-1] - seconds[0], 1) if seconds else 0.0, cpu_s=None,
                 returncode=None, interrupted=True)
    append_result(out / "launches.jsonl", entry)
    pending.unlink()


def launch(name, args, work, extra=()):
    """One launch of recipes/pretrain/spanbert.sh for condition ``name``, its output
    appended to OUT_DIR/recipe.log and its wall and CPU time to OUT_DIR/launches.jsonl
    (an earlier launch killed from outside is recorded first: :func:`record_interrupted`).
    Without ``args.resume`` an existing folder (an unfinished run) is deleted first; with it,
    the folder's run goes on from its checkpoint_last.pt (the recipe resumes it) when it
    was started with the same settings (OUT_DIR/settings.json), and checkpoints keep the
    optimizer state that resuming needs; a run already at ``args.updates`` is not launched
    (fairseq would take one more step on resuming). ``extra``: fairseq-train arguments,
    last."""
    from span_plugin.runtime.checkpoints import read_updates

    out = run_dir(name, work)
    settings = settings_of(name, args, work)
    if out.exists() and not args.resume:  # an unfinished run of an earlier launch: start it again
        shutil.rmtree(out)
    saved = out / "settings.json"
    if out.exists():
        if not saved.exists() or json.loads(saved.read_text(encoding="utf-8")) != settings:
            raise SystemExit(
                f"{out} holds an unfinished run of other settings (see {saved}): resuming it "
                f"would not train what these options say. Delete the folder, or give another --work-dir")
    else:
        from span_plugin.files.atomic import atomic_write

        out.mkdir(parents=True)
        atomic_write(saved, lambda f: f.write((json.dumps(settings, indent=1) + "\n").encode()))
    env = dict(os.environ, **settings, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    recipe_args = ["--cpu", "--num-workers", "0", "--log-interval", str(args.log_interval),
                   "--keep-interval-updates", "-1",
                   *([] if args.resume else ["--no-save-optimizer-state"]), *map(str, extra)]
    last = out / "checkpoints" / "checkpoint_last.pt"
    reached = (read_updates(last)[0] or 0) if last.exists() else 0
    if reached >= args.updates:  # trained, not yet recorded: fairseq would take one more step
        print(f"    {name}: {last} is at {reached} updates already", flush=True)
        return
    record_interrupted(out)
    entry = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "from_update": reached,
             "load_avg_at_start": round(os.getloadavg()[0], 2),  # a shared machine: wall time depends on it
             "cpu": cpu_model()}
    train_log = out / "train.log"
    offset = train_log.stat().st_size if train_log.exists() else 0  # where this launch's lines begin
    (out / OPEN_LAUNCH).write_text(json.dumps({**entry, "log_offset": offset}), encoding="utf-8")
    start, cpu0 = time.time(), children_cpu()
    with open(out / "recipe.log", "a", encoding="utf-8") as log:
        proc = subprocess.run(["bash", str(ROOT / "recipes" / "pretrain" / "spanbert.sh"), *recipe_args],
                              env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    entry.update(wall_s=round(time.time() - start, 1), cpu_s=round(children_cpu() - cpu0, 1),
                 returncode=proc.returncode)
    append_result(out / "launches.jsonl", entry)
    (out / OPEN_LAUNCH).unlink()
    if proc.returncode != 0:
        raise SystemExit(f"{name}: recipes/pretrain/spanbert.sh failed; see {out / 'recipe.log'}")


def finish(name, args, work, text_info, fixed):
    """The record of condition ``name``'s finished run: its curves, the fixed held-out
    maskings at every checkpoint, its launches' times, its final checkpoint (path and
    sha256). Nothing is deleted (:func:`clean`)."""
    from span_plugin.preprocess.file_records import sha256
    from span_plugin.runtime.checkpoints import read_updates

    out = run_dir(name, work)
    last = out / "checkpoints" / "checkpoint_last.pt"
    reached = read_updates(last)[0] if last.exists() else None
    if reached != args.updates:
        raise SystemExit(f"{name}: {last} is at {reached} updates, not {args.updates}: the run did not finish")
    record_interrupted(out)
    launches = read_results(out / "launches.jsonl")
    train, valid = parse_log((out / "train.log").read_text(encoding="utf-8"))

    # Fixed held-out maskings, every checkpoint.
    start, cpu0 = time.time(), time.process_time()
    ckpts = {}
    for p in (out / "checkpoints").glob("checkpoint_*_*.pt"):
        ckpts[int(p.stem.rsplit("_", 1)[1])] = p
    fixed_curve = []
    for update in sorted(ckpts):
        fixed_curve.append({"num_updates": update, **fixed(ckpts[update])})
        print(f"    {name} update {update}: {fixed_curve[-1]}", flush=True)
    if args.updates not in ckpts:
        fixed_curve.append({"num_updates": args.updates, **fixed(last)})
    eval_wall, eval_cpu = time.time() - start, time.process_time() - cpu0
    wpb = [x["wpb"] for x in train if "wpb" in x]
    return {
        "condition": name, **{k.lower(): v for k, v in CONDITIONS[name].items()},
        "model": f"{model_dir_of(args)} (span-convert folder)" if args.model_dir else DEFAULT_MODEL,
        "model_dir": model_dir_of(args), "model_sha256": model_sha256(args),
        "arch": "roberta_spanbert", "updates": args.updates, "warmup": args.warmup, "lr": args.lr,
        "batch": args.batch, "tokens_per_sample": args.tokens, "break_mode": "complete_doc",
        "seed": args.seed, "interval": args.interval, "eval_seed": args.eval_seed, "threads": args.threads,
        "data": text_info, "eval_masked_tokens": fixed.masked,
        "tokens_seen": round(sum(wpb) / len(wpb) * args.updates) if wpb else None,
        "train_curve": train, "valid_curve": valid, "fixed_curve": fixed_curve,
        "train_wall_min": round(sum(x["wall_s"] for x in launches) / 60, 2),
        # None when a launch was killed from outside: its CPU time is unknown
        "train_cpu_min": None if any(x["cpu_s"] is None for x in launches)
        else round(sum(x["cpu_s"] for x in launches) / 60, 2),
        "update_wall_min": round(sum(x.get("train_wall", 0) for x in train) / 60, 2),
        "eval_wall_min": round(eval_wall / 60, 2), "eval_cpu_min": round(eval_cpu / 60, 2),
        "load_avg_at_start": launches[0]["load_avg_at_start"] if launches else None,
        "resume": args.resume, "launches": launches, "checkpoint": str(last),
        "checkpoint_sha256": sha256(last),
        "finished": time.strftime("%Y-%m-%d %H:%M"), **trained_on(work / "data", last),
    }


def clean(name, work):
    """Delete a recorded run's interval checkpoints and checkpoint_best.pt;
    checkpoint_last.pt (the final weights) stays."""
    for p in [*(run_dir(name, work) / "checkpoints").glob("checkpoint_*_*.pt"),
              *(run_dir(name, work) / "checkpoints").glob("checkpoint_best.pt")]:
        p.unlink()


def pretrain(name, args, work, text_info, fixed):
    """Condition ``name`` from its start (or, with ``args.resume``, from where an earlier
    launch stopped) to its record, appended to ``args.results``; then :func:`clean`."""
    launch(name, args, work)
    record = finish(name, args, work, text_info, fixed)
    append_result(args.results, record)
    clean(name, work)
    return record


def matches(record, args, text_info):
    """Whether a record is a run of these options: budget, schedule, seed, data and
    starting model (by its model.pt's sha256, not its path; records from before
    ``model_sha256`` was kept: the default model)."""
    def budget(x):
        return tuple(x.get(k) for k in ("updates", "warmup", "lr", "batch", "tokens_per_sample", "seed"))

    return (budget(record) == budget({"updates": args.updates, "warmup": args.warmup, "lr": args.lr, "batch": args.batch,
                                      "tokens_per_sample": args.tokens, "seed": args.seed})
            and record.get("data") == text_info and record.get("model_sha256") == model_sha256(args))


def parser():
    """The options (experiments/spanbert_qa.py takes them with other defaults)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "masking_ablation.jsonl"))
    p.add_argument("--work-dir", default=str(ROOT / "runs" / "masking_ablation"))
    p.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    p.add_argument("--model-dir", help="span-convert folder to start from (MODEL_DIR) [the recipe's "
                   "default: the packaged all-MiniLM-L6-v2]")
    p.add_argument("--train-lines", type=int, default=3000)
    p.add_argument("--valid-lines", type=int, default=250)
    p.add_argument("--updates", type=int, default=125)
    p.add_argument("--warmup", type=int, default=12)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--interval", type=int, default=25, help="updates between validations and checkpoints")
    p.add_argument("--log-interval", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-seed", type=int, default=12345)
    p.add_argument("--eval-schemes", nargs="+", default=["token", "span"],
                   choices=["token", "whole-word", "span"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--resume", action="store_true",
                   help="continue an unfinished condition from its checkpoint_last.pt instead of "
                   "starting it again (checkpoints keep their optimizer state)")
    p.add_argument("--max-runs", type=int, default=None)
    return p


def prepare(args):
    """Plugin registered, torch threads set; ``(work dir, text info, fixed evaluation)``."""
    import torch

    import span_plugin

    span_plugin.register()
    torch.set_num_threads(args.threads)
    work = Path(args.work_dir).expanduser().resolve()
    text_info = prepare_text(work, args)
    return work, text_info, FixedEval(work / "data", args.tokens, args.eval_seed, args.eval_schemes)


def main(argv=None):
    args = parser().parse_args(argv)
    work, text_info, fixed = prepare(args)
    done = {r["condition"] for r in read_results(args.results) if matches(r, args, text_info)}
    todo = [c for c in args.conditions if c not in done]
    print(f"{len(args.conditions) - len(todo)} of {len(args.conditions)} conditions already in {args.results}", flush=True)
    for n, name in enumerate(todo):
        if args.max_runs is not None and n >= args.max_runs:
            break
        print(f"[{time.strftime('%H:%M:%S')}] {name} ...", flush=True)
        record = pretrain(name, args, work, text_info, fixed)
        last = record["valid_curve"][-1] if record["valid_curve"] else {}
        print(f"    {name}: valid {last}, fixed {record['fixed_curve'][-1]}; train "
              f"{record['train_wall_min']} min wall / {record['train_cpu_min']} CPU, eval "
              f"{record['eval_wall_min']} / {record['eval_cpu_min']}", flush=True)


if __name__ == "__main__":
    main()
