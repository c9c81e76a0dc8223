"""Resumable transfer fine-tuning grid: does transfer fine-tuning with
phrasal and sentential paraphrases (recipes/transfer/paraphrase.sh) help the target task,
with little or with all of its training data, and which part of it helps?

Cells are (target, share of its train rows, condition, seed):
    target     MRPC or STS-B, fine-tuned with the plain head through recipes/glue/
    share      10 or 100 (%); the 10% subset is drawn once per (target, seed), written
               to --subsets (committed) and shared by every condition
    condition  none        the encoder as converted
               transfer    phrasal + sentential paraphrase objectives first
               phrasal     phrasal objective only   (the method's own hypotheses)
               sentential  sentential objective only
               matched     compute-matched control: no transfer, but the target run gets
                           as many extra updates (same batch size) as the transfer run of
                           (target, seed) has: ceil(transfer train rows / batch) x
                           transfer epochs; its schedule (warm-up, decay) spans them all
Transfer data for a target comes from the other task's training pairs only (the weak
aligner, span-preprocess align-pairs, version ALIGNER_VERSION), without every pair that
shares a sentence with the target's dev or test file (STS-B's MSRpar genre comes from the
MRPC corpus); the dropped count, the class counts and the identity rule's accuracy
(identical -> paraphrase; random partner -> random; else in-paraphrase) on the train and
dev pairs are recorded. One transfer run per (target, condition, seed), reused by both
shares.

Every finished fine-tuning run is a JSON line of --results (kind "finetune"), every
transfer run one too (kind "transfer"); a relaunch skips them. Records of the conditions
that use transfer data carry "aligner" (the aligner version; records without it were
made by version 1, whose positives were mostly identical strings): a new aligner version
runs those cells again, and the report keeps the versions apart. A 100% run without
transfer is a plain run of the GLUE grid (--glue-results): taken from there when it has
one with these settings, else run and appended there too, so that neither grid runs it
twice.

The issue's control grid (2 targets x 2 shares x 5 conditions x 3 seeds; the "none" runs
already in the results file are reused), then the report. The records so far were made
with the `--roberta-only` conversion (both sentences as segment A, no pooler; the run
keys do not name the encoder, so resume with that one: new records carry the model's
fairseq-train flags, and a grid given another model stops):

    span-convert bert --hf-dir $M --out ~/.cache/span_plugin/models/all-MiniLM-L6-v2 \\
        --roberta-only
    python experiments/transfer_grid.py \\
        --model-dir ~/.cache/span_plugin/models/all-MiniLM-L6-v2 \\
        --targets MRPC STS-B --shares 10 100 --seeds 1 2 3 \\
        --conditions none transfer phrasal sentential matched
    python experiments/transfer_report.py --results experiments/results/transfer_minilm.jsonl \\
        --out experiments/RESULTS_TRANSFER_MINILM.md --plot docs/figures/transfer_minilm.png

Add --max-runs N to stop after N new fine-tuning runs (a relaunch resumes), --device cpu
to force the CPU.
"""

import argparse
import json
import math
import random
import shutil
import sys
from pathlib import Path

from glue_grid import VARIANTS, hparams, run_glue, train_rows
from grid_lib import (
    GLUE, ROOT, append_result, check_model, model_flags, read_results, resolve_device, run_grid,
    run_recipe, trained_on)

from span_plugin.preprocess.folders.align import ALIGNER_VERSION

CONDITIONS = {  # condition -> loss weights of the transfer run (None: no transfer run)
    "none": None,
    "transfer": {"PHRASAL_WEIGHT": "1", "SENTENTIAL_WEIGHT": "1"},
    "phrasal": {"PHRASAL_WEIGHT": "1", "SENTENTIAL_WEIGHT": "0"},
    "sentential": {"PHRASAL_WEIGHT": "0", "SENTENTIAL_WEIGHT": "1"},
    "matched": None,  # no transfer run: its updates, spent on the target task
}
USES_TRANSFER_DATA = ("transfer", "phrasal", "sentential", "matched")
SOURCE = {"MRPC": "STS-B", "STS-B": "MRPC"}  # target -> where its transfer data comes from
OLD_ALIGNER = 1  # the version of records that name none


