"""Resumable extractive-QA grid: boundary head vs token-level SF (``sf``: the boundary
head over [token; conv within its n-gram span]) and span head on SQuAD v1.1 dev split by
article (first 38 articles to train, last 10 to evaluate: NOT comparable with the
official leaderboard, which trains on the 87k-question train set), and word- vs
token-level answer decoding.

Every (head, seed, answer boundaries) run goes through recipes/qa/squad.sh with one set
of hyperparameters for every head (fixed in advance, not tuned on any reported seed).
The answer boundaries of a cell are those of training (``ANSWER_BOUNDARIES``: the
decoding of validation, so of checkpoint selection, and of results.json); the best
checkpoint is then decoded again at each of ``--decode`` (``span-predict
--answer-boundaries``), so word and token decoding are compared on the same checkpoint.
With one epoch there is one validation, so checkpoint_best.pt does not depend on the
decoding. Each finished run is appended as one JSON line (the official scores of
checkpoint_best.pt on the 10 held-out articles, each decoding's scores and how many of
its answers start or end inside a word, settings, minutes) to the results file
(committed). A relaunch skips what the file holds and resumes an interrupted run from its
checkpoint_last.pt.

With ``--encoder-record FILE`` (the provenance of ``--model-dir``'s model.pt: path,
sha256, ...; experiments/spanbert_qa.py writes one per continued pre-training) every
record keeps it as ``pretraining`` and the encoder's sha256 is part of the run's key, so
one results file holds the runs of several encoders of the same sizes. A record that
lists ``reproduces`` (the checkpoints of lost pre-trainings that the encoder's own
pre-training retraced; experiments/spanbert_qa.py) counts the runs of those encoders as
its own: a relaunch on a re-made encoder goes on with the seeds they lack.

Records made before the word decoding existed hold ``em`` (now ``exact_match``) and no
``answer_boundaries``: they were decoded at token level, and are read as such.

    python experiments/qa_grid.py --model-dir ~/.cache/span_plugin/models/all-MiniLM-L6-v2
    python experiments/qa_grid.py --model-dir ... --heads sf --answer-boundaries word
    python experiments/qa_grid.py --report     # experiments/RESULTS_QA_MINILM.md
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

from grid_lib import (
    DATA, ROOT, cpu_model, dictionary_lines, mean_sd, model_flags, paired_line, read_results,
    resolve_device, run_grid, run_recipe, trained_on, write_report)

HEADS = ("boundary", "sf", "span")
BOUNDARIES = ("word", "token")
LEGACY_BOUNDARIES = "token"  # what records without answer_boundaries were decoded with


def boundaries_of(record):
    """The answer boundaries a record's run trained (and selected its checkpoint) with."""
    return record["hparams"].get("answer_boundaries", LEGACY_BOUNDARIES)


def exact_of(scores):
    """Exact match of a record or scores dict: ``exact_match``, or ``em`` in older ones."""
    return scores["exact_match"] if "exact_match" in scores else scores["em"]


def encoder_sha256(record):
    """The sha256 of the model.pt a record's run started from, when the grid was given
    its provenance (``--encoder-record``: a continued pre-training's encoder); None for
    runs of the plain converted model."""
    return (record.get("pretraining") or {}).get("sha256")


def run_key(r):
    h = r["hparams"]
    return (r["head"], r["seed"], h["lr"], h["epochs"], h["max_positions"], h["doc_stride"],
            boundaries_of(r), encoder_sha256(r))


def done_keys(records, encoder):
    """The run keys (:func:`run_key`) the results ``records`` hold, a run of an encoder
    that ``encoder`` (an --encoder-record) reproduces keyed as one of ``encoder``'s: the
    same pre-training, re-made after its checkpoint was lost and checked to retrace its
    record, whose export has other bytes (its sha256)."""
    sha = encoder_sha256({"pretraining": encoder})
    same = set((encoder or {}).get("reproduces") or [])
    keys = set()
    for r in records:
        key = run_key(r)
        if same and (r.get("pretraining") or {}).get("source_sha256") in same:
            key = (*key[:-1], sha)
        keys.add(key)
    return keys


