"""The powered Span Fine-tuning grid (experiments/sf_grid.py, sf_report.py): its plan, the
learning-rate choice on the unreported seed, the paired statistics against scipy, and
a smoke run of the variants that change one setting of SF (no <s>, a dictionary cut)
through the real recipe and report."""

import gzip
import json
import random
import sys

import numpy as np
import pytest

from conftest import DATA, ROOT, run_cli, run_main
from test_task_data import mini_glue

import sf_grid
import sf_report

pytestmark = pytest.mark.research  # experiments/sf_grid.py and sf_report.py (pytest.ini)


def test_plan_is_seed_major_and_never_reports_the_selection_seed():
    cells = sf_grid.reported_cells()
    counts = {}
    for t, v, s in cells:
        counts[(t, v)] = counts.get((t, v), 0) + 1
    assert counts == sf_grid.SEEDS
    seeds = [s for _, _, s in cells]
    assert seeds == sorted(seeds) and sf_grid.LR_SEED not in seeds
    assert sf_grid.reported_cells(["plain", "sf"], max_seed=2) == [
        ("CoLA", "plain", 1), ("CoLA", "sf", 1), ("MRPC", "plain", 1), ("MRPC", "sf", 1),
        ("CoLA", "plain", 2), ("CoLA", "sf", 2), ("MRPC", "plain", 2), ("MRPC", "sf", 2)]


def _rec(variant, lr, value, seed=0, task="CoLA"):
    return {"task": task, "variant": variant, "seed": seed, "hparams": {"lr": lr}, "value": value}


def test_learning_rate_is_chosen_on_seed_zero_only():
    runs = [_rec("sf", 2e-5, 30.0), _rec("sf", 5e-5, 41.0), _rec("sf", 1e-4, 41.0),
            _rec("plain", 2e-5, 35.0), _rec("plain", 5e-5, 20.0),
            _rec("plain", 1e-4, 99.0, seed=1)]  # a reported seed must not count
    lrs = sf_grid.chosen_lrs(runs)
    assert lrs["sf"] == 5e-5  # a tie goes to the smaller rate
    assert lrs["nocat"] == lrs["dict20k"] == lrs["dict400k"] == 5e-5
    assert lrs["plain"] is None  # 1e-4 at seed 0 is missing
    assert sf_grid.chosen_lrs(runs, lrs=(2e-5, 5e-5))["plain"] == 2e-5


def test_paired_interval_and_sign_test_match_scipy():
    from scipy.stats import binomtest, ttest_1samp

    rng = random.Random(3)
    for n in (2, 5, 10):
        d = [rng.gauss(0.5, 2.0) for _ in range(n)]
        got = sf_report.paired(d)
        ci = ttest_1samp(d, 0.0).confidence_interval(0.95)
        assert got["lo"] == pytest.approx(ci.low) and got["hi"] == pytest.approx(ci.high)
        wins = sum(x > 0 for x in d)
        assert got["p_sign"] == pytest.approx(binomtest(wins, n).pvalue)
    assert sf_report.paired([1.0]) is None


def test_detectable_effect_has_the_stated_power():
    """Simulated paired t tests at the reported effect reject 80% of the time; a quarter
    of it is far below that, and the effect shrinks like 1/sqrt(n) for many pairs."""
    from scipy.stats import norm, ttest_1samp

    rng = np.random.default_rng(0)
    for n, sd in ((3, 2.0), (10, 1.5)):
        effect = sf_report.detectable_effect(sd, n)
        d = rng.normal(effect, sd, size=(20000, n))
        rejected = ttest_1samp(d, 0.0, axis=1).pvalue < 0.05
        assert rejected.mean() == pytest.approx(0.80, abs=0.015)
        d = rng.normal(effect / 4, sd, size=(20000, n))
        assert (ttest_1samp(d, 0.0, axis=1).pvalue < 0.05).mean() < 0.3
    # many pairs: the normal approximation (z_0.975 + z_0.8) sd / sqrt(n)
    approx = (norm.ppf(0.975) + norm.ppf(0.8)) * 1.0 / np.sqrt(400)
    assert sf_report.detectable_effect(1.0, 400) == pytest.approx(approx, rel=0.01)
    assert sf_report.detectable_effect(0.0, 5) == 0.0
    got = sf_report.paired([0.5, -1.0, 2.0, 0.0])
    assert got["sd"] == pytest.approx(np.std([0.5, -1.0, 2.0, 0.0], ddof=1))
    assert got["detectable"] == pytest.approx(sf_report.detectable_effect(got["sd"], 4))


def test_controls_table_pairs_sf_with_each_control_by_seed():
    """SF minus random segmentation over the seeds both ran (SF has more seeds than its
    controls); a control without a shared seed, or with one pair, gets no interval; the
    plain-head table keeps its sign (variant - plain)."""
    sf = {s: {"value": v} for s, v in zip(range(1, 11), [30, 31, 29, 33, 30, 28, 27, 31, 30, 29])}
    by = {("CoLA", "plain"): {s: {"value": 29.0} for s in range(1, 11)},
          ("CoLA", "sf"): sf,
          ("CoLA", "random"): {s: {"value": sf[s]["value"] - d}
                               for s, d in zip(range(1, 6), [1.0, 2.0, 0.5, -0.5, 1.5])},
          ("CoLA", "cnn"): {1: {"value": 20.0}},
          ("CoLA", "nocat"): {11: {"value": 20.0}}}
    rows = sf_report.paired_rows(by, ["CoLA"], [("sf", v) for v in sf_report.CONTROLS],
                                 "SF - variant", named=lambda a, b: b)
    assert rows[0].startswith("| task | SF - variant | pairs |")
    random_row, cnn_row = rows[2:]  # nocat shares no seed with SF: no row
    want = sf_report.fmt_paired(sf_report.paired([1.0, 2.0, 0.5, -0.5, 1.5]))
    assert random_row == f"| CoLA | SF, random segmentation | 5 | {want} |"
    assert cnn_row == "| CoLA | CNN, no segmentation | 1 | - | - | - | - | - |"
    plain = sf_report.paired_rows(by, ["CoLA"], [("sf", "plain")], "variant - plain",
                                  named=lambda a, b: a)
    assert plain[2].startswith("| CoLA | SF (cnn-cnn, greedy, 100k) | 10 | +0.80 [")


