"""experiments/spanbert_qa.py: continued pre-training under an objective,
its export as a span-convert folder, QA fine-tuning of the export, the report. The chain
runs for real on a converted BERT of MiniLM's WordPiece (tests/conftest.py's tiny one), real Wikipedia articles and real SQuAD
questions at a tiny budget: an interrupted pre-training resumes from its
checkpoint_last.pt, the export drops the SBO head and loads in recipes/qa/squad.sh, every
QA record names its encoder by path and sha256; the report shows missing runs as missing."""

import json

import pytest

from conftest import DATA, ROOT

import masking_ablation
import qa_grid
import spanbert_qa

pytestmark = pytest.mark.research  # experiments/spanbert_qa.py (pytest.ini)


def tiny_squad(path):
    """39 real dev articles cut to their first paragraph and first question (3 questions
    for the 39th): qa_grid's 38/rest split of it trains on 38 questions, scores 3."""
    data = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    articles = []
    for i, article in enumerate(data["data"][:39]):
        paragraph = dict(article["paragraphs"][0])
        paragraph["qas"] = paragraph["qas"][:1 if i < 38 else 3]
        articles.append({"title": article["title"], "paragraphs": [paragraph]})
    path.write_text(json.dumps({"version": data["version"], "data": articles}), encoding="utf-8")
    return path


def chain_argv(tmp, model_dir):
    """The driver at a tiny budget: 4 updates of 4 blocks of <= 64 tokens on the first
    article of wiki.AB, held out the first of wiki.AD, a checkpoint every 2 updates; one
    QA seed of 2 updates."""
    return ["--work-dir", str(tmp / "work"), "--model-dir", str(model_dir),
            "--results", str(tmp / "pretrain.jsonl"), "--qa-results", str(tmp / "qa.jsonl"),
            "--baseline-results", str(tmp / "baseline.jsonl"), "--recheck-results", str(tmp / "recheck.jsonl"),
            "--report-file", str(tmp / "report.md"), "--drift-results", str(tmp / "drift.jsonl"), "--figure", str(tmp / "curves.png"),
            "--updates", "4", "--warmup", "1", "--interval", "2", "--log-interval", "1",
            "--batch", "4", "--tokens", "64", "--train-lines", "40", "--valid-lines", "20",
            "--conditions", "span+sbo", "--qa-seeds", "1", "--no-none-runs", "--squad-dev", str(tiny_squad(tmp / "dev.json")),
            "--qa-threads", "2", "--qa-extra", "--max-update", "2"]


@pytest.fixture(scope="module")
def chain(tmp_path_factory, converted_tiny_bert):
    """span+sbo pre-training stopped after 2 of its 4 updates (a launch with fairseq's
    --max-update 2, as a session ending mid-run leaves it), then the driver: resume,
    record, export, fine-tune, report; then the driver again."""
    import torch

    tmp = tmp_path_factory.mktemp("chain")
    argv = chain_argv(tmp, converted_tiny_bert)
    args = spanbert_qa.parser().parse_args(argv)
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:  # the chain sets its thread count for its children
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            mp.setenv(var, "1")
        work, _, _ = masking_ablation.prepare(args)
        masking_ablation.launch("span+sbo", args, work, extra=["--max-update", "2"])
        run = work / "runs" / "span+sbo"
        status = {"cut off": spanbert_qa.status(args)}
        assert spanbert_qa.main(argv) == 0
        status["done"] = spanbert_qa.status(args)
        lines = {f: (tmp / f).read_text().splitlines() for f in ("pretrain.jsonl", "qa.jsonl")}
        export = (work / "encoders" / "span-sbo-u4" / "model.pt").stat().st_mtime_ns
        assert spanbert_qa.main(argv) == 0  # the relaunch: nothing left to do
        again = {f: (tmp / f).read_text().splitlines() for f in ("pretrain.jsonl", "qa.jsonl")}
    torch.set_num_threads(threads)
    return dict(tmp=tmp, work=work, run=run, lines=lines, again=again, export_mtime=export,
                model_dir=converted_tiny_bert, status=status, args=args)


@pytest.mark.slow
def test_a_resumed_pretraining_is_the_uninterrupted_one_bit_for_bit(tmp_path, converted_tiny_bert):
    """What lets a re-made pre-training stand for the lost one: on one thread, stopping
    after update 2 and resuming from checkpoint_last.pt gives the weights of the run that
    never stopped, every tensor equal to the bit (the same masks, dropout and optimizer
    state). Only on the same kind of CPU: each picks its own kernels (records keep ``cpu``)."""
    import torch

    from span_plugin.runtime.checkpoints import load_state

    threads, states = torch.get_num_threads(), []
    for name, stops in (("whole", []), ("resumed", [["--max-update", "2"]])):
        (tmp_path / name).mkdir()
        args = spanbert_qa.parser().parse_args(chain_argv(tmp_path / name, converted_tiny_bert))
        with pytest.MonkeyPatch.context() as mp:
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                mp.setenv(var, "1")
            work, _, _ = masking_ablation.prepare(args)
            for extra in [*stops, []]:
                masking_ablation.launch("span+sbo", args, work, extra=extra)
        run = work / "runs" / "span+sbo"
        assert [x["from_update"] for x in map(json.loads, (run / "launches.jsonl").read_text().splitlines())] \
            == [0, 2][:len(stops) + 1]
        states.append(load_state(run / "checkpoints" / "checkpoint_last.pt"))
    torch.set_num_threads(threads)
    whole, resumed = (s["model"] for s in states)
    assert whole.keys() == resumed.keys() and len(whole) > 50
    assert [k for k in whole if not torch.equal(whole[k], resumed[k])] == []
    adam = [s["last_optimizer_state"]["state"] for s in states]
    assert all(torch.equal(a["exp_avg_sq"], b["exp_avg_sq"]) for a, b in zip(adam[0].values(), adam[1].values()))


