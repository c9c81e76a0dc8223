"""The transfer fine-tuning grid and its report (experiments/transfer_grid.py) on real
MRPC and STS-B rows with a converted BERT of MiniLM's WordPiece (tests/conftest.py's tiny
one): subsets, overlap filter, the
compute-matched control, aligner versions kept apart."""

import json
import random
import shutil
import sys

import pytest

from conftest import ROOT, run_cli
from test_task_data import mini_glue

import grid_lib

pytestmark = pytest.mark.research  # experiments/transfer_grid.py and transfer_report.py (pytest.ini)


def test_reports_p_is_scipys_paired_t_test():
    """The p the transfer and NER reports print beside a paired difference."""
    from scipy.stats import ttest_rel

    rng = random.Random(5)
    for n in (2, 3, 6):
        a = [rng.gauss(80, 2) for _ in range(n)]
        b = [x - rng.gauss(1, 1) for x in a]
        diffs = [x - y for x, y in zip(a, b)]
        assert grid_lib.paired_p(diffs) == pytest.approx(ttest_rel(a, b).pvalue)
        cell = grid_lib.paired_cell_p(diffs, 1)
        assert cell.endswith(f" of {n}; p={ttest_rel(a, b).pvalue:.2g})")
    # no test on one pair, nor on differences without spread
    assert grid_lib.paired_p([1.5]) is None and grid_lib.paired_p([0.5, 0.5]) is None
    assert grid_lib.paired_cell_p([1.5], 1) == "+1.5 (1 of 1)"


