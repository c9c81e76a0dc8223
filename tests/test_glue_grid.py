"""The GLUE grid and its report (experiments/), end to end on real MRPC rows with a
converted BERT of MiniLM's WordPiece (tests/conftest.py's tiny one): runs land in the
results file, a relaunch skips them, and the report's table, plot and McNemar tests come
from the stored dev predictions."""

import json
import re
import sys

import pytest

from conftest import ROOT, run_cli, run_main
from test_task_data import mini_glue

import grid_lib

pytestmark = pytest.mark.research  # experiments/glue_grid.py and glue_report.py (pytest.ini)

NGRAMS = {"path": "/x/ngrams.default.bert.txt.gz", "sha256": "0123456789abcdef" * 4,
          "packaged": "ngrams.default.bert.txt.gz", "top_k": None, "words": "bert",
          "built": {"corpus": "wiki.AA.txt.gz,wiki.AB.txt.gz", "min_count": "11"}}


def test_data_record_is_the_folders_provenance(tmp_path):
    record = {"format": "span_plugin data record 1", "plugin_version": "0.3.0", "task": "MRPC",
              "rows": {"train": 8}, "files": {"input0/train.bin": "ab"},
              "encoder": {"bpe": "wordpiece", "files": {"wordpiece": {"sha256": "cd"}},
                          "ngrams": NGRAMS, "segmentation": "greedy", "seed": 0}}
    (tmp_path / "provenance.json").write_text(json.dumps(record))
    got = grid_lib.data_record(tmp_path)
    assert got["encoder"] == record["encoder"] and got["rows"] == {"train": 8}
    assert got["provenance_sha256"] == grid_lib.hashlib.sha256(
        (tmp_path / "provenance.json").read_bytes()).hexdigest()
    assert grid_lib.dictionary_of({"data_record": got}) == (
        "ngrams.default.bert.txt.gz sha256 0123456789ab, counted on wiki.AA.txt.gz,wiki.AB.txt.gz")
    # recipes/pretrain's binarized folders have no record: their segmentation file
    (tmp_path / "provenance.json").unlink()
    (tmp_path / "segmentation").write_text("none\n")
    got = grid_lib.data_record(tmp_path)
    assert got["provenance_sha256"] is None
    assert grid_lib.dictionary_of({"data_record": got}) == "none (segmentation none)"


def test_old_records_say_not_recorded_and_are_grouped():
    old_sf = {"variant": "sf", "settings": {"NGRAMS": ""}}
    old_cut = {"variant": "dict20k", "settings": {"NGRAMS": "/d/top20000.txt.gz"}}
    new = {"variant": "sf", "data_record": {"encoder": {"ngrams": NGRAMS}}}
    lines = grid_lib.dictionary_lines([old_sf, {"variant": "plain"}, old_cut, new, new],
                                      label=lambda r: r["variant"])
    assert lines == [
        "n-gram dictionary: not recorded (2 runs: plain, sf)",
        "n-gram dictionary: /d/top20000.txt.gz (sha256 not recorded) (1 run: dict20k)",
        "n-gram dictionary: ngrams.default.bert.txt.gz sha256 0123456789ab, counted on "
        "wiki.AA.txt.gz,wiki.AB.txt.gz (2 runs: sf)"]


def test_model_settings_keep_heads_dropouts_and_span_encoder(tmp_path):
    import argparse

    import torch

    model = argparse.Namespace(_name="roberta_span", dropout=0.1, attention_dropout=0.1,
                               head_dropout=0.2, span_encoder="cnn-max", sentence_head="span",
                               no_span_cls_concat=True, encoder_attention_heads=12, lr=[1e-5])
    task = {"_name": "span_qa", "qa_head": "sf", "classification_head_name": "qa_head"}
    torch.save({"cfg": {"model": model, "task": task}, "model": {}}, tmp_path / "c.pt")
    assert grid_lib.model_settings(tmp_path / "c.pt") == {
        "arch": "roberta_span", "attention_dropout": 0.1, "dropout": 0.1, "head_dropout": 0.2,
        "no_span_cls_concat": True, "qa_head": "sf", "sentence_head": "span",
        "span_encoder": "cnn-max"}
    assert grid_lib.trained_on(tmp_path, tmp_path / "gone.pt")["model_settings"] is None