@pytest.mark.slow
def test_status_says_what_a_relaunch_does_next(chain):
    """--status, read before a relaunch: a pre-training cut off at update 2 resumes there;
    a finished one with its QA seed is left alone; a recorded checkpoint that is gone is
    re-made (from update 0 when its folder holds no checkpoint)."""
    assert chain["status"]["cut off"] == [
        "span+sbo: not pre-trained: pre-training resumes at update 2; QA seeds done none, left [1]"]
    last = chain["run"] / "checkpoints" / "checkpoint_last.pt"
    assert chain["status"]["done"] == [f"span+sbo: pre-trained ({last}); QA seeds done [1], left none"]
    aside = last.with_name("aside.pt")
    last.rename(aside)
    try:
        assert spanbert_qa.status(chain["args"]) == [
            f"span+sbo: checkpoint lost ({last}): the re-make starts at update 0 of 4; QA seeds done [1], "
            "left none"]
    finally:
        aside.rename(last)
    assert spanbert_qa.status(chain["args"]) == chain["status"]["done"]


@pytest.mark.slow
def test_interrupted_pretraining_resumes_from_checkpoint_last(chain):
    """The second launch loads checkpoint_last.pt at 2 updates (not the pretrained model
    again) and trains updates 3-4; the record counts both launches and evaluates the
    fixed maskings at both checkpoints; the final checkpoint is kept, the others go."""
    run = chain["run"]
    [record] = [json.loads(x) for x in chain["lines"]["pretrain.jsonl"]]
    launches = [json.loads(x) for x in (run / "launches.jsonl").read_text().splitlines()]
    assert [x["from_update"] for x in launches] == [0, 2]
    log = (run / "train.log").read_text()
    assert log.count("loading pretrained model from") == 1, log[-3000:]
    assert "checkpoint_last.pt (epoch 1 @ 2 updates)" in log
    assert [x["num_updates"] for x in record["fixed_curve"]] == [2, 4]
    assert [x["num_updates"] for x in record["train_curve"]] == [1, 2, 3, 4]
    assert record["updates"] == 4 and record["resume"] and len(record["launches"]) == 2
    assert record["condition"] == "span+sbo" and "sbo_loss" in record["valid_curve"][-1]
    assert sorted(p.name for p in (run / "checkpoints").glob("*.pt")) == ["checkpoint_last.pt"]
    assert record["checkpoint"] == str(run / "checkpoints" / "checkpoint_last.pt")
    assert record["model_dir"] == str(chain["model_dir"].resolve())


@pytest.mark.slow
def test_export_drops_the_sbo_head_and_records_its_sha256(chain):
    from fairseq import checkpoint_utils

    from span_plugin.preprocess.file_records import sha256

    folder = chain["work"] / "encoders" / "span-sbo-u4"
    entry = json.loads((folder / "encoder.json").read_text())
    [record] = [json.loads(x) for x in chain["lines"]["pretrain.jsonl"]]
    assert entry["sha256"] == sha256(folder / "model.pt") and entry["path"] == str(folder / "model.pt")
    assert entry["source_sha256"] == record["checkpoint_sha256"] == sha256(record["checkpoint"])
    assert entry["objective"] == "span+sbo" and entry["heads_removed"] == ["span_boundary"]
    assert entry["budget"] == {"updates": 4, "warmup": 1, "lr": 1e-4, "batch": 4, "tokens_per_sample": 64,
                               "break_mode": "complete_doc", "seed": 1, "tokens_seen": record["tokens_seen"],
                               "data": record["data"], "finished": record["finished"],
                               "results": entry["budget"]["results"]}
    trained = checkpoint_utils.load_checkpoint_to_cpu(record["checkpoint"])["model"]
    exported = checkpoint_utils.load_checkpoint_to_cpu(str(folder / "model.pt"))
    assert any(k.startswith("classification_heads.span_boundary.") for k in trained)
    assert set(exported["model"]) == {k for k in trained if not k.startswith("classification_heads.")}
    assert exported["last_optimizer_state"] is None
    for name in ("dict.txt", "vocab.txt"):
        assert (folder / name).read_bytes() == (chain["model_dir"] / name).read_bytes()


