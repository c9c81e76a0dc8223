"""SpanBERT's claim on this stack: does continued pre-training with span
masking, with or without the span boundary objective (SBO), make a better extractive-QA
encoder than BERT's token masking at the same compute?

The chain, one condition at a time, in the order token, span, span+sbo:
1. continued pre-training of all-MiniLM-L6-v2 (the ``span-convert bert --roberta-only``
   folder the QA grid fine-tunes) on Wikipedia with recipes/pretrain/spanbert.sh, by
   experiments/masking_ablation.py's code with ``--resume`` and the budget below
   (results: experiments/results/spanbert_pretrain_minilm.jsonl, one line a condition:
   curves, the fixed held-out maskings at every checkpoint, times);
2. its checkpoint_last.pt exported as a span-convert folder (:func:`export`: model.pt
   without the SBO head and optimizer state, dict.txt and tokenizer files of the starting
   folder; WORK/encoders/<condition>-u<updates>/, with encoder.json: path, sha256,
   objective, budget), and how far it moved from the start model, layer by layer
   (:func:`drift`; experiments/results/spanbert_qa_drift.jsonl);
3. QA fine-tuning of that encoder with experiments/qa_grid.py: boundary head, word
   answers, seeds 1-3, every other setting qa_grid's defaults, i.e. those of the boundary
   runs of experiments/results/qa_minilm.jsonl, which serve as the "none" condition (no
   continued pre-training) where their settings match exactly (results:
   experiments/results/qa_spanbert_minilm.jsonl, each record naming its encoder by path
   and sha256 with its objective and budget under ``pretraining``).

Budget (fixed before any run): 3,000 updates of 16 blocks of at most 128 tokens
(complete_doc: blocks never cross articles), peak learning rate 1e-4 (SpanBERT's and
BERT's pre-training peak, the recipe's default; not the masking ablation's 3e-4, which
was picked to leave the unigram plateau within 125 updates, and not tuned on SQuAD), 180
warm-up updates (the recipe's 6%) then linear decay to 0, seed 1, one CPU thread. The
training text is the first 70,000 lines of wiki.AB (70,021 lines to the end of an
article, 1,375 articles, 5.02M tokens, 3,308 batches of 16 blocks an epoch: no block is
seen twice in 3,000 updates, and every objective sees the same batches in the same
order); the held-out text, its validation curve and its fixed token and span maskings
(seed 12345) are the masking ablation's (the first 250 lines of wiki.AD, 158 blocks).

How the 3,000 were chosen: a timed run of this very setup (these 70,000 lines, one
thread of this 2-core machine while its other core fine-tuned a QA model, load average
2-3) took, over updates 10-60 (1,520 tokens an update, the epoch's mean), 1.30 s an
update for token masking, 1.32 s for span and 1.54 s for span+sbo (the SBO head). 3,000
updates are then 65-77 minutes of training, plus about 4 minutes of start-up,
validations and the fixed evaluation of 13 checkpoints: 70-82 minutes a condition,
inside the issue's 1-2 hours with a 1.5x margin for a busier machine (4,000 updates
would be 90-107 minutes, too close to 2 hours under load). Each QA fine-tuning is about
50 minutes more (qa_grid's boundary runs), so a whole condition is about 4 hours.

Resumable: a relaunch skips recorded conditions and QA runs, resumes an unfinished
pre-training from its checkpoint_last.pt and an unfinished fine-tuning from its own, and
trains a recorded condition whose final checkpoint is gone or changed again (:func:`remade`:
it must retrace the record's logged losses; its new record names the lost checkpoint, whose
QA runs stay paired); one chain at a time holds WORK/lock; ``--status`` says what a
relaunch would do next, writing nothing. Relaunch in the background (``--max-runs N``
stops after N new runs, a pre-training and a fine-tuning seed each counting one):

    mkdir -p ~/.cache/span_plugin/experiments
    setsid nohup .venv/bin/python experiments/spanbert_qa.py \\
        >> ~/.cache/span_plugin/experiments/spanbert_qa.log 2>&1 &
    .venv/bin/python experiments/spanbert_qa.py --report   # experiments/RESULTS_SPANBERT_QA_MINILM.md

(stop it with ``kill -- -PID``, PID that of the python process: setsid made it the
leader of a group with the recipes it started).
"""

import argparse
import fcntl
import json
import os
import sys
import time
from pathlib import Path

import masking_ablation
import masking_report
import qa_grid
from grid_lib import ROOT, append_result, mean_sd, paired_line, read_results, write_report