def aligner_of(condition, record=None):
    """The aligner version a cell depends on: None for "none"; a record's own (version
    1 when it names none), or the current one."""
    if condition not in USES_TRANSFER_DATA:
        return None
    return record.get("aligner", OLD_ALIGNER) if record is not None else ALIGNER_VERSION


def cell_key(target, share, condition, seed, hp, aligner):
    return ("finetune", target, share, condition, seed, hp["lr"], hp["epochs"], aligner)


def record_key(r):
    if r["kind"] != "finetune":
        return ("transfer", r["target"], r["condition"], r["seed"], r.get("aligner", OLD_ALIGNER))
    return cell_key(r["task"], r["share"], r["condition"], r["seed"], r["hparams"],
                    aligner_of(r["condition"], r))


def subset_rows(subsets_path, glue_dir, task, share, seed):
    """Line numbers (0-based, header excluded) of the ``share`` % train subset of
    (task, seed): drawn once, then read back from ``subsets_path``."""
    subsets = json.loads(Path(subsets_path).read_text()) if Path(subsets_path).exists() else {}
    key = f"{task} {share}% seed {seed}"
    if key not in subsets:
        n = train_rows(glue_dir, task)
        picked = random.Random(f"{task}-{share}-{seed}").sample(range(n), round(n * share / 100))
        subsets[key] = sorted(picked)
        Path(subsets_path).parent.mkdir(parents=True, exist_ok=True)
        Path(subsets_path).write_text("{\n" + ",\n".join(  # one subset a line
            f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(subsets.items())) + "\n}\n")
    return subsets[key]