@pytest.mark.slow
def test_qa_records_name_the_encoder_and_the_relaunch_adds_nothing(chain):
    """The export fine-tunes through recipes/qa/squad.sh (it loads, with
    --finetune-from-model, and trains); its record carries the encoder's provenance; a
    relaunch neither pre-trains, exports nor fine-tunes again; the report shows the run
    and every missing one as missing."""
    [qa] = [json.loads(x) for x in chain["lines"]["qa.jsonl"]]
    entry = json.loads((chain["work"] / "encoders" / "span-sbo-u4" / "encoder.json").read_text())
    assert qa["pretraining"] == entry and qa["head"] == "boundary" and qa["seed"] == 1
    assert qa["hparams"]["answer_boundaries"] == "word" and qa["questions"] == 3
    assert qa["hparams"]["extra"] == ["--max-update", "2"]
    # --qa-threads: the fine-tuning on 2 threads, the pre-training on --threads' one
    assert qa["threads"] == 2 and json.loads(chain["lines"]["pretrain.jsonl"][-1])["threads"] == 1
    # the CPU each ran on: a seeded run repeats its floats only on the same kind
    launches = [json.loads(x) for x in (chain["run"] / "launches.jsonl").read_text().splitlines()]
    assert qa["cpu"] and {x["cpu"] for x in launches} == {qa["cpu"]}
    log = next((chain["work"] / "qa" / "runs").glob("span-sbo-u4-boundary-*-s1")) / "train.log"
    text = log.read_text()
    assert f"Loaded checkpoint {entry['path']} (epoch 1 @ 0 updates)" in text
    assert "num_updates 2" in text or "num_updates=2" in text
    assert chain["again"] == chain["lines"]
    assert (chain["work"] / "encoders" / "span-sbo-u4" / "model.pt").stat().st_mtime_ns == chain["export_mtime"]
    report = (chain["tmp"] / "report.md").read_text()
    assert f"| span+sbo | {qa['exact_match']:.2f} / {qa['f1']:.2f} |" in report
    assert "| token | missing | missing | missing |" in report
    assert "| none | missing | missing | missing |" in report
    assert "span+sbo - token: no seed with both runs yet" in report
    assert ("- Pre-training: 1 of 4 conditions recorded (span+sbo); missing: token, span, token-dm."
            in report)
    assert entry["sha256"][:12] in report and (chain["tmp"] / "curves.png").exists()


@pytest.mark.slow
def test_recheck_fine_tunes_a_recorded_seed_again_beside_its_record(chain):
    """--recheck 1: seed 1 again from the same encoder on the same machine repeats the
    recorded run to the last digit (fine-tuning is deterministic here), goes to its own
    results file, shows beside the record in the report (whose table keeps the seeds of
    --qa-seeds), and is made once; a condition with no intact pre-training stops with
    what to do."""
    import torch

    tmp, threads = chain["tmp"], torch.get_num_threads()
    # (--qa-extra takes the rest of the line); the report keeps --qa-seeds' columns
    argv = ["--recheck", "1", *chain_argv(tmp, chain["model_dir"])]
    argv[argv.index("--qa-seeds") + 1:argv.index("--qa-seeds") + 2] = ["1", "2"]
    try:
        assert spanbert_qa.main(argv) == 0
        first = (tmp / "recheck.jsonl").read_text()
        assert spanbert_qa.main(argv) == 0  # the relaunch: nothing left to do
        with pytest.raises(SystemExit, match=r"token: no intact pre-training in .* \(--status says"):
            spanbert_qa.main(["token" if x == "span+sbo" else x for x in argv])
    finally:
        torch.set_num_threads(threads)
    [again] = [json.loads(x) for x in first.splitlines()]
    [qa] = [json.loads(x) for x in chain["lines"]["qa.jsonl"]]
    assert (tmp / "recheck.jsonl").read_text() == first
    assert (tmp / "qa.jsonl").read_text().splitlines() == chain["lines"]["qa.jsonl"]
    assert again["pretraining"] == qa["pretraining"] and again["seed"] == 1
    assert (again["exact_match"], again["f1"]) == (qa["exact_match"], qa["f1"])
    assert next((chain["work"] / "qa-recheck" / "runs").glob("span-sbo-u4-boundary-*-s1")).is_dir()
    sha, cpu = qa["pretraining"]["sha256"][:12], qa["cpu"]
    row = (f"| span+sbo | 1 | {qa['exact_match']:.2f} / {qa['f1']:.2f} | {sha}, {cpu}, 2 threads | "
           f"{qa['exact_match']:.2f} / {qa['f1']:.2f} | {sha}, {cpu}, 2 threads | +0.00 / +0.00 "
           "(equal to the last digit) |")
    report = (tmp / "report.md").read_text()
    assert row in report and "| condition | seed 1 | seed 2 | EM | F1 |" in report


# ---- fast: no training --------------------------------------------------------------------


def _args(tmp_path, *extra):
    return spanbert_qa.parser().parse_args([
        "--work-dir", str(tmp_path / "work"), "--results", str(tmp_path / "pretrain.jsonl"),
        "--qa-results", str(tmp_path / "qa.jsonl"), "--baseline-results", str(tmp_path / "base.jsonl"),
        "--recheck-results", str(tmp_path / "recheck.jsonl"),
        "--report-file", str(tmp_path / "report.md"), "--model-dir", str(tmp_path / "all-MiniLM-L6-v2"),
        *extra])