def test_report_of_the_committed_records_says_their_dictionary_is_not_recorded():
    """The grid's first records name no dictionary (NGRAMS "": the packaged one, whose
    bytes are not recorded) or only the path of a cut; they stay readable."""
    runs = sf_grid.read_results(ROOT / "experiments" / "results" / "sf_minilm.jsonl")
    assert not any("data_record" in r for r in runs)
    text = sf_report.report(runs, ROOT / "experiments" / "results" / "glue_minilm.jsonl")
    lines = [line for line in text.splitlines() if "n-gram dictionary:" in line]
    assert lines[0].startswith("- n-gram dictionary: not recorded (")
    assert "sf" in lines[0] and "dict20k" not in lines[0]
    assert any("wiki.bert.top20000.txt.gz (sha256 not recorded) (3 runs: dict20k)" in x
               for x in lines)


@pytest.mark.slow
def test_smoke_grid_no_cls_and_dictionary_cut(converted_tiny_bert, tmp_path):
    # full counts of a Wikipedia slice stand in for runs/dictionaries/wiki.bert.txt.gz
    dicts = tmp_path / "dicts"
    dicts.mkdir()
    corpus = tmp_path / "wiki.txt"
    with gzip.open(DATA / "wikipedia" / "wiki.AA.txt.gz", "rt", encoding="utf-8") as f:
        corpus.write_text("".join(next(f) for _ in range(4000)), encoding="utf-8")
    run_main("span-preprocess", "ngrams", "--words", "bert", "--text", corpus, "--min-count",
            "3", "--workers", "1", "--out", dicts / "wiki.bert.txt.gz")
    results = tmp_path / "sf.jsonl"
    grid = [ROOT / "experiments" / "sf_grid.py", "--model-dir", converted_tiny_bert,
            "--dictionaries", dicts, "--glue-dir", mini_glue(), "--variants", "sf", "nocat",
            "dict20k", "--lrs", "5e-5", "--max-seed", "1", "--epochs", "1",
            "--batch-size", "64", "--workers", "1", "--device", "cpu", "--results", results,
            "--work-dir", tmp_path / "work", "--max-runs", "4"]
    out = run_cli(sys.executable, *grid).stdout
    assert "learning rates (CoLA dev MCC, seed 0): sf 5e-05, nocat 5e-05, dict20k 5e-05" in out
    runs = [json.loads(line) for line in results.read_text().splitlines()]
    # --max-runs counts the selection run too: MRPC's run is left for a relaunch
    assert [(r["task"], r["variant"], r["seed"]) for r in runs] == [
        ("CoLA", "sf", 0), ("CoLA", "sf", 1), ("CoLA", "nocat", 1), ("CoLA", "dict20k", 1)]
    assert "MRPC sf seed 1" not in out
    by = {r["variant"]: r for r in runs if r["seed"] == 1 and r["task"] == "CoLA"}
    assert by["nocat"]["flags"] == ["--no-span-cls-concat"] and "flags" not in by["sf"]
    cut = by["dict20k"]["settings"]["NGRAMS"]
    assert cut.endswith("wiki.bert.top20000.txt.gz") and by["sf"]["settings"]["NGRAMS"] == ""
    from span_plugin.preprocess.segmentation.ngrams import read_header
    assert read_header(cut)["top_k"] == "20000"
    # the records carry their folders' dictionaries (the cut and the packaged one)
    from span_plugin.preprocess.records.provenance import sha256
    cut_record = by["dict20k"]["data_record"]["encoder"]["ngrams"]
    assert cut_record["path"] == cut and cut_record["sha256"] == sha256(cut)
    assert cut_record["built"]["top_k"] == "20000"
    packaged = by["sf"]["data_record"]["encoder"]["ngrams"]
    assert packaged["packaged"] and packaged["built"]["corpus"].startswith("wiki.")
    assert by["nocat"]["model_settings"]["no_span_cls_concat"] is True
    assert by["sf"]["model_settings"]["span_encoder"] == "cnn-cnn"
    # the no-<s> head is really built without it: its classifier reads the span vector only
    log = (tmp_path / "work" / "runs" / "CoLA-nocat-lr5e-05-s1" / "recipe.log").read_text()
    assert "no_span_cls_concat=True" in log
    assert "bert_pooler=True" in log  # a faithful conversion: BERT's pooler feeds the head
    md = tmp_path / "r.md"
    run_cli(sys.executable, ROOT / "experiments" / "sf_report.py", "--results", results,
            "--out", md, "--plot", tmp_path / "p.png")
    text = md.read_text()
    assert "| CoLA | SF without <s> | 1 |" in text and "lr 5e-05" in text
    assert (f"- n-gram dictionary: {cut} sha256 {cut_record['sha256'][:12]}, counted on "
            f"{cut_record['built']['corpus']} (1 run: dict20k)") in text
    assert f"- n-gram dictionary: {packaged['packaged']} sha256 {packaged['sha256'][:12]}" in text
    assert (tmp_path / "p.png").stat().st_size > 0
