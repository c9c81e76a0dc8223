"""The transfer fine-tuning grid and its report (experiments/transfer_grid.py) on real
MRPC and STS-B rows with the converted all-MiniLM-L6-v2."""

import json
import sys

import pytest

from conftest import ROOT, run_cli
from test_task_data import mini_glue


@pytest.mark.slow
def test_transfer_grid_shares_subsets_and_filters_overlap(converted_minilm, tmp_path):
    """The transfer grid on real MRPC/STS-B rows: one 50% subset drawn, recorded and used
    by the runs with and without transfer; the transfer run trained on STS-B pairs only;
    a relaunch adds nothing; the report pairs the two conditions by seed."""
    glue = mini_glue()
    results, subsets = tmp_path / "transfer.jsonl", tmp_path / "subsets.json"
    grid = [ROOT / "experiments" / "transfer_grid.py", "--model-dir", converted_minilm,
            "--glue-dir", glue, "--targets", "MRPC", "--shares", "50", "--seeds", "1",
            "--small-epochs", "1", "--batch-size", "80", "--transfer-epochs", "1",
            "--device", "cpu", "--workers", "1", "--results", results, "--subsets", subsets,
            "--glue-results", tmp_path / "none.jsonl", "--work-dir", tmp_path / "work"]
    out = run_cli(sys.executable, *grid).stdout
    assert "0 of 2 runs already" in out, out
    records = [json.loads(line) for line in results.read_text().splitlines()]
    runs = {r["condition"]: r for r in records if r["kind"] == "finetune"}
    transfer, = [r for r in records if r["kind"] == "transfer"]
    assert set(runs) == {"none", "transfer"}

    # One subset: 80 of the 160 train rows, the same for both conditions.
    picked = json.loads(subsets.read_text())["MRPC 50% seed 1"]
    assert len(picked) == 80 == len(set(picked)) and all(0 <= i < 160 for i in picked)
    train = (glue / "MRPC" / "train.tsv").read_text(encoding="utf-8").splitlines()
    subset = (tmp_path / "work" / "glue" / "MRPC-p50-s1" / "MRPC" / "train.tsv").read_text(
        encoding="utf-8").splitlines()
    assert subset == [train[0]] + [train[1 + i] for i in picked]
    for r in runs.values():
        assert r["hparams"]["updates"] == 1 and r["share"] == 50  # ceil(80 / 80) x 1 epoch
        assert len(r["predictions"]) == len(r["gold"]) == 64

    # Transfer data: the aligner on STS-B train (scores >= 4), none of it from MRPC.
    stsb = (glue / "STS-B" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    positives = sum(float(line.split("\t")[-1]) >= 4 for line in stsb)
    data = transfer["data"]["train"]
    assert transfer["source"] == "STS-B" and data["paraphrase_rows"] + data["excluded_rows"] == positives
    # The transfer run's own last validation (its two objectives) is kept with it.
    assert {"phrasal_accuracy", "sentential_accuracy", "loss"} <= set(transfer["valid"])
    pairs = tmp_path / "work" / "transfer" / "MRPC-transfer-s1" / "pairs" / "train.jsonl"
    mrpc_text = {s for line in train[1:] for s in line.split("\t")[3:5]}
    for line in pairs.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert row["sentence1"] not in mrpc_text and row["sentence2"] not in mrpc_text
    assert (tmp_path / "work" / "transfer" / "MRPC-transfer-s1" / "out" / "transferred" / "model.pt").exists()

    out = run_cli(sys.executable, *grid).stdout
    assert "2 of 2 runs already" in out and len(results.read_text().splitlines()) == 3

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
    glue_grid = [ROOT / "experiments" / "glue_grid.py", "--model-dir", converted_minilm,
                 "--glue-dir", glue, "--tasks", "MRPC", "--variants", "plain", "--seeds", "1",
                 "--results", tmp_path / "none.jsonl", "--work-dir", tmp_path / "grid"]
    assert "1 of 1 runs already" in run_cli(sys.executable, *glue_grid).stdout

    md = tmp_path / "report.md"
    run_cli(sys.executable, ROOT / "experiments" / "transfer_report.py", "--results", results,
            "--out", md, "--plot", tmp_path / "t.png")
    row, = [line for line in md.read_text().splitlines() if line.startswith("| MRPC | 50% |")]
    diff = runs["transfer"]["value"] - runs["none"]["value"]
    assert f"{runs['none']['value']:.1f} (n=1)" in row and f"{diff:+.1f} ({int(diff > 0)} of 1)" in row