def test_report_pairs_by_seed_and_shows_missing_runs_as_missing(tmp_path):
    """Records of two objectives (token seeds 1-3, span seeds 1-2, span+sbo none) and the
    converted model's runs: only boundary runs of exactly the grid's settings, model and
    device are 'none'; an encoder of an earlier pre-training of a condition is left out."""
    a = _args(tmp_path, "--qa-seeds", "1", "2", "3")
    old = json.loads((ROOT / "experiments" / "results" / "masking_ablation.jsonl").read_text().splitlines()[0])
    pretraining = {c: dict(old, condition=c, checkpoint_sha256=f"ck-{c}", tokens_seen=4_000_000)
                   for c in ("token", "span")}
    want = spanbert_qa.qa_hparams(a)
    flags = "--encoder-layers 6"

    def qa(seed, em, f1, condition=None, source=None, **changes):
        r = {"head": "boundary", "seed": seed, "exact_match": em, "f1": f1, "hparams": dict(want),
             "encoder": "all-MiniLM-L6-v2", "device": "cpu", "minutes": 50.0, "model_flags": flags}
        if condition:
            r["pretraining"] = {"objective": condition, "sha256": f"enc-{condition}" * 4,
                                "source_sha256": source or f"ck-{condition}"}
        r.update(changes)
        return r

    cpt = [qa(1, 41.0, 57.0, "token"), qa(2, 42.0, 58.0, "token"), qa(3, 43.0, 59.0, "token"),
           qa(1, 43.0, 58.5, "span"), qa(2, 42.5, 60.0, "span"),
           qa(3, 99.0, 99.0, "span", source="an earlier pre-training")]
    base = [qa(1, 42.0, 58.0), qa(2, 40.0, 56.0, head="sf"),
            qa(3, 40.0, 56.0, hparams=dict(want, lr=3e-5)), qa(2, 40.0, 56.0, device="cuda")]
    for path, records in ((a.qa_results, cpt), (a.baseline_results, base)):
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    runs = spanbert_qa.qa_runs(a, pretraining)
    assert {c: sorted(v) for c, v in runs.items()} == {"none": [1], "token": [1, 2, 3], "span": [1, 2],
                                                       "span+sbo": [], "token-dm": []}
    text = spanbert_qa.report(a, pretraining, runs)
    assert "| none | 42.00 / 58.00 | missing | missing | 42.00 (one run) | 58.00 (one run) |" in text
    assert "| token | 41.00 / 57.00 | 42.00 / 58.00 | 43.00 / 59.00 | 42.00 +- 1.00 | 58.00 +- 1.00 |" in text
    assert "| span | 43.00 / 58.50 | 42.50 / 60.00 | missing |" in text
    assert "| span+sbo | missing | missing | missing | missing | missing |" in text
    assert "span - token, EM, seeds 1,2: +1.25 +- 1.06 (2 of 2), 95% CI [-8.28, +10.78], paired t p = 0.34" in text
    assert "token - none, F1, seeds 1: -1.00 (0 of 1)" in text
    assert "span+sbo - token: no seed with both runs yet" in text
    assert "span+sbo - token-dm: no seed with both runs yet" in text
    assert ("- Pre-training: 2 of 4 conditions recorded (token, span); missing: span+sbo, token-dm."
            in text)
    assert "- SQuAD fine-tunings: 5 of 12 runs; 'none'" in text and "1 of 3 seeds" in text
    assert "about 4.0M tokens" in text and "99.00" not in text
    # nothing at all yet
    empty = spanbert_qa.report(a, {}, {c: {} for c in ("none", *spanbert_qa.CONDITIONS)})
    assert "No condition recorded yet." in empty and "0 of 12 runs" in empty


def test_pairs_are_reported_at_the_first_three_seeds_and_at_all(tmp_path):
    """Five paired seeds: each difference at seeds 1-3 (the earlier verdict) and at 1-5."""
    a = _args(tmp_path)
    runs = {c: {} for c in ("none", *spanbert_qa.CONDITIONS)}
    for s in range(1, 6):
        for c, em in (("span+sbo", 40.0 + s), ("token-dm", 39.0 + s)):
            runs[c][s] = {"exact_match": em, "f1": em + 15}
    text = spanbert_qa.report(a, {}, runs)
    assert "span+sbo - token-dm, EM, seeds 1,2,3: +1.00 +- 0.00 (3 of 3)" in text
    assert "span+sbo - token-dm, EM, seeds 1,2,3,4,5: +1.00 +- 0.00 (5 of 5)" in text


def test_none_runs_fine_tune_the_converted_model_into_its_own_results(tmp_path):
    """The 'none' condition's missing seeds: the converted model itself, the conditions'
    QA settings, no encoder record, the baseline results file."""
    a = _args(tmp_path)
    q = qa_grid.parser().parse_args(spanbert_qa.none_argv(a, None))
    cond = qa_grid.parser().parse_args(spanbert_qa.qa_argv(a, tmp_path / "enc", tmp_path / "enc.json", None))
    assert q.model_dir == a.model_dir and q.encoder_record is None
    assert q.results == a.baseline_results and q.seeds == [1, 2, 3, 4, 5]
    same = ("heads", "answer_boundaries", "decode", "seeds", "lr", "batch_size", "epochs",
            "max_positions", "doc_stride", "split_articles", "device")
    assert {k: getattr(q, k) for k in same} == {k: getattr(cond, k) for k in same}