def read_encoder_record(path, model_dir):
    """The provenance of ``--model-dir``'s encoder (a JSON file: at least ``path`` and
    ``sha256`` of its model.pt, e.g. experiments/spanbert_qa.py's objective and
    pre-training budget), checked against the file: a record of another file, or of a
    model.pt changed since, stops the grid."""
    from span_plugin.preprocess.file_records import sha256

    record = json.loads(Path(path).read_text(encoding="utf-8"))
    model = (Path(model_dir) / "model.pt").resolve()
    if Path(record.get("path", "")).resolve() != model:
        raise SystemExit(f"{path}: the record of {record.get('path')}, not of {model} (--model-dir)")
    if record.get("sha256") != sha256(model):
        raise SystemExit(f"{path}: {model} has sha256 {sha256(model)}, not the recorded "
                         f"{record.get('sha256')}: the encoder changed since it was recorded")
    return record


def inside_words(valid_file, nbest_file):
    """How many predicted answers (the first of each n-best list) start or end inside a
    word of their context, and of how many answers."""
    from span_plugin.formats.squad import read_qa
    from span_plugin.modules.qa_decoding import cuts_word

    context = {ex.id: ex.context for ex in read_qa(valid_file, official=True).examples}
    nbest = json.loads(Path(nbest_file).read_text(encoding="utf-8"))
    answers = [(context[qid], a[0]["start"], a[0]["end"]) for qid, a in nbest.items() if a]
    return sum(any(cuts_word(c, s, e)) for c, s, e in answers), len(answers)


def decode(checkpoint, data_dir, valid_file, out, boundaries):
    """span-predict of ``checkpoint`` on ``valid_file`` at ``boundaries`` into folder
    ``out``; returns its official scores and the word cuts of its answers."""
    out.mkdir(parents=True, exist_ok=True)
    # this environment's command, as the recipes use it, whether or not it is activated
    command = Path(sys.executable).parent / "span-predict"
    with open(out / "predict.log", "w", encoding="utf-8") as log:
        subprocess.run([str(command) if command.exists() else "span-predict", "--checkpoint", str(checkpoint), "--data",
                        str(data_dir), "--input", str(valid_file), "--output",
                        str(out / "predictions.json"), "--nbest", str(out / "nbest.json"),
                        "--results", str(out / "results.json"),
                        "--answer-boundaries", boundaries],
                       check=True, stdout=log, stderr=subprocess.STDOUT)
    return scored(out / "results.json", out / "nbest.json", valid_file)


def scored(results, nbest, valid_file):
    scores = json.loads(Path(results).read_text(encoding="utf-8"))
    cut, answers = inside_words(valid_file, nbest)
    return {"exact_match": scores["exact_match"], "f1": scores["f1"],
            "inside_word": cut, "answers": answers}


def split_files(args):
    """``(train, valid)``: the SQuAD dev file split by article into the work folder, once
    (the same bytes as the recipe's own split)."""
    from span_plugin.formats.squad import split_squad_articles

    folder = Path(args.work_dir).resolve() / "data" / f"squad-dev-split{args.split_articles}"
    train, valid = folder / "train.json", folder / "valid.json"
    if not valid.exists():
        folder.mkdir(parents=True, exist_ok=True)
        split_squad_articles(args.squad_dev, args.split_articles, train, valid)
    return train, valid