# Token masking at a lower peak learning rate: the control that moves the transformer
# layers as little as span+sbo did (issue 55). Its rate was fixed from the drift table of
# the three 1e-4 runs alone, before any of its runs: span+sbo's layer drift over token's is
# 0.918, 0.912, 0.908, 0.925, 0.951, 0.925 for layers 0-5 (mean 0.923), and with Adam
# each update moves a weight by about lr, so the distance travelled in the same updates
# scales with the peak rate: 1e-4 x 0.92.
DRIFT_MATCHED = "token-dm"
DRIFT_MATCHED_LR = 9.2e-5
CONDITIONS = ("token", "span", "span+sbo", DRIFT_MATCHED)
LR_OF = {DRIFT_MATCHED: DRIFT_MATCHED_LR}  # conditions that do not train at --lr
masking_ablation.CONDITIONS.setdefault(DRIFT_MATCHED, masking_ablation.CONDITIONS["token"])
NONE = "none"  # the converted model fine-tuned without continued pre-training
PAIRS = (("span+sbo", DRIFT_MATCHED), ("span+sbo", "token"), (DRIFT_MATCHED, "token"),
         ("span", "token"), ("token", NONE), ("span+sbo", "span"))
CACHE = Path(os.environ.get("SPAN_CACHE") or "~/.cache/span_plugin").expanduser()
BUDGET = ("updates", "warmup", "lr", "batch", "tokens_per_sample", "break_mode", "seed")
PRESET = dict(
    updates=3000, warmup=180, lr=1e-4, batch=16, tokens=128, seed=1, interval=250,
    log_interval=50, train_lines=70000, valid_lines=250, eval_seed=12345, threads=1,
    resume=True, conditions=list(CONDITIONS),
    model_dir=str(CACHE / "models" / "all-MiniLM-L6-v2"),
    work_dir=str(CACHE / "experiments" / "spanbert_qa"),
    results=str(ROOT / "experiments" / "results" / "spanbert_pretrain_minilm.jsonl"))


def parser():
    """masking_ablation's options with this experiment's defaults, and the QA ones."""
    p = masking_ablation.parser()
    p.description = __doc__
    p.set_defaults(**PRESET)
    p.add_argument("--qa-results", default=str(ROOT / "experiments" / "results" / "qa_spanbert_minilm.jsonl"))
    p.add_argument("--baseline-results", default=str(ROOT / "experiments" / "results" / "qa_minilm.jsonl"),
                   help="qa_grid's records of the converted model: its boundary runs of the "
                   "same settings are the 'none' condition")
    p.add_argument("--qa-seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    p.add_argument("--none-runs", action=argparse.BooleanOptionalAction, default=True,
                   help="fine-tune the converted model itself (the 'none' condition) at the "
                   "seeds its grid lacks, after the conditions, into --baseline-results")
    p.add_argument("--squad-dev", default=qa_grid.parser().get_default("squad_dev"))
    p.add_argument("--qa-device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--qa-threads", type=int, default=None,
                   help="CPU threads of each fine-tuning (default: --threads, which the "
                   "pre-training keeps: a re-made pre-training retraces its record on one thread "
                   "only); recorded in each QA record")
    p.add_argument("--report", action="store_true", help="only write the report")
    p.add_argument("--status", action="store_true",
                   help="only say what a relaunch on --work-dir would do next, condition by "
                   "condition (pre-trained, re-make from which update, QA seeds left); writes nothing")
    p.add_argument("--recheck", nargs="+", type=int, metavar="SEED",
                   help="fine-tune these seeds again into --recheck-results (WORK/qa-recheck), from "
                   "each of --conditions' current encoder (does a re-made encoder fine-tune as the "
                   "lost one it retraces did?) and, with --none-runs, from the converted model (does "
                   "this machine fine-tune as the recorded runs' did?); then write the report")
    p.add_argument("--recheck-results",
                   default=str(ROOT / "experiments" / "results" / "qa_spanbert_recheck.jsonl"))
    p.add_argument("--drift", action="store_true",
                   help="only record the drift of the exported encoders (the chain does it after "
                   "each export), then write the report")
    p.add_argument("--drift-results", default=str(ROOT / "experiments" / "results" / "spanbert_qa_drift.jsonl"))
    p.add_argument("--report-file", default=str(ROOT / "experiments" / "RESULTS_SPANBERT_QA_MINILM.md"))
    p.add_argument("--figure", default=str(ROOT / "docs" / "figures" / "spanbert_qa_pretraining.png"))
    p.add_argument("--qa-extra", nargs=argparse.REMAINDER, default=[],
                   help="fairseq-train arguments of the fine-tunings, last on the command line "
                   "(smoke runs: --max-update 2); recorded in their hparams")
    return p


# ---- 2. export ---------------------------------------------------------------------------


def encoder_folder(work, condition, updates):
    """Where condition's encoder of ``updates`` pre-training updates is exported
    (span+sbo -> WORK/encoders/span-sbo-u3000)."""
    return work / "encoders" / f"{condition.replace('+', '-')}-u{updates}"


