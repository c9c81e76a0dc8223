"""The plain torch loop of benchmarks/finetune_overhead.py (the same rows and
batches as fairseq-train, a resumable run), and the GLUE recipe's dev result read from
fairseq-train's own log instead of a second pass (fairseq-validate), through kills and
relaunches."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import BIN, ROOT, USER_DIR, run_cli, run_main
from test_recipes import RECIPES, TINY, recipe_env
from test_task_data import ROWS, mini_glue

import finetune_overhead as fo

BENCH = ROOT / "benchmarks" / "finetune_overhead.py"
TINY_SIZES = " ".join(TINY)
SEED = 4


@pytest.fixture(scope="module")
def mrpc_wordpiece(converted_minilm, tmp_path_factory):
    """First rows of real MRPC in all-MiniLM-L6-v2's WordPiece (BERT pair layout), as
    the grid prepares them."""
    out = tmp_path_factory.mktemp("overhead") / "MRPC-greedy"
    run_main("span-preprocess", "glue", "--task", "MRPC", "--glue-dir", mini_glue(),
            "--out", out, "--bpe", "wordpiece", "--wordpiece", converted_minilm,
            "--srcdict", converted_minilm / "dict.txt", "--workers", "1")
    return out


def fairseq_epochs(data, batch_size, epochs):
    """The batches fairseq-train draws from the folder's train split, per epoch, with
    the recipe's settings: [(ids, src_tokens, targets), ...] per epoch."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(data), "--user-dir", str(USER_DIR), "--task", "sentence_prediction",
        "--criterion", "sentence_prediction", "--arch", "roberta", "--num-classes", "2",
        "--init-token", "0", "--max-positions", "512", "--shorten-method", "truncate",
        "--seed", str(SEED), "--batch-size", str(batch_size), "--max-tokens", "4400",
        "--required-batch-size-multiple", "1", "--num-workers", "0", "--cpu", *TINY])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    itr = task.get_batch_iterator(
        task.dataset("train"), max_tokens=4400, max_sentences=batch_size,
        max_positions=512, required_batch_size_multiple=1, seed=SEED, num_workers=0)
    out = []
    for _ in range(epochs):
        out.append([(s["id"].tolist(), s["net_input"]["src_tokens"], s["target"].view(-1))
                    for s in itr.next_epoch_itr(shuffle=True)])
    return out


@pytest.mark.research  # benchmarks/finetune_overhead.py
def test_plain_loop_trains_on_fairseqs_rows_and_batches(mrpc_wordpiece):
    rows, labels, names = fo.read_split(str(mrpc_wordpiece), "train")
    assert len(rows) == ROWS["train"] and sorted(names[:2]) == ["0", "1"]
    batches = fo.make_batches([len(r) for r in rows], SEED, 16)
    for epoch, expected in enumerate(fairseq_epochs(mrpc_wordpiece, 16, 2), start=1):
        ours = fo.epoch_order(batches, SEED, epoch)
        assert [b.tolist() for b in ours] == [ids for ids, _, _ in expected]
        for index, (_, tokens, target) in zip(ours, expected):
            assert torch.equal(fo.collate(rows, index, pad=1), tokens)
            assert torch.equal(torch.from_numpy(labels[index]), target)


def plain_command(data, out, epochs):
    return [sys.executable, BENCH, "plain", "--data", data, "--out", out, "--sizes", TINY_SIZES,
            "--epochs", str(epochs), "--batch-size", "16", "--lr", "1e-3", "--seed", str(SEED)]