@pytest.mark.slow
def test_grid_appends_skips_and_reports(converted_tiny_bert, tiny_bert_hf, tmp_path):
    results = tmp_path / "grid.jsonl"
    grid = [ROOT / "experiments" / "glue_grid.py", "--model-dir", converted_tiny_bert,
            "--glue-dir", mini_glue(), "--tasks", "MRPC", "--variants", "plain", "sf",
            "--seeds", "1", "--epochs", "1", "--batch-size", "80", "--lr", "5e-5",
            "--workers", "1", "--device", "cpu", "--results", results,
            "--work-dir", tmp_path / "work"]
    out = run_cli(sys.executable, *grid).stdout
    assert "0 of 2 runs already" in out, out
    runs = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["task"], r["variant"], r["seed"]) for r in runs] == [("MRPC", "plain", 1), ("MRPC", "sf", 1)]
    dev_rows = (mini_glue() / "MRPC" / "dev.tsv").read_text().splitlines()[1:]
    for r in runs:
        assert r["hparams"]["updates"] == 2 and r["hparams"]["lr"] == 5e-5
        assert r["gold"] == [row.split("\t")[0] for row in dev_rows]
        assert len(r["predictions"]) == len(dev_rows) and set(r["predictions"]) <= {"0", "1"}
        assert r["metric"] == "f1" and r["value"] == r["dev"]["f1"]
    assert runs[0]["settings"]["HEAD"] == "plain" and runs[1]["settings"]["HEAD"] == "span"
    # Each record carries its data folder's record and the trained model's settings.
    folder = tmp_path / "work" / "data" / "MRPC-greedy"
    provenance = json.loads((folder / "provenance.json").read_text())
    for r in runs:
        assert r["data_record"]["folder"] == str(folder)
        assert r["data_record"]["encoder"] == provenance["encoder"]
        assert r["data_record"]["encoder"]["ngrams"]["built"]["corpus"].startswith("wiki.")
        assert r["model_settings"]["dropout"] == 0.1 and "head_dropout" in r["model_settings"]
    assert runs[0]["model_settings"]["sentence_head"] == "plain"
    assert (runs[1]["model_settings"]["sentence_head"], runs[1]["model_settings"]["span_encoder"]) \
        == ("span", "cnn-cnn")
    # Checkpoints are not kept unless asked; the data folder is shared by both variants.
    assert not list((tmp_path / "work" / "runs").glob("*/checkpoints"))
    assert [p.name for p in (tmp_path / "work" / "data").iterdir()] == ["MRPC-greedy"]

    # A relaunch finds both runs in the file and adds nothing.
    out = run_cli(sys.executable, *grid).stdout
    assert "2 of 2 runs already" in out and len(results.read_text().splitlines()) == 2

    # Run keys do not name the encoder: each record carries the model's fairseq-train
    # flags, and the same grid given another conversion of the same checkpoint (segment A
    # only, no pooler) stops before running, naming the file and line.
    assert {r["model_flags"] for r in runs} == {
        " ".join(run_main("span-convert", "flags", converted_tiny_bert).stdout.split())}
    assert "--bert-token-types --bert-pooler" in runs[0]["model_flags"]
    other = tmp_path / "segment-a"
    run_main("span-convert", "bert", "--hf-dir", tiny_bert_hf, "--out", other, "--roberta-only")
    model_at = grid.index("--model-dir") + 1
    refused = run_cli(sys.executable, *grid[:model_at], other, *grid[model_at + 1:], check=False)
    assert refused.returncode != 0 and f"{results}:1: a run of a model with flags" in refused.stdout
    assert "--bert-token-types" not in refused.stdout.split("--model-dir has")[1]
    assert len(results.read_text().splitlines()) == 2

    md, png = tmp_path / "report.md", tmp_path / "grid.png"
    out = run_cli(sys.executable, ROOT / "experiments" / "glue_report.py", "--results", results,
                  "--out", md, "--plot", png).stdout
    text = md.read_text()
    assert text.splitlines()[0] in out
    ngrams = provenance["encoder"]["ngrams"]
    assert (f"n-gram dictionary: {ngrams['packaged']} sha256 {ngrams['sha256'][:12]}, counted on "
            f"{ngrams['built']['corpus']} (2 runs: plain, sf)") in text
    # The metric recomputed from the stored predictions (scikit-learn) agrees with fairseq's
    # (which logs two decimals).
    worst = re.search(r"agrees with fairseq's logged value within ([0-9.]+) points", text)
    assert worst and float(worst.group(1)) <= 0.01, text
    table = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert f"{runs[0]['value']:.1f} (n=1)" in table["encoder (plain head)"]
    assert f"{runs[1]['value']:.1f} (n=1)" in table["+ SF (cnn-cnn, greedy)"]
    mcnemar = [line for line in text.splitlines() if line.startswith("| MRPC | sf | 1 |")]
    assert len(mcnemar) == 1
    plain_right = [p == g for p, g in zip(runs[0]["predictions"], runs[0]["gold"])]
    sf_right = [p == g for p, g in zip(runs[1]["predictions"], runs[1]["gold"])]
    b = sum(p and not s for p, s in zip(plain_right, sf_right))
    c = sum(s and not p for p, s in zip(plain_right, sf_right))
    assert f"| {b} | {c} |" in mcnemar[0]
    assert f"- MRPC: {json.dumps(runs[0]['hparams'], sort_keys=True)}" in text.splitlines()
    assert png.stat().st_size > 1000