def export(record, args, work):
    """Condition ``record``'s final weights (its checkpoint_last.pt) as a span-convert
    folder that ``qa_grid.py --model-dir`` and recipes/qa/squad.sh take: model.pt without
    the SBO head (``classification_heads.sbo``) and without optimizer state
    (:func:`span_plugin.runtime.transfer.write_stripped`; the masked-LM head stays,
    unused by the QA model, which the recipe trains with --find-unused-parameters),
    next to copies of the starting folder's dict.txt and tokenizer files. Written once;
    a relaunch reuses it while checkpoint and export are unchanged. Returns the path of
    its provenance file, encoder.json (path and sha256 of model.pt, objective,
    pre-training budget, source checkpoint and its sha256, and ``reproduces``: the lost
    checkpoints a re-made pre-training retraced, whose QA runs qa_grid counts as this
    encoder's)."""
    from span_plugin.convert.flags import checkpoint_train_flags
    from span_plugin.files.atomic import atomic_write
    from span_plugin.preprocess.file_records import sha256
    from span_plugin.runtime.checkpoints import load_mapped
    from span_plugin.runtime.transfer import write_stripped

    name = record["condition"]
    checkpoint = Path(record["checkpoint"])
    folder = encoder_folder(work, name, record["updates"])
    provenance = folder / "encoder.json"
    if not checkpoint.is_file():
        raise SystemExit(f"{name}: {checkpoint}, the final weights of its recorded pre-training, is "
                         f"gone: delete the condition's line of {args.results} (and {checkpoint.parent.parent}) "
                         "to train it again")
    source_sha = sha256(checkpoint)
    if source_sha != record["checkpoint_sha256"]:
        raise SystemExit(f"{name}: {checkpoint} changed since its pre-training was recorded "
                         f"(sha256 {source_sha[:12]}, recorded {record['checkpoint_sha256'][:12]})")
    reproduces = sorted(same_sources(record) - {source_sha})  # lost checkpoints it retraces
    if provenance.exists():
        old = json.loads(provenance.read_text(encoding="utf-8"))
        if old["source_sha256"] == source_sha and sha256(folder / "model.pt") == old["sha256"]:
            if old.get("reproduces", []) != reproduces:  # written before the field existed
                old["reproduces"] = reproduces
                atomic_write(provenance, lambda f: f.write((json.dumps(old, indent=1) + "\n").encode()))
            return provenance
    target, heads = write_stripped(str(checkpoint), str(folder), model_dir=args.model_dir)
    state = load_mapped(target)
    left = sorted({k.split(".")[1] for k in state["model"] if k.startswith("classification_heads.")})
    if left or not any(k.startswith("encoder.sentence_encoder.") for k in state["model"]):
        raise SystemExit(f"{target}: heads {left} left, or no encoder: not a RoBERTa-family "
                         "checkpoint the QA model can start from with fresh heads")
    if checkpoint_train_flags(target) != checkpoint_train_flags(args.model_dir):
        raise SystemExit(f"{target} has the sizes {checkpoint_train_flags(target)}, its starting "
                         f"model {args.model_dir} {checkpoint_train_flags(args.model_dir)}: the QA runs "
                         "would not compare with the converted model's")
    start = Path(args.model_dir).resolve() / "model.pt"
    entry = {
        "objective": name, "masking": record["masking"], "sbo_weight": record["sbo_weight"],
        "path": str(Path(target).resolve()), "sha256": sha256(target), "heads_removed": heads,
        "source_checkpoint": str(checkpoint), "source_sha256": source_sha,
        "reproduces": reproduces,
        "start_model": {"path": str(start), "sha256": sha256(start)},
        "budget": {**{k: record[k] for k in BUDGET}, "tokens_seen": record.get("tokens_seen"),
                   "data": record["data"], "finished": record["finished"],
                   "results": os.path.relpath(args.results, ROOT)},
    }
    atomic_write(provenance, lambda f: f.write((json.dumps(entry, indent=1) + "\n").encode()))
    print(f"    {name}: exported {target} (sha256 {entry['sha256'][:12]}; removed: "
          f"{', '.join(heads) or 'nothing'})", flush=True)
    return provenance


def drift(provenance, args):
    """How far continued pre-training moved an exported encoder from its start model
    (encoder.json's ``start_model``): ||W - W0|| / ||W0|| over the embeddings' weights and
    over each transformer layer's, the masked-LM head left out (the QA model does not use
    it). Appended once per encoder sha256 to ``args.drift_results``. Why: every condition
    fine-tunes below "none", so how far an objective moves the encoder is a rival
    explanation of the differences between objectives."""
    from span_plugin.runtime.checkpoints import load_state

    entry = json.loads(Path(provenance).read_text(encoding="utf-8"))
    if any(r["sha256"] == entry["sha256"] for r in read_results(args.drift_results)):
        return
    trained, start = (load_state(x)["model"] for x in (entry["path"], entry["start_model"]["path"]))
    prefix = "encoder.sentence_encoder."
    groups = {}
    for key, w0 in start.items():
        # (fairseq's "version" buffer is a float tensor, not a weight)
        if key.startswith(prefix) and w0.is_floating_point() and not key.endswith(".version"):
            part = key[len(prefix):].split(".")
            group = f"layer {part[1]}" if part[0] == "layers" else "embeddings"
            num, den = groups.get(group, (0.0, 0.0))
            groups[group] = (num + float(((trained[key].double() - w0.double()) ** 2).sum()),
                             den + float((w0.double() ** 2).sum()))
    append_result(args.drift_results, {
        "objective": entry["objective"], "path": entry["path"], "sha256": entry["sha256"],
        "source_sha256": entry["source_sha256"], "start_sha256": entry["start_model"]["sha256"],
        "updates": entry["budget"]["updates"],
        "relative_change": {g: round((n / d) ** 0.5, 5) for g, (n, d) in groups.items()}})