def plain(data, out, epochs):
    proc = subprocess.run(plain_command(data, out, epochs), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


@pytest.mark.research  # benchmarks/finetune_overhead.py
def test_plain_loop_evaluates_every_epoch_and_resumes_exactly(mrpc_wordpiece, tmp_path):
    per_epoch = math.ceil(ROWS["train"] / 16)
    straight, log = plain(mrpc_wordpiece, tmp_path / "straight", 3)
    assert straight["updates"] == 3 * per_epoch and log.count("dev f1") == 3
    # Killed once its first checkpoint is written, relaunched: the same run.
    checkpoint = tmp_path / "resumed" / fo.CHECKPOINT
    proc = subprocess.Popen(plain_command(mrpc_wordpiece, tmp_path / "resumed", 3),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not checkpoint.exists():
        assert proc.poll() is None, "the loop ended before its first checkpoint"
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    done = torch.load(checkpoint, weights_only=True)["epoch"]
    assert done < 3  # killed mid-run (an epoch takes seconds; the poll, 50 ms)
    second, log = plain(mrpc_wordpiece, tmp_path / "resumed", 3)
    assert f"after epoch {done} ({done * per_epoch} updates)" in log
    assert log.count("dev f1") == 3 - done
    assert second["updates"] == 3 * per_epoch and second["f1"] == straight["f1"]
    a, b = (torch.load(tmp_path / d / fo.CHECKPOINT, weights_only=True)
            for d in ("straight", "resumed"))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    # The grid's outputs: the best epoch's dev result and one prediction per dev row.
    results = json.loads((tmp_path / "resumed" / "results.json").read_text())
    assert results["dev"]["dev"]["f1"] == second["f1"]
    predictions = (tmp_path / "resumed" / "dev_predictions" / "MRPC.tsv").read_text().splitlines()
    assert predictions[0] == "index\tprediction" and len(predictions) == 1 + ROWS["valid"]
    _, gold, names = fo.read_split(str(mrpc_wordpiece), "valid")
    preds = np.array([names.index(line.split("\t")[1]) for line in predictions[1:]])
    assert fo.f1_accuracy(preds, gold, names.index("1"))[0] == pytest.approx(second["f1"])


# ----------------------------------------------------------------------------------
# The recipe: dev result from train.log, kept across a kill and a relaunch.

EPOCHS = ["--batch-size", "16", "--max-epoch", "4", "--max-update", "40",
          "--total-num-update", "40", "--warmup-updates", "2", "--num-workers", "0"]


def recipe_args(*extra):
    return [RECIPES / "MRPC.sh", "--cpu", *TINY, *EPOCHS, *extra]


def validate(out):
    """fairseq-validate's figures of checkpoint_best.pt, as the recipe computed them."""
    log = run_main("fairseq-validate", out.parent.parent / "data-bin" / "MRPC", "--user-dir",
                   USER_DIR, "--task", "sentence_prediction", "--criterion", "span_classification",
                   "--path", out / "checkpoints" / "checkpoint_best.pt", "--valid-subset", "valid",
                   "--batch-size", "32", "--log-format", "json", "--cpu",
                   "--num-workers", "0").stdout
    sys.path.insert(0, str(RECIPES))
    from write_results import parse

    return parse(log)["valid"]


@pytest.mark.slow
def test_recipe_reads_the_dev_result_from_its_log_through_a_kill_and_a_relaunch(tmp_path):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
               **recipe_env(tmp_path, GLUE_DIR=mini_glue(), TEST_PREDICTIONS=0, WORKERS=1))
    out = tmp_path / "runs" / "MRPC-plain"
    log = out / "train.log"
    # Killed (the whole process group) once its first checkpoint is written.
    proc = subprocess.Popen(["bash", *map(str, recipe_args())], cwd=tmp_path, env=dict(env, HEAD="plain"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 600
    while not (log.exists() and "Saved checkpoint" in log.read_text()):
        assert proc.poll() is None and time.time() < deadline, "the recipe ended before its first save"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = log.read_text()
    assert "done training" not in killed

    # The relaunch resumes from the newest checkpoint and appends to the same log.
    text = run_cli("bash", *recipe_args(), cwd=tmp_path, env=dict(env, HEAD="plain")).stdout
    assert re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ [1-9]\d* updates\)", text)
    full = log.read_text()
    assert full.startswith(killed) and re.findall(r"num_updates (\d+)", full)[-1] == "40"
    results = json.loads((out / "results.json").read_text())
    assert results["validated"].startswith("by fairseq-train after epoch")
    assert not (out / "dev.log").exists()  # no second pass over the dev set
    dev = results["dev"]["dev"]
    # The figures fairseq-validate gives for checkpoint_best.pt, every one of them.
    expected = validate(out)
    assert dev.keys() == expected.keys()
    for k in ("accuracy", "f1", "mcc"):
        assert dev[k] == expected[k], (k, dev, expected)
    assert dev["loss"] == pytest.approx(expected["loss"], abs=0.002)
    predictions = (out / "dev_predictions" / "MRPC.tsv").read_text().splitlines()
    assert len(predictions) == 1 + ROWS["valid"]

    from write_results import best_from_train_log

    # The figure the run tracked is read from the log (best_f1), whatever the recipe says.
    if "best_f1" in full:
        assert best_from_train_log(full, "accuracy") == best_from_train_log(full, "f1")
    # Killed while saving its last best (the new-best line logged, "Saved" not): the
    # file may hold that epoch or the one before, so the log does not tell.
    lines = full.splitlines(keepends=True)
    last = max(i for i, l in enumerate(lines) if re.search(r"Saved checkpoint \S+checkpoint_best", l))
    assert best_from_train_log("".join(lines[:last] + lines[last + 1:]), "f1") is None

    # A log that cannot tell which epoch checkpoint_best.pt holds (its saves cut out):
    # the relaunch validates the checkpoint.
    log.write_text("".join(l for l in full.splitlines(keepends=True) if "Saved checkpoint" not in l))
    run_cli("bash", *recipe_args(), cwd=tmp_path, env=dict(env, HEAD="plain"))
    again = json.loads((out / "results.json").read_text())
    assert "validated" not in again and (out / "dev.log").exists()
    assert again["dev"]["dev"] == expected