def test_recheck_runs_go_to_their_own_file_and_folders(tmp_path):
    """--recheck's fine-tunings: the chain's settings, recorded into --recheck-results, run
    in WORK/qa-recheck and WORK/qa-none-recheck, never where the chain's runs are."""
    a = _args(tmp_path)
    again = qa_grid.parser().parse_args(spanbert_qa.qa_argv(a, tmp_path / "enc", tmp_path / "enc.json", 1,
                                                            a.recheck_results, "qa-recheck"))
    chain = qa_grid.parser().parse_args(spanbert_qa.qa_argv(a, tmp_path / "enc", tmp_path / "enc.json", 1))
    none = qa_grid.parser().parse_args(spanbert_qa.none_argv(a, 1, a.recheck_results, "qa-none-recheck"))
    assert again.results == none.results == a.recheck_results != chain.results
    work = tmp_path / "work"
    assert (again.work_dir, chain.work_dir, none.work_dir) == (
        str(work / "qa-recheck"), str(work / "qa"), str(work / "qa-none-recheck"))
    assert {**vars(again), "results": 0, "work_dir": 0} == {**vars(chain), "results": 0, "work_dir": 0}


def test_the_report_sets_rechecked_runs_beside_their_records(tmp_path):
    """A rechecked seed beside its recorded run: the difference, each run's encoder, CPU
    and threads; a recheck of a seed with no recorded run says so; no recheck, no section."""
    a = _args(tmp_path)
    want = spanbert_qa.qa_hparams(a)
    runs = {c: {} for c in ("none", *spanbert_qa.CONDITIONS)}
    assert spanbert_qa.rechecked(a, runs) == []
    runs["span+sbo"][1] = {"exact_match": 39.74, "f1": 55.0, "pretraining": {"sha256": "a" * 64}}
    runs["none"][1] = {"exact_match": 42.05, "f1": 58.0, "cpu": "AMD EPYC", "threads": 1}
    new = [{"head": "boundary", "seed": 1, "exact_match": 40.0, "f1": 55.5, "hparams": want, "threads": 1,
            "cpu": "Intel Xeon", "pretraining": {"objective": "span+sbo", "sha256": "b" * 64}},
           {"head": "boundary", "seed": 1, "exact_match": 42.05, "f1": 58.0, "hparams": want, "threads": 1,
            "cpu": "Intel Xeon"},
           {"head": "boundary", "seed": 2, "exact_match": 41.0, "f1": 57.0, "hparams": want, "threads": 2,
            "cpu": "Intel Xeon"},
           {"head": "boundary", "seed": 1, "exact_match": 9.0, "f1": 9.0, "hparams": dict(want, lr=1e-5)}]
    with open(a.recheck_results, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in new)
    text = "\n".join(spanbert_qa.rechecked(a, runs))
    assert ("| span+sbo | 1 | 39.74 / 55.00 | aaaaaaaaaaaa, CPU not recorded, ? threads | 40.00 / 55.50 | "
            "bbbbbbbbbbbb, Intel Xeon, 1 thread | +0.26 / +0.50 |") in text
    runs["none"][1]["f1"] = 58.001  # shown as 58.00, but not the same run
    text = "\n".join(spanbert_qa.rechecked(a, runs))
    assert ("| none | 1 | 42.05 / 58.00 | converted, AMD EPYC, 1 thread | 42.05 / 58.00 | "
            "converted, Intel Xeon, 1 thread | +0.00 / -0.00 |") in text
    runs["none"][1]["f1"] = 58.0
    assert ("converted, Intel Xeon, 1 thread | +0.00 / +0.00 (equal to the last digit) |"
            in "\n".join(spanbert_qa.rechecked(a, runs)))
    assert "| none | 2 | missing | - | 41.00 / 57.00 | converted, Intel Xeon, 2 threads | no recorded run |" in text
    assert "9.00" not in text


def test_the_drift_matched_condition_trains_token_masking_at_its_own_rate(tmp_path):
    a = _args(tmp_path)
    own = spanbert_qa.condition_args("token-dm", a)
    assert own.lr == spanbert_qa.DRIFT_MATCHED_LR and a.lr == 1e-4
    assert spanbert_qa.condition_args("token", a).lr == 1e-4
    assert masking_ablation.CONDITIONS["token-dm"] == masking_ablation.CONDITIONS["token"]


def test_the_pretraining_figure_draws_every_condition(tmp_path):
    """Each condition of the chain has its own curve colour (the report's figure once
    stopped at token-dm's first record)."""
    import masking_report

    curve = [{"num_updates": u, "mlm_loss": 7.0} for u in (2, 4)]
    fixed = [{"num_updates": u, "token": 7.0, "span": 8.0} for u in (2, 4)]
    records = [{"condition": c, "train_curve": curve, "valid_curve": curve, "fixed_curve": fixed,
                "updates": 4, "batch": 4, "tokens_per_sample": 64} for c in spanbert_qa.CONDITIONS]
    masking_report.plot(records, tmp_path / "curves.png", title="the pre-training objectives")
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert len({masking_report.COLORS[c] for c in spanbert_qa.CONDITIONS}) == len(spanbert_qa.CONDITIONS)


