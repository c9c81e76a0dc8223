"""A corpus in shards: ``span-preprocess pretrain`` builds one pre-training folder per text
file (.gz too) with its record, whole or not at all, kept on relaunch; the pre-training
recipe counts one n-gram dictionary over all the files, builds the shards several at a
time, and trains over them in turn (one shard an epoch); the benchmark's small cut runs."""

import gzip
import json
import re
import subprocess
import sys

import pytest

from conftest import GPT2_BPE, ROOT, TINY_ROBERTA, run_cli
from span_pretrain_fixtures import wikitext_lines

ENCODER = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
           GPT2_BPE / "vocab.bpe", "--srcdict", GPT2_BPE / "dict.txt", "--workers", "1"]


def _texts(folder, lines=120):
    folder.mkdir(parents=True, exist_ok=True)
    text = wikitext_lines("wiki.valid.tokens", 3 * lines)
    with gzip.open(folder / "a.txt.gz", "wt", encoding="utf-8") as f:
        f.write("".join(text[:lines]))
    (folder / "b.txt").write_text("".join(text[lines:2 * lines]), encoding="utf-8")
    (folder / "valid.txt").write_text("".join(text[2 * lines:]), encoding="utf-8")
    return folder / "a.txt.gz", folder / "b.txt", folder / "valid.txt"


def test_a_shard_from_gzip_with_its_record_kept_or_refused(tmp_path):
    gz, plain, valid = _texts(tmp_path / "text")
    out = tmp_path / "shard"
    log = run_cli("span-preprocess", "pretrain", "--out", out, "--train", gz, "--valid", valid,
                  "--segmentation", "none", *ENCODER).stdout
    assert "train 120 lines, valid 120 lines" in log, log
    record = json.loads((out / "provenance.json").read_text())
    assert record["task"] == "pretrain" and record["labels"] == {"kind": "none"}
    assert record["rows"] == {"train": 120, "valid": 120}
    assert record["source"]["train"]["path"] == str(gz)  # the .gz itself, by its sha256
    assert {"train.bin", "train.spans.idx", "valid.idx", "dict.txt", "encoder.json",
            "segmentation"} <= set(record["files"])
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # the text went again
    # the same tokens as the text decompressed by hand
    (tmp_path / "a.txt").write_bytes(gzip.decompress(gz.read_bytes()))
    run_cli("span-preprocess", "binarize", tmp_path / "a.txt", tmp_path / "plain" / "a",
            "--segmentation", "none", *ENCODER)
    assert (out / "train.bin").read_bytes() == (tmp_path / "plain" / "a.bin").read_bytes()
    assert "ok" in run_cli("span-preprocess", "check", out).stdout

    # kept when made from the same text and settings; refused, naming why, otherwise
    stamp = (out / "train.bin").stat().st_mtime_ns
    log = run_cli("span-preprocess", "pretrain", "--keep", "--out", out, "--train", gz,
                  "--valid", valid, "--segmentation", "none", *ENCODER).stdout
    assert "kept" in log and (out / "train.bin").stat().st_mtime_ns == stamp
    proc = run_cli("span-preprocess", "pretrain", "--keep", "--out", out, "--train", plain,
                   "--valid", valid, "--segmentation", "none", *ENCODER, check=False)
    assert proc.returncode == 2 and "made from other text or settings: its record's " \
        "source.train is sha256" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_recipe_builds_shards_keeps_finished_ones_and_trains_over_them_in_turn(tmp_path):
    gz, plain, valid = _texts(tmp_path / "corpus", lines=40)
    valid.rename(tmp_path / "valid.txt")  # TRAIN_TEXT is the folder: its files are shards
    env = {"TRAIN_TEXT": str(tmp_path / "corpus"), "VALID_TEXT": str(tmp_path / "valid.txt"),
           "BPE_DIR": str(GPT2_BPE), "FROM_SCRATCH": "1", "WORKERS": "2", "SPAN_MASKING": "ngram",
           "NGRAMS": "count", "TOKENS_PER_SAMPLE": "64", "BATCH_SIZE": "8", "OMP_NUM_THREADS": "1"}
    recipe = ROOT / "recipes" / "pretrain" / "spanbert.sh"
    data = tmp_path / "data-bin" / "pretrain" / "corpus"
    log = run_cli("bash", recipe, "--cpu", cwd=tmp_path, env=dict(env, PREPARE_ONLY="1")).stdout
    assert "preparing 2 shards" in log and "2 at a time (1 processes each)" in log, log
    counted = tmp_path / "data-bin" / "pretrain" / "corpus.ngrams.txt.gz"
    assert counted.is_file()
    for k, rows in ((0, {"train": 40, "valid": 40}), (1, {"train": 40})):
        record = json.loads((data / f"shard-00{k}" / "provenance.json").read_text())
        assert record["rows"] == rows
        assert record["encoder"]["ngrams"]["sha256"] is not None
        assert record["encoder"]["ngrams"]["path"] == str(counted)
        assert record["encoder"]["segmentation"] == "greedy"

    # a relaunch keeps a finished shard and redoes one a killed build left half-written
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    half = data / f"shard-001.partial-{dead.pid}"
    (data / "shard-001").rename(half)
    (half / "provenance.json").unlink()
    stamp = (data / "shard-000" / "train.bin").stat().st_mtime_ns

    out = tmp_path / "run"
    log = run_cli("bash", recipe, "--cpu", "--max-epoch", "2", "--max-update", "1000",
                  *TINY_ROBERTA, "--num-workers", "0", "--log-interval", "1000", cwd=tmp_path,
                  env=dict(env, OUT_DIR=str(out))).stdout
    assert "shard-000: kept" in log and "shard-001: train 40 lines" in log, log
    assert (data / "shard-000" / "train.bin").stat().st_mtime_ns == stamp
    assert not half.exists()
    loaded = re.findall(r"loaded \d+ blocks from: (\S+)", log)
    # (after the last epoch fairseq loads the next one's shard, and stops)
    shards = "data-bin/pretrain/corpus/shard-00"
    assert loaded[:3] == [f"{shards}0/valid", f"{shards}0/train", f"{shards}1/train"], loaded
    assert re.search(r"epoch 002 \|.*num_updates", log), log[-3000:]


@pytest.mark.research  # benchmarks/pretrain_shards.py
@pytest.mark.slow
def test_benchmark_small_cut_resumes(tmp_path):
    from pretrain_shards import main, report

    results = tmp_path / "results.json"
    args = ["--max-lines", "30", "--shards", "4", "--workers", "2", "--work", str(tmp_path / "w"),
            "--results", str(results)]
    assert main(args) == 0
    recorded = json.loads(results.read_text())
    assert set(recorded) == {"cut30:4:2", "words:cut30"}
    r = recorded["cut30:4:2"]
    assert r["shards"] == 4 and r["words"] > 1000 and r["wall_s"] > r["binarize_s"] > 0
    assert r["roles"]["span-preprocess pretrain"]["processes"] >= 4  # one build a shard
    assert r["roles"]["span-preprocess ngrams"]["peak_mb"] > 20
    assert "| first 30 lines a file | 4 |" in report(recorded)
    stamp = results.stat().st_mtime_ns
    assert main(args) == 0  # both recorded: nothing runs again
    assert results.stat().st_mtime_ns == stamp