def run_one(args, head, seed, boundaries, device):
    work = Path(args.work_dir).resolve()
    model = os.path.basename(os.path.normpath(args.model_dir))
    train_file, valid_file = split_files(args)
    # (runs from before word decoding were token-decoded and had no boundaries in the name)
    out_dir = work / "runs" / (f"{model}-{head}-lr{args.lr:g}-e{args.epochs}-p{args.max_positions}"
                               f"{'' if boundaries == LEGACY_BOUNDARIES else '-' + boundaries}"
                               f"-s{seed}")
    data_dir = work / "data" / f"{model}-{args.max_positions}-{args.doc_stride}"
    env = dict(MODEL_DIR=Path(args.model_dir).resolve(), HEAD=head, SEED=seed,
               TRAIN_FILE=train_file, VALID_FILE=valid_file, MAX_POSITIONS=args.max_positions, DOC_STRIDE=args.doc_stride, LR=f"{args.lr:g}",
               BATCH_SIZE=args.batch_size, EPOCHS=args.epochs, OUT_DIR=out_dir, DATA_DIR=data_dir,
               ANSWER_BOUNDARIES=boundaries)
    extra = ["--log-interval", "50", "--num-workers", "0", *args.extra]
    if device == "cpu":
        extra.append("--cpu")
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    minutes = run_recipe("recipes/qa/squad.sh", env, extra, out_dir, f"{head} seed {seed}")
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the recipe's whole process tree
    cpu_minutes = round((cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / 60, 1)
    scores = json.loads((out_dir / "results.json").read_text())
    decoded = {boundaries: scored(out_dir / "results.json", out_dir / "nbest.json", valid_file)}
    for other in args.decode:
        if other not in decoded:
            decoded[other] = decode(out_dir / "checkpoints" / "checkpoint_best.pt", data_dir,
                                    valid_file, out_dir / f"decoded-{other}", other)
    record = {"head": head, "seed": seed, "exact_match": scores["exact_match"],
              "f1": scores["f1"], "questions": scores["total"], "decoded": decoded,
              "hparams": {"lr": args.lr, "batch_size": args.batch_size, "epochs": args.epochs,
                          "max_positions": args.max_positions, "doc_stride": args.doc_stride,
                          "split_articles": args.split_articles, "answer_boundaries": boundaries,
                          "extra": args.extra},
              "encoder": model, "device": device, "minutes": minutes,
              "cpu_minutes": cpu_minutes, "threads": recipe_threads(), "cpu": cpu_model(),
              **({"pretraining": args.encoder} if args.encoder else {}),
              **trained_on(data_dir, out_dir / "checkpoints" / "checkpoint_best.pt")}
    if not args.keep_checkpoints:
        shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    return record


def recipe_threads():
    """The CPU threads the recipe's fairseq-train runs with (OMP_NUM_THREADS, which its
    torch reads); None where unset (torch's default, a thread a core)."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() else None


def report(records):
    """The markdown tables: per head and training decoding, mean +- sd of EM/F1; each head
    minus boundary, paired by seed; word minus token decoding of the same checkpoints."""
    lines = ["| head | answers | seeds | EM | F1 | minutes per run |", "|---|---|---|---|---|---|"]
    for boundaries in BOUNDARIES:
        for head in HEADS:
            rows = [r for r in records if r["head"] == head and boundaries_of(r) == boundaries]
            if not rows:
                continue
            em, em_sd = mean_sd([exact_of(r) for r in rows])
            f1, f1_sd = mean_sd([r["f1"] for r in rows])
            minutes, _ = mean_sd([r["minutes"] for r in rows])
            seeds = ", ".join(str(r["seed"]) for r in rows)
            lines.append(f"| {head} | {boundaries} | {seeds} | {em:.2f} +- {em_sd:.2f} | "
                         f"{f1:.2f} +- {f1_sd:.2f} | {minutes:.0f} |")
    for boundaries in BOUNDARIES:
        by = {(r["head"], r["seed"]): r for r in records if boundaries_of(r) == boundaries}
        for head in HEADS[1:]:
            seeds = sorted({s for h, s in by if h == head}
                           & {s for h, s in by if h == "boundary"})
            for key, get in (("EM", exact_of), ("F1", lambda r: r["f1"])) if seeds else ():
                diffs = [get(by[head, s]) - get(by["boundary", s]) for s in seeds]
                lines.append(paired_line(f"{head} - boundary, {key}, {boundaries} answers, "
                                         f"paired by seed", diffs))
    both = [r for r in records if set(BOUNDARIES) <= set(r.get("decoded") or {})]
    if both:
        lines.append("\nWord minus token decoding of the same checkpoint_best.pt (paired by "
                     "run); answers inside a word: the share of predicted answers that start "
                     "or end inside a word of the context.\n")
        lines.append("| head | runs | word EM | token EM | word F1 | token F1 | inside a word, "
                     "word | inside a word, token |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for head in HEADS:
            rows = [r for r in both if r["head"] == head]
            if not rows:
                continue
            cell = {}
            for b in BOUNDARIES:
                d = [r["decoded"][b] for r in rows]
                cell[b] = (mean_sd([x["exact_match"] for x in d])[0],
                           mean_sd([x["f1"] for x in d])[0],
                           100 * sum(x["inside_word"] for x in d) / sum(x["answers"] for x in d))
            w, t = cell["word"], cell["token"]
            lines.append(f"| {head} | {len(rows)} | {w[0]:.2f} | {t[0]:.2f} | {w[1]:.2f} | "
                         f"{t[1]:.2f} | {w[2]:.2f}% | {t[2]:.2f}% |")
        for head in HEADS:
            rows = [r for r in both if r["head"] == head]
            for key in ("exact_match", "f1") if rows else ():
                diffs = [r["decoded"]["word"][key] - r["decoded"]["token"][key] for r in rows]
                lines.append(paired_line(f"{head}: word - token, {key}", diffs))
    lines += ["", *(f"- {line}" for line in dictionary_lines(records, label=lambda r: r["head"]))]
    return "\n".join(lines) + "\n"


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", help="span-convert output folder (WordPiece encoder)")
    p.add_argument("--encoder-record", help="JSON file: the provenance of --model-dir's model.pt "
                   "(path, sha256, ...), kept in every record as 'pretraining'; its sha256 is "
                   "part of each run's key")
    p.add_argument("--squad-dev",
                   default=str(DATA / "squad" / "dev-v1.1.json"))
    p.add_argument("--split-articles", type=int, default=38)
    p.add_argument("--heads", nargs="+", default=list(HEADS), choices=HEADS)
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--answer-boundaries", nargs="+", default=["word"], choices=BOUNDARIES,
                   help="the cells' training decoding (validation, checkpoint selection)")
    p.add_argument("--decode", nargs="+", default=list(BOUNDARIES), choices=BOUNDARIES,
                   help="decodings every run's checkpoint_best.pt is scored with")
    p.add_argument("--results", default=str(ROOT / "experiments" / "results" / "qa_minilm.jsonl"))
    p.add_argument("--work-dir", default=str(ROOT / "runs" / "qa_grid"))
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-positions", type=int, default=256)
    p.add_argument("--doc-stride", type=int, default=64)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--max-runs", type=int, help="stop after this many new runs")
    p.add_argument("--keep-checkpoints", action="store_true")
    p.add_argument("--report", action="store_true", help="only write the report")
    p.add_argument("--report-file", default=str(ROOT / "experiments" / "RESULTS_QA_MINILM.md"))
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="arguments for fairseq-train, last (smoke runs: --max-update 2 ...)")
    return p


def run(args):
    """Every cell of the options ``args`` not yet in ``args.results`` (at most ``args.max_runs``);
    returns how many runs it made."""
    args.encoder = read_encoder_record(args.encoder_record, args.model_dir) if args.encoder_record else None
    device = resolve_device(args.device)
    sha = encoder_sha256({"pretraining": args.encoder})
    # seed-major: every head of a seed finishes before the next seed starts
    cells = {(h, s, args.lr, args.epochs, args.max_positions, args.doc_stride, b, sha): (h, s, b)
             for s in args.seeds for b in args.answer_boundaries for h in args.heads}
    return run_grid(cells, done_keys(read_results(args.results), args.encoder),
                    lambda c: run_one(args, *c, device), args.results, args.max_runs,
                    name=lambda c: f"{c[0]} seed {c[1]} ({c[2]} answers)",
                    show=lambda r: f"EM {exact_of(r):.2f}, F1 {r['f1']:.2f}",
                    flags=model_flags(args.model_dir))


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if not args.report:
        if not args.model_dir:
            p.error("--model-dir is required to run (the converted all-MiniLM-L6-v2)")
        run(args)
    records = read_results(args.results)
    if records:
        write_report(args.report_file,
                     "## Table (generated by experiments/qa_grid.py --report)\n\n" + report(records))
        print(report(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