# ---- 1 and 3: the chain ------------------------------------------------------------------


def qa_argv(args, folder, provenance, max_runs, results=None, sub="qa"):
    """qa_grid's options for an encoder folder: the boundary head at word answers, every
    other setting qa_grid's default (those of the converted model's runs); records into
    ``results`` (default --qa-results), runs in WORK/``sub``."""
    return ["--model-dir", str(folder), "--encoder-record", str(provenance),
            "--squad-dev", args.squad_dev, "--heads", "boundary", "--answer-boundaries", "word",
            "--decode", "word", "--seeds", *map(str, args.qa_seeds),
            "--results", results or args.qa_results,
            "--work-dir", str(Path(args.work_dir).expanduser().resolve() / sub),
            "--device", args.qa_device,
            *(["--max-runs", str(max_runs)] if max_runs is not None else []),
            *(["--extra", *args.qa_extra] if args.qa_extra else [])]


def condition_args(name, args):
    """The options condition ``name`` pre-trains with: ``args``, at its own peak learning
    rate where it has one (:data:`LR_OF`)."""
    return argparse.Namespace(**{**vars(args), "lr": LR_OF.get(name, args.lr)})


def none_argv(args, max_runs, results=None, sub="qa-none"):
    """qa_grid's options for the "none" condition: the converted model itself, the
    settings of :func:`qa_argv`, into ``results`` (default: the converted model's own
    results file, where qa_grid's earlier seeds are), in WORK/``sub``."""
    argv = qa_argv(args, args.model_dir, None, max_runs, results or args.baseline_results, sub)
    at = argv.index("--encoder-record")
    del argv[at:at + 2]
    return argv


def recorded(name, args, text_info):
    """The latest pre-training record of condition ``name`` made with these options."""
    args = condition_args(name, args)
    found = [r for r in read_results(args.results)
             if r["condition"] == name and masking_ablation.matches(r, args, text_info)]
    return found[-1] if found else None


def same_sources(record):
    """The checkpoint digests whose QA runs and drift belong to ``record``'s pre-training:
    its own and, for a re-made run (:func:`remade`), every lost one it retraces (a list;
    a single digest in records written before a run could be re-made twice)."""
    earlier = record.get("reproduces") or []
    return {record.get("checkpoint_sha256"), *([earlier] if isinstance(earlier, str) else earlier)} - {None}


def intact(record):
    """Whether ``record``'s final checkpoint is still the one it recorded. A file of other
    bytes is not: a re-made run cut off in the record's own folder leaves its unfinished
    checkpoint_last.pt at the recorded path (the chain then resumes the re-make)."""
    from span_plugin.preprocess.file_records import sha256

    path = Path(record["checkpoint"])
    return path.is_file() and sha256(path) == record["checkpoint_sha256"]


RETRACED = ("loss", "mlm_loss", "sbo_loss", "wpb")  # what the run fixes (not train_wall)


def first_difference(record, log):
    """Where fairseq's ``log`` of a re-made run first departs from ``record``'s: every
    logged training figure (losses and words per batch, every --log-interval updates) and
    every held-out loss (each checkpoint's validation), as the record rounds them; None
    when it retraces all."""
    train, valid = masking_ablation.parse_log(log)
    for kind, then_curve, now_curve in (("training", record["train_curve"], train),
                                        ("validation", record.get("valid_curve") or [], valid)):
        now = {x["num_updates"]: x for x in now_curve}
        for then in then_curve:
            got = now.get(then["num_updates"], {})
            for key in (k for k in RETRACED if k in then):
                if got.get(key) != then[key]:
                    return (f"{kind} {key} {got.get(key)} at update {then['num_updates']:g}, "
                            f"the record {then[key]}")
    return None