def subset_glue_dir(args, task, share, seed):
    """A GLUE folder for ``task`` whose train.tsv holds only the subset's rows (header
    kept; dev and test copied)."""
    if share == 100:
        return Path(args.glue_dir)
    out = Path(args.work_dir).resolve() / "glue" / f"{task}-p{share}-s{seed}"
    if not (out / task / "train.tsv").exists():
        keep = subset_rows(args.subsets, args.glue_dir, task, share, seed)
        src = Path(args.glue_dir) / task
        lines = (src / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
        rows = train_rows(args.glue_dir, task)
        if len(lines) - 1 != rows:
            raise SystemExit(f"{src / 'train.tsv'}: {len(lines) - 1} lines after the header "
                             f"but {rows} rows; a subset of lines would not be a subset of rows")
        (out / task).mkdir(parents=True, exist_ok=True)
        for split in ("dev.tsv", "test.tsv"):
            if (src / split).exists():
                shutil.copy(src / split, out / task / split)
        tmp = out / task / "train.tsv.tmp"
        tmp.write_text("".join([lines[0]] + [lines[1 + i] for i in keep]), encoding="utf-8")
        tmp.rename(out / task / "train.tsv")
    return out


def transfer_data(args, target, seed):
    """The aligned transfer pairs of (target, seed): (folder with train.jsonl and
    dev.jsonl, statistics per split). Made on every call (a second or two), the same
    files each time (the aligner is seeded)."""
    from span_plugin.preprocess.folders.align import AlignSettings, align_file

    source, glue = SOURCE[target], Path(args.glue_dir)
    exclude = [glue / target / f for f in ("dev.tsv", "test.tsv") if (glue / target / f).exists()]
    pairs = Path(args.work_dir).resolve() / "transfer" / "pairs" / f"{target}-s{seed}-a{ALIGNER_VERSION}"
    pairs.mkdir(parents=True, exist_ok=True)
    stats = {}
    for split in ("train", "dev"):
        s = align_file(glue / source / f"{split}.tsv", pairs / f"{split}.jsonl",
                       AlignSettings(seed=seed, words="bert"),  # a span-convert model: WordPiece
                       exclude=exclude)
        stats[split] = {"paraphrase_rows": s.paraphrase_rows, "random_rows": s.random_rows,
                        "excluded_rows": s.excluded_rows, "phrase_pairs": dict(s.classes),
                        "identity_rule": s.rule.as_dict()}
    return pairs, stats


def transfer_updates(args, stats):
    """Updates of a transfer run on these pairs: the recipe's count (one row a line of
    the train file, batches of --transfer-batch-size, --transfer-epochs passes)."""
    rows = stats["train"]["paraphrase_rows"] + stats["train"]["random_rows"]
    return math.ceil(rows / args.transfer_batch_size) * args.transfer_epochs


def transferred_model(args, target, condition, seed, device, done):
    """The MODEL_DIR folder of the transfer run of (target, condition, seed), run first
    when missing; its record goes to the results file once (a model recorded by an
    earlier session on another machine is rebuilt, its validation figures printed to
    compare with the record's)."""
    work = Path(args.work_dir).resolve() / "transfer" / f"{target}-{condition}-s{seed}-a{ALIGNER_VERSION}"
    model = work / "out" / "transferred"
    key = ("transfer", target, condition, seed, ALIGNER_VERSION)
    if key in done and (model / "model.pt").exists():
        return model
    pairs, stats = transfer_data(args, target, seed)
    for split, st in stats.items():
        print(f"    transfer data from {SOURCE[target]} {split}: {st['paraphrase_rows']} paraphrase "
              f"rows ({st['excluded_rows']} dropped for the overlap), phrase pairs "
              f"{st['phrase_pairs']}, identity rule {st['identity_rule']['accuracy']:.1f}%",
              flush=True)
    env = dict(MODEL_DIR=Path(args.model_dir).resolve(), PAIRS=pairs / "train.jsonl",
               PAIRS_VALID=pairs / "dev.jsonl", SEED=seed, LR=f"{args.transfer_lr:g}",
               EPOCHS=args.transfer_epochs, BATCH_SIZE=args.transfer_batch_size,
               DATA_DIR=work / "data", OUT_DIR=work / "out", WORKERS=args.workers,
               **CONDITIONS[condition])
    extra = ["--log-interval", "50", "--num-workers", "0"] + (["--cpu"] if device == "cpu" else [])
    minutes = run_recipe("recipes/transfer/paraphrase.sh", env, extra, work / "out",
                         f"transfer for {target} ({condition}) seed {seed}")
    facts = trained_on(work / "data", work / "out" / "checkpoints" / "checkpoint_best.pt")
    shutil.rmtree(work / "out" / "checkpoints", ignore_errors=True)
    if key in done:  # recorded by an earlier session, its model not on this machine: rebuilt
        print(f"    rebuilt the transferred model (already recorded): {model}; valid "
              f"{last_validation(work / 'out' / 'recipe.log')}", flush=True)
        return model
    append_result(args.results, {
        "kind": "transfer", "target": target, "source": SOURCE[target], "condition": condition,
        "seed": seed, "aligner": ALIGNER_VERSION, "data": stats, "weights": CONDITIONS[condition],
        "valid": last_validation(work / "out" / "recipe.log"),  # of the transfer objectives
        "hparams": {"lr": args.transfer_lr, "epochs": args.transfer_epochs,
                    "batch_size": args.transfer_batch_size, "updates": transfer_updates(args, stats)},
        "minutes": minutes, "device": device, "model_flags": args.flags, **facts})
    done.add(key)
    return model


def last_validation(log_path):
    """The figures of the last ``valid on 'valid' subset`` line of a fairseq log
    (simple format): {name: value}, speed figures left out."""
    lines = [line for line in Path(log_path).read_text(encoding="utf-8").splitlines()
             if "valid on 'valid' subset" in line]
    if not lines:
        return {}
    fields = (f.strip().split(" ", 1) for f in lines[-1].split("subset", 1)[1].split("|"))
    return {k: float(v) for k, v in (f for f in fields if len(f) == 2)
            if k not in ("wps", "wpb", "bsz", "num_updates")}


def reusable(glue_results, task, seed, hp):
    """A plain-head run of the GLUE grid with these settings, or None."""
    for r in read_results(glue_results):
        if (r["task"], r["variant"], r["seed"]) == (task, "plain", seed) and r["hparams"] == hp:
            return r
    return None


def run_cell(args, target, share, condition, seed, device, done):
    glue_dir = subset_glue_dir(args, target, share, seed)
    epochs = args.epochs if share == 100 else args.small_epochs
    rows = train_rows(glue_dir, target)
    hp = hparams(args.lr, args.batch_size, epochs, args.warmup, rows)
    tag = {"kind": "finetune", "share": share, "condition": condition}
    if condition in USES_TRANSFER_DATA:
        tag["aligner"] = ALIGNER_VERSION
    # Fine-tuning the encoder itself on all rows is the GLUE grid's plain run: share it.
    baseline = condition == "none" and share == 100
    if baseline:
        tag["reused_from"] = Path(args.glue_results).name
        if r := reusable(args.glue_results, target, seed, hp):
            return {**r, **tag}
    run_hp = hp
    if condition == "matched":
        # The transfer run's updates, spent on the target instead; --max-epoch allows them.
        extra_updates = transfer_updates(args, transfer_data(args, target, seed)[1])
        updates = hp["updates"] + extra_updates
        run_hp = dict(hp, epochs=math.ceil(updates / math.ceil(rows / args.batch_size)),
                      updates=updates)
    model = Path(args.model_dir) if CONDITIONS[condition] is None else transferred_model(
        args, target, condition, seed, device, done)
    work = Path(args.work_dir).resolve()
    data = work / "data" / (f"{target}-p{share}" + (f"-s{seed}" if share != 100 else ""))
    out = work / "runs" / (f"{target}-p{share}-{condition}-s{seed}"
                           + (f"-a{ALIGNER_VERSION}" if condition in USES_TRANSFER_DATA else ""))
    record = {**run_glue(target, VARIANTS["plain"], seed, run_hp, model, glue_dir, data, out,
                         args.workers, device), "variant": "plain"}
    if condition == "matched":  # keyed by the nominal epochs, as the other conditions
        record["hparams"] = dict(hp, updates=run_hp["updates"], max_epoch=run_hp["epochs"],
                                 extra_updates=extra_updates)
    if baseline:
        append_result(args.glue_results, {**record, "model_flags": args.flags})
    return {**record, **tag}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True,
                   help="a span-convert output folder (the recipes' packaged model is "
                   "converted to ~/.cache/span_plugin/models/all-MiniLM-L6-v2)")
    p.add_argument("--glue-dir", default=str(GLUE))
    p.add_argument("--targets", nargs="+", default=["MRPC", "STS-B"], choices=list(SOURCE))
    p.add_argument("--shares", nargs="+", type=int, default=[10, 100])
    p.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS),
                   help="default: all (see above)")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "transfer_minilm.jsonl"))
    p.add_argument("--subsets", default=str(ROOT / "experiments" / "results" / "transfer_subsets.json"))
    p.add_argument("--glue-results", default=str(ROOT / "experiments" / "results" / "glue_minilm.jsonl"),
                   help="GLUE grid results whose plain runs stand for 100%% runs without transfer")
    p.add_argument("--work-dir", default=str(ROOT / "runs" / "transfer_grid"))
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=3, help="fine-tuning epochs on 100%% of the rows")
    p.add_argument("--small-epochs", type=int, default=10, help="fine-tuning epochs on a subset")
    p.add_argument("--warmup", type=float, default=0.06, help="share of updates")
    p.add_argument("--transfer-lr", type=float, default=5e-5)
    p.add_argument("--transfer-epochs", type=int, default=2)
    p.add_argument("--transfer-batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--max-runs", type=int, help="stop after this many new fine-tuning runs")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    args.flags = model_flags(args.model_dir)
    check_model(args.glue_results, args.flags)  # its plain runs are this grid's 100% baselines
    done = {record_key(r) for r in read_results(args.results)}
    cells = {}
    for share in args.shares:  # the small-data comparison, where the effect should show, first
        for seed in args.seeds:
            for target in args.targets:
                for condition in args.conditions:
                    epochs = args.epochs if share == 100 else args.small_epochs
                    key = cell_key(target, share, condition, seed, {"lr": args.lr, "epochs": epochs},
                                   aligner_of(condition))
                    cells[key] = (target, share, condition, seed)
    run_grid(cells, done, lambda c: run_cell(args, *c, device, done), args.results, args.max_runs,
             name=lambda c: f"{c[0]} {c[1]}% {c[2]} seed {c[3]}",
             show=lambda r: f"{r['metric']} {r['value']:.2f}", flags=args.flags)
    return 0


if __name__ == "__main__":
    sys.exit(main())