def test_parse_log_keeps_the_last_entry_of_each_update():
    """A resumed run's log repeats the updates after its last checkpoint: one entry each."""
    line = "2026-01-01 | INFO | train_inner | epoch 001: loss={l}, mlm_loss={l}, wpb=100, num_updates={u}, train_wall=2"
    valid = "2026-01-01 | INFO | valid | epoch 001 | valid on 'valid' subset | loss {l} | mlm_loss {l} | num_updates {u}"
    log = "\n".join([line.format(l=5, u=1), line.format(l=4, u=2), valid.format(l=4.5, u=2),
                     line.format(l=3, u=3), line.format(l=3.5, u=3), line.format(l=2, u=4),
                     valid.format(l=2.5, u=4)])
    train, valid_curve = masking_ablation.parse_log(log)
    assert [(x["num_updates"], x["loss"]) for x in train] == [(1, 5), (2, 4), (3, 3.5), (4, 2)]
    assert [x["num_updates"] for x in valid_curve] == [2, 4] and train[0]["wpb"] == 100


def test_a_folder_of_other_settings_is_not_resumed(tmp_path):
    a = _args(tmp_path, "--updates", "8")
    work = tmp_path / "work"
    run = work / "runs" / "token"
    run.mkdir(parents=True)
    settings = masking_ablation.settings_of("token", a, work)
    (run / "settings.json").write_text(json.dumps(dict(settings, TOTAL_UPDATES="3000")))
    with pytest.raises(SystemExit, match="holds an unfinished run of other settings"):
        masking_ablation.launch("token", a, work)
    (run / "settings.json").unlink()  # a folder of a run without --resume
    with pytest.raises(SystemExit, match="other settings"):
        masking_ablation.launch("token", a, work)


def test_qa_grid_checks_the_encoder_record_against_the_file(tmp_path):
    from span_plugin.preprocess.file_records import sha256

    folder = tmp_path / "enc"
    folder.mkdir()
    (folder / "model.pt").write_bytes(b"weights")
    record = tmp_path / "encoder.json"
    entry = {"path": str(folder / "model.pt"), "sha256": sha256(folder / "model.pt"), "objective": "span"}
    record.write_text(json.dumps(entry))
    assert qa_grid.read_encoder_record(record, folder) == entry
    assert qa_grid.encoder_sha256({"pretraining": entry}) == entry["sha256"]
    assert qa_grid.encoder_sha256({"hparams": {}}) is None
    with pytest.raises(SystemExit, match="not of"):
        qa_grid.read_encoder_record(record, tmp_path)
    record.write_text(json.dumps(dict(entry, sha256="0" * 64)))
    with pytest.raises(SystemExit, match="the encoder changed since it was recorded"):
        qa_grid.read_encoder_record(record, folder)


def test_qa_grid_counts_the_runs_of_a_lost_encoder_its_remake_reproduces():
    """A re-made pre-training's export has other bytes (a new encoder sha256), but the
    runs of the lost encoders its pre-training retraced (``reproduces``: their source
    checkpoints) are its own: the grid goes on at seed 4, not at seed 1 again; a run of
    any other encoder, or of the plain model, does not count."""
    hparams = {"lr": 5e-5, "epochs": 1, "max_positions": 256, "doc_stride": 64, "answer_boundaries": "word"}

    def qa(seed, source=None, sha=None):
        r = {"head": "boundary", "seed": seed, "hparams": hparams}
        if source:
            r["pretraining"] = {"sha256": sha or f"export of {source}", "source_sha256": source}
        return r

    records = [qa(1, "lost"), qa(2, "lost"), qa(3, "lost"), qa(4, "another run"), qa(5)]
    remade = {"sha256": "new export", "source_sha256": "re-made", "reproduces": ["lost"]}
    want = {("boundary", s, 5e-5, 1, 256, 64, "word", "new export") for s in (1, 2, 3, 4, 5)}
    assert sorted(k[1] for k in want - qa_grid.done_keys(records, remade)) == [4, 5]
    assert want - qa_grid.done_keys(records, {**remade, "reproduces": []}) == want
    assert qa_grid.done_keys(records, None) == {qa_grid.run_key(r) for r in records}


def test_one_chain_at_a_time(tmp_path):
    held = spanbert_qa.lock(tmp_path)
    with pytest.raises(SystemExit, match="held by another chain"):
        spanbert_qa.lock(tmp_path)
    held.close()
    spanbert_qa.lock(tmp_path).close()