@pytest.mark.slow
def test_transfer_grid_shares_subsets_and_filters_overlap(converted_tiny_bert, tmp_path):
    """The transfer grid on real MRPC/STS-B rows: one 50% subset drawn, recorded and used
    by the runs with and without transfer and the compute-matched one (as many extra
    updates as the transfer run made); the transfer run trained on STS-B pairs only;
    records carry the aligner version; a relaunch adds nothing; the report pairs the
    conditions by seed and keeps aligner versions apart."""
    glue = mini_glue()
    results, subsets = tmp_path / "transfer.jsonl", tmp_path / "subsets.json"
    grid = [ROOT / "experiments" / "transfer_grid.py", "--model-dir", converted_tiny_bert,
            "--glue-dir", glue, "--targets", "MRPC", "--shares", "50", "--seeds", "1",
            "--small-epochs", "1", "--batch-size", "80", "--transfer-epochs", "1",
            "--transfer-batch-size", "80", "--conditions", "none", "transfer", "matched",
            "--device", "cpu", "--workers", "1", "--results", results, "--subsets", subsets,
            "--glue-results", tmp_path / "none.jsonl", "--work-dir", tmp_path / "work"]
    out = run_cli(sys.executable, *grid).stdout
    assert "0 of 3 runs already" in out, out
    records = [json.loads(line) for line in results.read_text().splitlines()]
    runs = {r["condition"]: r for r in records if r["kind"] == "finetune"}
    transfer, = [r for r in records if r["kind"] == "transfer"]
    assert set(runs) == {"none", "transfer", "matched"}
    assert transfer["aligner"] == runs["transfer"]["aligner"] == runs["matched"]["aligner"] == 2
    assert "aligner" not in runs["none"]
    # Both kinds of record carry their data folder's record and the model's settings.
    for r in records:
        assert r["data_record"]["encoder"]["bpe"] == "wordpiece", r["data_record"]
        assert r["model_settings"]["dropout"] >= 0 and "arch" in r["model_settings"]
    assert transfer["data_record"]["folder"].endswith("MRPC-transfer-s1-a2/data")

    # One subset: 80 of the 160 train rows, the same for both conditions.
    picked = json.loads(subsets.read_text())["MRPC 50% seed 1"]
    assert len(picked) == 80 == len(set(picked)) and all(0 <= i < 160 for i in picked)
    train = (glue / "MRPC" / "train.tsv").read_text(encoding="utf-8").splitlines()
    subset = (tmp_path / "work" / "glue" / "MRPC-p50-s1" / "MRPC" / "train.tsv").read_text(
        encoding="utf-8").splitlines()
    assert subset == [train[0]] + [train[1 + i] for i in picked]
    for r in runs.values():
        assert r["share"] == 50 and len(r["predictions"]) == len(r["gold"]) == 64
    for c in ("none", "transfer"):
        assert runs[c]["hparams"]["updates"] == 1  # ceil(80 / 80) x 1 epoch
    # matched: the transfer run's updates (its train rows in batches of 80, 1 epoch) on top.
    rows = transfer["data"]["train"]["paraphrase_rows"] + transfer["data"]["train"]["random_rows"]
    extra = -(-rows // 80)
    assert transfer["hparams"]["updates"] == runs["matched"]["hparams"]["extra_updates"] == extra
    assert runs["matched"]["hparams"]["updates"] == 1 + extra
    assert runs["matched"]["hparams"]["max_epoch"] == 1 + extra  # 1 update an epoch
    log = (tmp_path / "work" / "runs" / "MRPC-p50-matched-s1-a2" / "recipe.log").read_text()
    assert f"'max_update': {1 + extra}" in log and "num_updates" in log

    # Transfer data: the aligner on STS-B train (scores >= 4), none of it from MRPC.
    stsb = (glue / "STS-B" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    positives = sum(float(line.split("\t")[-1]) >= 4 for line in stsb)
    data = transfer["data"]["train"]
    assert transfer["source"] == "STS-B" and data["paraphrase_rows"] + data["excluded_rows"] == positives
    # The transfer run's own last validation (its two objectives) is kept with it.
    assert {"phrasal_accuracy", "sentential_accuracy", "loss"} <= set(transfer["valid"])
    # The identity rule on the transfer pairs: it only gets the negatives.
    rule = transfer["data"]["dev"]["identity_rule"]
    assert rule["correct"].get("paraphrase", 0) == 0 and rule["identical"] == 0
    pairs = tmp_path / "work" / "transfer" / "pairs" / "MRPC-s1-a2" / "train.jsonl"
    mrpc_text = {s for line in train[1:] for s in line.split("\t")[3:5]}
    for line in pairs.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert row["sentence1"] not in mrpc_text and row["sentence2"] not in mrpc_text
    assert (tmp_path / "work" / "transfer" / "MRPC-transfer-s1-a2" / "out" / "transferred" / "model.pt").exists()

    out = run_cli(sys.executable, *grid).stdout
    assert "3 of 3 runs already" in out and len(results.read_text().splitlines()) == 4

    # A 100% run without transfer is a plain run of the GLUE grid: run once, recorded in
    # the GLUE grid's results too (which then skips it), and found there on a relaunch.
    full = grid + ["--shares", "100", "--conditions", "none", "--epochs", "1"]
    run_cli(sys.executable, *full)
    plain, = [json.loads(line) for line in (tmp_path / "none.jsonl").read_text().splitlines()]
    assert (plain["task"], plain["variant"], plain["seed"]) == ("MRPC", "plain", 1)
    assert plain["hparams"]["updates"] == 2  # ceil(160 / 80) x 1 epoch
    last = json.loads(results.read_text().splitlines()[-1])
    assert last["reused_from"] == "none.jsonl" and last["value"] == plain["value"]
    assert "1 of 1 runs already" in run_cli(sys.executable, *full).stdout
    glue_grid = [ROOT / "experiments" / "glue_grid.py", "--model-dir", converted_tiny_bert,
                 "--glue-dir", glue, "--tasks", "MRPC", "--variants", "plain", "--seeds", "1",
                 "--results", tmp_path / "none.jsonl", "--work-dir", tmp_path / "grid"]
    assert "1 of 1 runs already" in run_cli(sys.executable, *glue_grid).stdout

    # A transferred model recorded by an earlier session but absent here (a fresh machine)
    # is rebuilt by the next run that needs it, and not recorded a second time.
    shutil.rmtree(tmp_path / "work" / "transfer" / "MRPC-transfer-s1-a2" / "out" / "transferred")
    out = run_cli(sys.executable, *grid, "--shares", "100", "--conditions", "transfer",
                  "--epochs", "1").stdout
    assert "rebuilt the transferred model (already recorded)" in out, out
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert len([r for r in records if r["kind"] == "transfer"]) == 1
    assert (records[-1]["share"], records[-1]["condition"]) == (100, "transfer")

    md = tmp_path / "report.md"
    run_cli(sys.executable, ROOT / "experiments" / "transfer_report.py", "--results", results,
            "--out", md, "--plot", tmp_path / "t.png")
    text = md.read_text()
    assert any(line.startswith("- n-gram dictionary: ") and "transfer transfer" in line
               for line in text.splitlines()), text
    row, = [line for line in text.splitlines() if line.startswith("| MRPC | 50% | f1 |")]
    diff = runs["transfer"]["value"] - runs["none"]["value"]
    assert f"{runs['none']['value']:.1f} (n=1)" in row and f"{diff:+.1f} ({int(diff > 0)} of 1)" in row
    # transfer against the compute-matched control too, last column
    header, = [line for line in text.splitlines() if line.startswith("| target | train rows |")]
    assert header.split(" | ")[-1] == "transfer - matched (wins; p) |"
    vs = runs["transfer"]["value"] - runs["matched"]["value"]
    assert row.split(" | ")[-1] == f"{vs:+.1f} ({int(vs > 0)} of 1) |"
    mcc, = [line for line in text.splitlines() if line.startswith("| MRPC | 50% | mcc |")]
    assert f"{runs['none']['dev']['mcc']:.1f}" in mcc
    assert [line for line in text.splitlines() if line.startswith("| MRPC | 50% | accuracy |")]
    assert f"| {transfer['data']['dev']['identity_rule']['accuracy']:.1f} (" in text

    # An older record (no aligner field: version 1) goes to its own table; a collapsed
    # run (MCC <= 5) is flagged.
    old = dict(runs["transfer"], value=50.0, dev=dict(runs["transfer"]["dev"], f1=50.0))
    del old["aligner"]
    collapsed = dict(runs["none"], seed=2, dev=dict(runs["none"]["dev"], mcc=0.0))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(results.read_text() + json.dumps(old) + "\n" + json.dumps(collapsed) + "\n")
    run_cli(sys.executable, ROOT / "experiments" / "transfer_report.py", "--results", mixed,
            "--out", md)
    text = md.read_text()
    assert "### Aligner version 1" in text and "### Aligner version 2" in text
    v1 = text[text.index("### Aligner version 1"):text.index("### Aligner version 2")]
    f1, = [line for line in v1.splitlines() if line.startswith("| MRPC | 50% | f1 |")]
    assert "| 50.0 (n=1)" in f1 and "matched" not in v1
    down = sum(r["dev"]["mcc"] <= 5 for r in (runs["none"], collapsed))  # the tiny run may be too
    assert f"(n=2) **{down} collapsed**" in f1

    # A single objective against the compute-matched control too (its transfer run made as
    # many updates); a transfer run with another number of updates is called out.
    phrasal = dict(runs["transfer"], condition="phrasal",
                   dev=dict(runs["transfer"]["dev"], f1=runs["matched"]["dev"]["f1"] + 2.5))
    short = dict(transfer, condition="phrasal",
                 hparams=dict(transfer["hparams"], updates=transfer["hparams"]["updates"] + 1))
    single = tmp_path / "single.jsonl"
    single.write_text(results.read_text() + json.dumps(phrasal) + "\n" + json.dumps(short) + "\n")
    run_cli(sys.executable, ROOT / "experiments" / "transfer_report.py", "--results", single,
            "--out", md)
    text = md.read_text()
    header, = [line for line in text.splitlines() if line.startswith("| target | train rows |")]
    assert header.split(" | ")[-2:] == ["transfer - matched (wins; p)", "phrasal - matched (wins; p) |"]
    f1, = [line for line in text.splitlines() if line.startswith("| MRPC | 50% | f1 |")]
    assert f1.split(" | ")[-1] == "+2.5 (1 of 1) |"
    assert "**Not compute-matched**" in text and f"MRPC phrasal seed 1: {extra + 1} transfer" in text