def remade(name, record, args, work):
    """Condition ``name``'s recorded pre-training, trained again into this work folder
    because its final checkpoint is gone (a machine whose cache was emptied) or changed
    (:func:`intact`). Seeded, on one thread and on the same batches, it must retrace the
    record (:func:`first_difference`: every logged training and validation figure equal at
    the record's 3 decimals), else it stops naming the first that differs. A checkpoint's
    bytes name its folders, so its sha256 cannot match the lost one: the new record
    (appended) lists it, with any the record itself retraced, as ``reproduces``, and the
    lost checkpoints' QA runs and drift stay paired with it (:func:`same_sources`)."""
    from span_plugin.preprocess.file_records import sha256

    out = masking_ablation.run_dir(name, work)
    print(f"re-making {name}: {record['checkpoint']} is gone or not the recorded one ...", flush=True)
    masking_ablation.launch(name, args, work)
    differs = first_difference(record, (out / "train.log").read_text(encoding="utf-8"))
    if differs:
        raise SystemExit(f"{name}: the re-made run in {out} logged {differs} ({args.results}): it "
                         "does not retrace the lost pre-training, so the QA runs of that one "
                         "cannot pair with it")
    masking_ablation.record_interrupted(out)
    last = out / "checkpoints" / "checkpoint_last.pt"
    again = {**record, "checkpoint": str(last), "checkpoint_sha256": sha256(last),
             "reproduces": sorted(same_sources(record)), "remade": time.strftime("%Y-%m-%d %H:%M"),
             "remade_launches": read_results(out / "launches.jsonl")}
    append_result(args.results, again)
    masking_ablation.clean(name, work)
    return again


def lock(work):
    """Hold WORK/lock for this process's life: a second chain on the same folder stops."""
    work.mkdir(parents=True, exist_ok=True)
    f = open(work / "lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        raise SystemExit(f"{work}/lock is held by another chain (pid {f.read().strip() or '?'}): "
                         "one chain at a time") from None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return f


def runs_left(args, made):
    """How many more runs ``--max-runs`` allows after ``made`` (None: no limit)."""
    return None if args.max_runs is None else args.max_runs - made