@pytest.mark.slow
def test_a_launch_killed_from_outside_is_recorded_from_its_log(chain, tmp_path):
    """A launch leaves OPEN_LAUNCH while it runs and removes it when it records its line;
    one killed from outside (no line written) is recorded on the next launch or finish,
    its wall time from the first to the last stamp of the train.log lines it wrote."""
    import datetime

    assert not (chain["run"] / masking_ablation.OPEN_LAUNCH).exists()
    log = (chain["run"] / "train.log").read_text()
    earlier, killed = log[:len(log) // 2], log[len(log) // 2:]
    (tmp_path / "train.log").write_text(earlier + killed)
    (tmp_path / masking_ablation.OPEN_LAUNCH).write_text(json.dumps(
        {"started": "2026-01-01 00:00:00", "from_update": 2, "load_avg_at_start": 1.0,
         "log_offset": len(earlier.encode())}))
    masking_ablation.record_interrupted(tmp_path)
    [entry] = [json.loads(x) for x in (tmp_path / "launches.jsonl").read_text().splitlines()]
    stamps = [datetime.datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
              for line in killed.splitlines() if line[:2] == "20" and line[19:22] == " | "]
    assert entry == {"started": "2026-01-01 00:00:00", "from_update": 2, "load_avg_at_start": 1.0,
                     "wall_s": (stamps[-1] - stamps[0]).total_seconds(), "cpu_s": None,
                     "returncode": None, "interrupted": True}
    assert not (tmp_path / masking_ablation.OPEN_LAUNCH).exists()
    masking_ablation.record_interrupted(tmp_path)  # recorded once
    assert len((tmp_path / "launches.jsonl").read_text().splitlines()) == 1


@pytest.mark.slow
def test_drift_is_recorded_once_per_encoder_and_reported(chain):
    """The chain records how far the export moved from its start model, layer by layer,
    once (the relaunch adds nothing); the figures match a plain computation over the two
    state dicts, and the report prints them."""
    import torch

    from span_plugin.runtime.checkpoints import load_state

    [record] = [json.loads(x) for x in (chain["tmp"] / "drift.jsonl").read_text().splitlines()]
    entry = json.loads((chain["work"] / "encoders" / "span-sbo-u4" / "encoder.json").read_text())
    assert (record["objective"], record["sha256"]) == ("span+sbo", entry["sha256"])
    trained = load_state(entry["path"])["model"]
    start = load_state(entry["start_model"]["path"])["model"]
    for group, value in record["relative_change"].items():
        tag = "embed" if group == "embeddings" else f"layers.{group.split()[1]}."
        keys = [k for k in start if k.startswith("encoder.sentence_encoder.") and tag in k]
        change = torch.cat([(trained[k] - start[k]).flatten() for k in keys]).double().norm()
        scale = torch.cat([start[k].flatten() for k in keys]).double().norm()
        assert value == pytest.approx(float(change / scale), abs=1e-5) and value > 0, group
    layers = {k.split(".")[3] for k in start if k.startswith("encoder.sentence_encoder.layers.")}
    assert sorted(record["relative_change"]) == ["embeddings", *(f"layer {i}" for i in sorted(layers))]
    assert f"| span+sbo | {record['relative_change']['embeddings']:.4f} |" in (chain["tmp"] / "report.md").read_text()


def _fake_relaunch(monkeypatch, losses):
    """masking_ablation.launch replaced by one that writes what a finished launch leaves:
    fairseq's train_inner lines with these losses and a final checkpoint."""
    def launch(name, args, work, extra=()):
        out = masking_ablation.run_dir(name, work)
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
        (out / "checkpoints" / "checkpoint_last.pt").write_bytes(b"weights of the re-made run")
        (out / "checkpoints" / "checkpoint_1_50.pt").write_bytes(b"an interval checkpoint")
        (out / "train.log").write_text("".join(
            f"2026-11-27 16:50:49 | INFO | train_inner | epoch 001:  {u} / 3308 loss={loss}, "
            f"mlm_loss={loss}, num_updates={u}, lr=1e-4\n" for u, loss in losses), encoding="utf-8")

    monkeypatch.setattr(masking_ablation, "launch", launch)


def test_a_lost_pretraining_is_remade_and_keeps_its_qa_runs(tmp_path, monkeypatch):
    """The recorded checkpoint is gone: the run is trained again, must log the record's
    losses, and its new record names the lost checkpoint it reproduces, so the QA runs of
    that one still pair with it."""
    a = _args(tmp_path)
    work = tmp_path / "work"
    record = {"condition": "token", "checkpoint": str(tmp_path / "gone" / "checkpoint_last.pt"),
              "checkpoint_sha256": "lost", "train_curve": [{"num_updates": 50.0, "loss": 9.1},
                                                           {"num_updates": 100.0, "loss": 8.25}]}
    _fake_relaunch(monkeypatch, [(50, 9.1), (100, 8.25)])
    again = spanbert_qa.remade("token", record, a, work)
    run = masking_ablation.run_dir("token", work)
    assert again["reproduces"] == ["lost"] and again["checkpoint"] == str(run / "checkpoints" / "checkpoint_last.pt")
    assert again["checkpoint_sha256"] != "lost"
    assert json.loads((tmp_path / "pretrain.jsonl").read_text().splitlines()[-1]) == again
    assert not (run / "checkpoints" / "checkpoint_1_50.pt").exists()  # cleaned like a first run
    qa = {"head": "boundary", "seed": 1, "exact_match": 40.0, "f1": 55.0,
          "hparams": spanbert_qa.qa_hparams(a), "pretraining": {"objective": "token", "source_sha256": "lost"}}
    (tmp_path / "qa.jsonl").write_text(json.dumps(qa) + "\n")
    assert sorted(spanbert_qa.qa_runs(a, {"token": again})["token"]) == [1]


def test_a_pretraining_remade_twice_keeps_the_qa_runs_of_both_lost_checkpoints(tmp_path, monkeypatch):
    """A cache emptied twice: the second re-make retraces a record that was itself re-made
    (``reproduces`` a single digest, as records written before lists were), and the QA runs
    of the first pre-training and of the first re-make both stay paired with it."""
    a = _args(tmp_path)
    first = {"condition": "token", "checkpoint": str(tmp_path / "gone.pt"), "checkpoint_sha256": "remade once",
             "reproduces": "original", "train_curve": [{"num_updates": 50.0, "loss": 9.1}]}
    _fake_relaunch(monkeypatch, [(50, 9.1)])
    again = spanbert_qa.remade("token", first, a, tmp_path / "work")
    assert again["reproduces"] == ["original", "remade once"]
    qa = [{"head": "boundary", "seed": seed, "exact_match": 40.0, "f1": 55.0, "hparams": spanbert_qa.qa_hparams(a),
           "pretraining": {"objective": "token", "source_sha256": source}}
          for seed, source in ((1, "original"), (4, "remade once"), (5, "another run"))]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in qa))
    assert sorted(spanbert_qa.qa_runs(a, {"token": again})["token"]) == [1, 4]