def qa_threads(args):
    """The fine-tunings' CPU threads, for the recipe processes qa_grid starts."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.qa_threads or args.threads)


def chain(args):
    """Pre-train, export, fine-tune, one condition after another; at most ``args.max_runs``
    new runs (a pre-training, a fine-tuning seed). Returns how many it made."""
    if not (Path(args.model_dir) / "model.pt").is_file():
        raise SystemExit(f"{args.model_dir}/model.pt not found: convert the packaged model first "
                         "(span-convert bert --roberta-only --out ... --hf-dir ..., "
                         "experiments/RESULTS_QA_MINILM.md)")
    qa_threads(args)
    held = lock(Path(args.work_dir).expanduser().resolve())
    work, text_info, fixed = masking_ablation.prepare(args)
    made = 0
    for name in args.conditions:
        left = runs_left(args, made)
        if left == 0:
            break
        record = recorded(name, args, text_info)
        if record is not None and not intact(record):
            record = remade(name, record, condition_args(name, args), work)
            made += 1
            left = None if left is None else left - 1
        if record is None:
            own = condition_args(name, args)
            print(f"pre-training {name} ({own.updates} updates, peak lr {own.lr:g}) ...", flush=True)
            record = masking_ablation.pretrain(name, own, work, text_info, fixed)
            made += 1
            left = None if left is None else left - 1
        provenance = export(record, args, work)
        drift(provenance, args)
        if left != 0:
            made += qa_grid.run(qa_grid.parser().parse_args(
                qa_argv(args, provenance.parent, provenance, left)))
    left = runs_left(args, made)
    if args.none_runs and left != 0:
        made += qa_grid.run(qa_grid.parser().parse_args(none_argv(args, left)))
    held.close()
    return made


def recheck(args):
    """Fine-tune the seeds ``args.recheck`` again into ``args.recheck_results``: from the current
    encoder of each condition of ``args.conditions`` (intact: re-make a lost one with the
    chain first) and, with ``args.none_runs``, from the converted model. Set beside the
    recorded runs of the same seeds, they say how far a re-made encoder, or this machine,
    moves a result. At most ``args.max_runs`` new runs; a relaunch adds only missing ones.
    Returns how many it made."""
    work = Path(args.work_dir).expanduser().resolve()
    qa_threads(args)
    held = lock(work)
    text_info = masking_ablation.prepare_text(work, args, write=False)
    args = argparse.Namespace(**{**vars(args), "qa_seeds": args.recheck})  # (the report keeps --qa-seeds)
    made = 0
    for name in args.conditions:
        left = runs_left(args, made)
        if left == 0:
            break
        record = recorded(name, args, text_info)
        if record is None or not intact(record):
            raise SystemExit(f"{name}: no intact pre-training in {work} to fine-tune again "
                             "(--status says what the chain would do)")
        provenance = export(record, args, work)
        made += qa_grid.run(qa_grid.parser().parse_args(
            qa_argv(args, provenance.parent, provenance, left, args.recheck_results, "qa-recheck")))
    left = runs_left(args, made)
    if args.none_runs and left != 0:
        made += qa_grid.run(qa_grid.parser().parse_args(
            none_argv(args, left, args.recheck_results, "qa-none-recheck")))
    held.close()
    return made


def status(args):
    """Lines saying, per condition of ``args.conditions``, what :func:`chain` would do on
    ``args.work_dir`` now: pre-train (or resume at update N), re-make a lost checkpoint
    (from update 0 or N), or nothing; and the QA seeds recorded and left. Reads only."""
    from span_plugin.runtime.checkpoints import read_updates

    work = Path(args.work_dir).expanduser().resolve()
    text_info = masking_ablation.prepare_text(work, args, write=False)
    pretraining = {c: r for c in CONDITIONS if (r := recorded(c, args, text_info))}
    runs = qa_runs(args, pretraining)
    lines = []
    for name in args.conditions:
        last = masking_ablation.run_dir(name, work) / "checkpoints" / "checkpoint_last.pt"
        at = (read_updates(last)[0] or 0) if last.is_file() else 0
        resumes = f"resumes at update {at}" if at else None
        record = pretraining.get(name)
        if record is None:
            state = f"not pre-trained: pre-training {resumes or 'starts'}"
        elif intact(record):
            state = f"pre-trained ({record['checkpoint']})"
        else:
            state = (f"checkpoint lost ({record['checkpoint']}): the re-make "
                     f"{resumes or 'starts at update 0'} of {record['updates']}")
        done = sorted(runs[name])
        left = [s for s in args.qa_seeds if s not in runs[name]]
        lines.append(f"{name}: {state}; QA seeds done {done or 'none'}, left {left or 'none'}")
    if args.none_runs:
        left = [s for s in args.qa_seeds if s not in runs[NONE]]
        lines.append(f"{NONE}: QA seeds done {sorted(runs[NONE]) or 'none'}, left {left or 'none'}")
    return lines


# ---- 4. the report -----------------------------------------------------------------------


def qa_hparams(args):
    """The hparams of a record qa_argv's runs make (qa_grid's defaults): a "none" record
    must hold exactly these."""
    d = qa_grid.parser().parse_args([])
    return {"lr": d.lr, "batch_size": d.batch_size, "epochs": d.epochs,
            "max_positions": d.max_positions, "doc_stride": d.doc_stride,
            "split_articles": d.split_articles, "answer_boundaries": "word", "extra": args.qa_extra}


def qa_runs(args, pretraining):
    """condition -> {seed: record}: each condition's fine-tunings of the settings of
    :func:`qa_hparams`, of the encoder of its pre-training record (``pretraining``:
    condition -> record; an encoder of an earlier record of the condition is left out)
    and, for "none", the converted model's boundary runs in ``args.baseline_results`` of the
    same settings, model and device."""
    want = qa_hparams(args)
    runs = {c: {} for c in (NONE, *CONDITIONS)}
    cpt = [r for r in read_results(args.qa_results) if r.get("pretraining") and r["hparams"] == want]
    for r in cpt:
        p = r["pretraining"]
        source = pretraining.get(p["objective"])
        if source is not None and p["source_sha256"] in same_sources(source):
            runs[p["objective"]][r["seed"]] = r
    flags = {r.get("model_flags") for r in cpt} or None
    model = Path(args.model_dir).name
    for r in read_results(args.baseline_results):
        if (r["head"] == "boundary" and not r.get("pretraining") and r["hparams"] == want
                and r.get("encoder") == model and r.get("device") == args.qa_device
                and (flags is None or r.get("model_flags") in flags)):
            runs[NONE][r["seed"]] = r
    return runs


def _cell(r):
    return f"{qa_grid.exact_of(r):.2f} / {r['f1']:.2f}" if r else "missing"


def report(args, pretraining, runs, figure=None):
    """The generated part of the report: progress, pre-training, SQuAD per condition and
    seed, paired differences, what the design can say. ``pretraining``: condition ->
    record (missing conditions absent); ``runs``: :func:`qa_runs`."""
    seeds = args.qa_seeds
    order = [c for c in CONDITIONS if c in pretraining]
    lines = ["## Progress (generated)", ""]
    lines.append(f"- Pre-training: {len(order)} of {len(CONDITIONS)} conditions recorded"
                 + (f" ({', '.join(order)})" if order else "")
                 + (f"; missing: {', '.join(c for c in CONDITIONS if c not in pretraining)}"
                    if len(order) < len(CONDITIONS) else "") + ".")
    done = sum(s in runs[c] for c in CONDITIONS for s in seeds)
    lines.append(f"- SQuAD fine-tunings: {done} of {len(CONDITIONS) * len(seeds)} runs; "
                 f"'none' (no continued pre-training, {os.path.relpath(args.baseline_results, ROOT)}): "
                 f"{sum(s in runs[NONE] for s in seeds)} of {len(seeds)} seeds with exactly these "
                 "settings.")

    lines += ["", f"## Continued pre-training ({args.updates} updates of {args.batch} blocks of at most "
              f"{args.tokens} tokens, peak lr {args.lr:g}; "
              + ", ".join(f"{c} {lr:g}" for c, lr in LR_OF.items()) + ")", ""]
    if order:
        recs = [pretraining[c] for c in order]
        table, schemes = masking_report.table(recs)
        lines += [table, "", "Fixed-masking MLM loss of the held-out text at every checkpoint "
                  "(bits per masked token; the same positions for every run):", "",
                  masking_report.curves_table(recs, schemes), ""]
        lines += ["| condition | updates | tokens seen (about) | s/update (fairseq's train_wall) | "
                  "launches | encoder sha256 |", "|---|---|---|---|---|---|"]
        for c in order:
            r = pretraining[c]
            sha = {x["pretraining"]["sha256"][:12] for x in runs[c].values()}
            per = 60 * r["update_wall_min"] / r["updates"] if r.get("update_wall_min") else None
            lines.append(f"| {c} | {r['updates']} | {r.get('tokens_seen') or '-'} | "
                         f"{f'{per:.2f}' if per else '-'} | {len(r.get('launches') or [])} | "
                         f"{', '.join(sorted(sha)) or 'no QA run yet'} |")
        moved = {c: r for r in read_results(args.drift_results) for c in order
                 if r["source_sha256"] in same_sources(pretraining[c])}
        if moved:
            groups = ["embeddings", *sorted((g for g in next(iter(moved.values()))["relative_change"]
                                             if g != "embeddings"), key=lambda g: int(g.split()[1]))]
            lines += ["", "How far each objective moved the encoder from the start model: "
                      "||W - W0|| / ||W0|| of the exported encoder's weights (the token embeddings are "
                      "also the output layer of the masked LM and of the SBO; `--drift`; "
                      f"{os.path.relpath(args.drift_results, ROOT)}):", "",
                      "| condition | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
            lines += [f"| {c} | " + " | ".join(f"{moved[c]['relative_change'][g]:.4f}" for g in groups) + " |"
                      for c in order if c in moved]
            if DRIFT_MATCHED in moved and "span+sbo" in moved:
                ratio = [moved[DRIFT_MATCHED]["relative_change"][g] / moved["span+sbo"]["relative_change"][g]
                         for g in groups if g != "embeddings"]
                lines += ["", f"Drift match: {DRIFT_MATCHED}'s transformer layers moved "
                          f"{min(ratio):.3f}-{max(ratio):.3f} times as far as span+sbo's (mean "
                          f"{sum(ratio) / len(ratio):.3f}; 1 is a perfect match)."]
        if figure:
            masking_report.plot(recs, Path(figure), title="the pre-training objectives")
            lines += ["", f"![pre-training curves]({os.path.relpath(figure, Path(args.report_file).parent)})"]
    else:
        lines.append("No condition recorded yet.")

    lines += ["", "## SQuAD v1.1, 38/10 article split: boundary head, word answers (EM / F1)", "",
              "| condition | " + " | ".join(f"seed {s}" for s in seeds) + " | EM | F1 |",
              "|---|" + "---|" * (len(seeds) + 2)]
    for c in (NONE, *CONDITIONS):
        have = [runs[c][s] for s in seeds if s in runs[c]]
        em = mean_sd([qa_grid.exact_of(r) for r in have]) if have else None
        f1 = mean_sd([r["f1"] for r in have]) if have else None
        spread = (lambda m: f"{m[0]:.2f} +- {m[1]:.2f}") if len(have) > 1 else (lambda m: f"{m[0]:.2f} (one run)")
        lines.append(f"| {c} | " + " | ".join(_cell(runs[c].get(s)) for s in seeds) + " | "
                     + (f"{spread(em)} | {spread(f1)} |" if have else "missing | missing |"))
    lines += ["", "Paired by fine-tuning seed (the same head initialisation and batch order); "
              "mean +- sd of the differences, the seeds won, a 95% t interval and the paired "
              "t-test's p (two-sided):"]
    for x, y in PAIRS:
        common = [s for s in seeds if s in runs[x] and s in runs[y]]
        if not common:
            lines.append(f"\n{x} - {y}: no seed with both runs yet")
            continue
        # the first three seeds (the report's earlier verdict) and, once there are more, all
        for subset in ([common[:3], common] if len(common) > 3 else [common]):
            for key, get in (("EM", qa_grid.exact_of), ("F1", lambda r: r["f1"])):
                diffs = [get(runs[x][s]) - get(runs[y][s]) for s in subset]
                lines.append(paired_line(f"{x} - {y}, {key}, seeds {','.join(map(str, subset))}", diffs))
    lines += [*rechecked(args, runs), "", *can_say(args, pretraining)]
    return "\n".join(lines) + "\n"


def rechecked(args, runs):
    """Report lines: each run of --recheck-results (the grid's settings) beside the
    recorded run of its condition and seed (``runs``: :func:`qa_runs`), with the encoder
    (sha256 of its model.pt), the CPU and the threads of each; none when there is none."""
    want = qa_hparams(args)
    again = [r for r in read_results(args.recheck_results) if r["head"] == "boundary" and r["hparams"] == want]
    if not again:
        return []

    def source(r):
        sha = (r.get("pretraining") or {}).get("sha256")
        return (f"{sha[:12] if sha else 'converted'}, {r.get('cpu') or 'CPU not recorded'}, "
                f"{r.get('threads') or '?'} thread{'' if r.get('threads') == 1 else 's'}")

    def difference(r, old):
        if old is None:
            return "no recorded run"
        same = qa_grid.exact_of(r) == qa_grid.exact_of(old) and r["f1"] == old["f1"]
        return (f"{qa_grid.exact_of(r) - qa_grid.exact_of(old):+.2f} / {r['f1'] - old['f1']:+.2f}"
                + (" (equal to the last digit)" if same else ""))

    lines = ["", "## Fine-tuned again (`--recheck`; "
             f"{os.path.relpath(args.recheck_results, ROOT)})", "",
             "The same seed and settings again, from the condition's current encoder (re-made when "
             "its checkpoint was lost) or, for none, the converted model, beside the recorded run. "
             "EM / F1; encoder sha256, CPU, threads:", "",
             "| condition | seed | recorded | from | again | from | difference |", "|---|---|---|---|---|---|---|"]
    for r in again:
        c = (r.get("pretraining") or {}).get("objective", NONE)
        old = runs.get(c, {}).get(r["seed"])
        lines.append(f"| {c} | {r['seed']} | {_cell(old)} | {source(old) if old else '-'} | {_cell(r)} | "
                     f"{source(r)} | {difference(r, old)} |")
    return lines


def can_say(args, pretraining):
    """What the compute-matched design can and cannot say (figures from the records)."""
    tokens = [r["tokens_seen"] for r in pretraining.values() if r.get("tokens_seen")]
    spanbert = 2_400_000 * 256 * 512  # SpanBERT: 2.4M steps of 256 blocks of 512 tokens
    mean = sum(tokens) / len(tokens) if tokens else None
    seen = (f"about {mean / 1e6:.1f}M tokens (about 1/{spanbert / mean:,.0f} of SpanBERT's "
            f"{spanbert / 1e9:.0f}B)" if tokens else "the same tokens (none recorded yet)")
    return [
        "## What this design can and cannot say", "",
        f"- Can: whether, from the same starting encoder, {args.updates} updates of span masking "
        f"(with or without the SBO) leave an encoder that fine-tunes to better SQuAD EM/F1 "
        f"than the same updates of token masking: same text, blocks, batch order, learning "
        f"rate schedule and seed; only the objective differs. Each run sees {seen}. "
        "'token - none' says what continued pre-training on Wikipedia does to this encoder "
        "at all (it may hurt: all-MiniLM-L6-v2 was tuned for sentence similarity, and its "
        "masked-LM head starts fresh).",
        "- Cannot: SpanBERT's result is for encoders pre-trained from scratch (2.4M steps of "
        "256 blocks of 512 tokens, BERT-base and large) and fine-tuned on the 87k-question "
        "SQuAD training set; here a 6-layer, 384-wide sentence-embedding model is pushed a "
        "little way, and fine-tuned for one epoch on 38 articles of the dev set. A null "
        "or reversed difference here does not contradict SpanBERT (the objective may need "
        "far more updates to shape the encoder, and the heads are still being learned "
        "early on), and a positive one does not reproduce its size.",
        "- One pre-training seed per objective: the paired seeds measure fine-tuning "
        "variance only, not the variance of pre-training itself, so the intervals "
        "understate the uncertainty of an objective's effect. Three seeds give a t "
        "interval with 2 degrees of freedom: wide, and a p-value near 0.05 is weak evidence.",
        "- Same compute means same updates and tokens; span+sbo also trains the SBO head "
        "(a little more arithmetic per update), and the SBO head is dropped before "
        "fine-tuning, as in SpanBERT.",
    ]


def write(args):
    text_info = masking_ablation.prepare_text(Path(args.work_dir).expanduser().resolve(), args, write=False)
    pretraining = {c: r for c in CONDITIONS if (r := recorded(c, args, text_info))}
    text = report(args, pretraining, qa_runs(args, pretraining), figure=args.figure if pretraining else None)
    write_report(args.report_file, text)
    print(text)


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    bad = [c for c in args.conditions if c not in CONDITIONS]
    if bad:
        p.error(f"--conditions {' '.join(bad)}: this experiment compares {', '.join(CONDITIONS)}")
    if args.status:
        print("\n".join(status(args)))
        return 0
    if args.drift:
        work = Path(args.work_dir).expanduser().resolve()
        for c in args.conditions:
            provenance = encoder_folder(work, c, args.updates) / "encoder.json"
            if provenance.is_file():
                drift(provenance, args)
    elif args.recheck:
        recheck(args)
    elif not args.report:
        chain(args)
    write(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