def test_a_recorded_checkpoint_is_intact_only_with_its_recorded_bytes(tmp_path):
    """A re-make cut off in the record's own folder leaves an unfinished checkpoint at the
    recorded path: that file is not the record's, so the chain re-makes (resumes) it
    instead of exporting it."""
    from span_plugin.preprocess.file_records import sha256

    path = tmp_path / "checkpoint_last.pt"
    record = {"checkpoint": str(path), "checkpoint_sha256": "will be set"}
    assert not spanbert_qa.intact(record)  # gone
    path.write_bytes(b"the recorded weights")
    record["checkpoint_sha256"] = sha256(path)
    assert spanbert_qa.intact(record)
    path.write_bytes(b"an unfinished re-make at update 1,250")
    assert not spanbert_qa.intact(record)


def test_a_remade_pretraining_that_does_not_retrace_the_record_stops(tmp_path, monkeypatch):
    a = _args(tmp_path)
    record = {"condition": "token", "checkpoint": str(tmp_path / "gone.pt"), "checkpoint_sha256": "lost",
              "train_curve": [{"num_updates": 50.0, "loss": 9.1}, {"num_updates": 100.0, "loss": 8.25}]}
    _fake_relaunch(monkeypatch, [(50, 9.1), (100, 8.26)])
    with pytest.raises(SystemExit, match=r"logged training loss 8.26 at update 100, the record 8.25"):
        spanbert_qa.remade("token", record, a, tmp_path / "work")
    assert not (tmp_path / "pretrain.jsonl").exists()


# fairseq's lines of a span + SBO run resumed at update 250: its first launch logged update
# 300 before it was killed, the second logs it again (the last is kept)
SBO_LOG = """\
2026-11-28 05:24:54 | INFO | train_inner | epoch 001:     50 / 3308 loss=26.549, mlm_loss=13.061, sbo_loss=13.489, ppl=8544.98, wps=730.7, ups=0.46, wpb=1581.2, bsz=16, num_updates=50, lr=2.77778e-05, gnorm=24.556, clip=100, train_wall=109, wall=112
2026-11-28 05:32:05 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 20.508 | mlm_loss 10.063 | sbo_loss 10.445 | ppl 1069.85 | wps 2676.1 | wpb 1513.2 | bsz 15.8 | num_updates 250
2026-11-28 05:34:11 | INFO | train_inner | epoch 001:    300 / 3308 loss=20.1, mlm_loss=9.9, sbo_loss=10.2, ppl=1.1e6, wps=700.1, ups=0.4, wpb=1500.5, bsz=16, num_updates=300, lr=9e-05, gnorm=9.1, clip=100, train_wall=125, wall=760
2026-11-28 08:34:11 | INFO | train_inner | epoch 001:    300 / 3308 loss=20.161, mlm_loss=9.902, sbo_loss=10.259, ppl=1.1e6, wps=611.2, ups=0.4, wpb=1500.5, bsz=16, num_updates=300, lr=9e-05, gnorm=9.1, clip=100, train_wall=140, wall=122
"""


def test_a_remake_retraces_every_logged_figure_but_the_clock():
    """first_difference, what a re-made pre-training must retrace: the training losses and
    words per batch and the held-out losses, as the record rounds them; not the time."""
    record = {"train_curve": [
        {"loss": 26.549, "mlm_loss": 13.061, "sbo_loss": 13.489, "num_updates": 50.0, "wpb": 1581.2, "train_wall": 87.0},
        {"loss": 20.161, "mlm_loss": 9.902, "sbo_loss": 10.259, "num_updates": 300.0, "wpb": 1500.5, "train_wall": 120.0}],
        "valid_curve": [{"loss": 20.508, "mlm_loss": 10.063, "sbo_loss": 10.445, "num_updates": 250.0}]}
    assert spanbert_qa.first_difference(record, SBO_LOG) is None
    held_out = {**record, "valid_curve": [{**record["valid_curve"][0], "sbo_loss": 10.446}]}
    assert spanbert_qa.first_difference(held_out, SBO_LOG) == \
        "validation sbo_loss 10.445 at update 250, the record 10.446"
    other_batch = {**record, "train_curve": [record["train_curve"][0], {**record["train_curve"][1], "wpb": 1499.0}]}
    assert spanbert_qa.first_difference(other_batch, SBO_LOG) == \
        "training wpb 1500.5 at update 300, the record 1499.0"
    cut_short = {**record, "valid_curve": [*record["valid_curve"], {"loss": 18.953, "num_updates": 500.0}]}
    assert spanbert_qa.first_difference(cut_short, SBO_LOG) == \
        "validation loss None at update 500, the record 18.953"

