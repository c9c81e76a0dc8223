"""Crash-safe training: tiny CPU runs killed with SIGKILL at many moments, also in the
middle of checkpoint writes, and relaunched as the recipes relaunch them
(``span_plugin.runtime.checkpoints.prepare_resume``, then fairseq-train): every relaunch
resumes, and the run ends with exactly the parameters of an uninterrupted run. A
damaged checkpoint is an error naming the file and the fix. (The recipe's own relaunch
over a damaged checkpoint_last.pt: tests/test_recipes.py.)"""

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from conftest import BIN, ROOT, run_main
from test_task_data import glue_folder
from test_task_train import span_args

from span_plugin.runtime.checkpoints import prepare_resume

UPDATES = 18  # 20 updates make an epoch: every save is mid-epoch
SCHEDULE = ["--lr-scheduler", "polynomial_decay", "--total-num-update", str(UPDATES),
            "--warmup-updates", "2", "--batch-size", "8", "--validate-interval-updates", "2",
            "--save-interval-updates", "2"]
# Each launch of the interrupted run, in order. Hook kills fire inside the plugin's
# checkpoint writes (tests/crash_worker.py); "tmp" kills from outside as soon as a
# temporary checkpoint file appears; "timed" kills from outside at a random moment
# after the run has loaded its checkpoint.
LAUNCHES = ["write:1",   # during the very first file: nothing saved yet
            "after:1",   # first file of a save in place, its copies not written
            "write:2",   # during the copy to checkpoint_best.pt / checkpoint_last.pt
            "timed",
            "tmp",
            "after:2",   # between two files of one save
            "none"]      # the last launch runs to the end


def launch(kind, args, save_dir, rng):
    """Start one launch; kill it as ``kind`` says. Returns (return code, output)."""
    hook = kind if ":" in kind else "none"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "crash_worker.py"), hook, *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                 PYTHONUNBUFFERED="1"))
    lines, loaded, updated = [], threading.Event(), threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if "Loaded checkpoint" in line or "No existing checkpoint found" in line:
                loaded.set()
            if loaded.is_set() and re.search(r"num_updates[ =]\d+", line):
                updated.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if kind == "tmp":  # the moment a checkpoint write has begun
        assert loaded.wait(timeout=300), "the launch did not get to loading its checkpoint"
        while proc.poll() is None and not list(save_dir.glob("*.tmp")):
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    elif kind == "timed":  # a random moment in training, validation or saving
        assert updated.wait(timeout=300), "the launch did not train"
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=300)
    reader.join(timeout=10)
    return proc.returncode, "".join(lines)


def assert_same(a_path, b_path):
    a = torch.load(a_path, map_location="cpu")
    b = torch.load(b_path, map_location="cpu")
    for name, value in a["model"].items():
        assert torch.equal(value, b["model"][name]), f"{b_path}: {name} differs"
    sa, sb = a["last_optimizer_state"]["state"], b["last_optimizer_state"]["state"]
    for k in sa:
        for key, value in sa[k].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(sb[k][key])), f"{b_path}: optimizer {k}.{key}"
    assert a["optimizer_history"][-1]["num_updates"] == b["optimizer_history"][-1]["num_updates"]


@pytest.mark.slow
def test_killed_runs_resume_and_end_like_an_uninterrupted_run(tmp_path, capsys):
    data = glue_folder("MRPC")  # 160 train rows, batch 8
    straight = tmp_path / "straight"
    run_main("fairseq-train", *span_args(data, straight, *SCHEDULE, max_update=UPDATES, metric="f1"))

    save = tmp_path / "killed"
    args = span_args(data, save, *SCHEDULE, max_update=UPDATES, metric="f1")
    rng = random.Random(9)
    kills, resumed, starts = 0, 0, []
    for kind in LAUNCHES:
        # What the recipes do before every launch.
        last = prepare_resume(str(save), log=lambda m: None)
        expected = torch.load(last, map_location="cpu", mmap=True)["optimizer_history"][-1]["num_updates"] if last else None
        code, log = launch(kind, args, save, rng)
        if expected is None:
            assert "No existing checkpoint found" in log, log[-3000:]
        else:
            assert re.search(rf"Loaded checkpoint \S+checkpoint_last.pt \(epoch 1 @ {expected} updates\)", log), log[-3000:]
            resumed += 1
        starts.append(expected or 0)
        if kind == "none":
            assert code == 0, log[-3000:]
        else:
            assert code == -signal.SIGKILL, (kind, code, log[-3000:])
            kills += 1

    assert_same(straight / "checkpoint_last.pt", save / "checkpoint_last.pt")
    # Every interval checkpoint a resumed launch wrote is the uninterrupted run's too.
    saved = sorted(p.name for p in save.glob("checkpoint_1_*.pt"))
    assert saved == sorted(p.name for p in straight.glob("checkpoint_1_*.pt"))
    assert len(saved) == UPDATES // 2
    for name in saved:
        assert_same(straight / name, save / name)
    assert not list(save.glob("*.tmp"))
    with capsys.disabled():  # shown in CI's output, which captures the rest
        print(f"\nkill-and-resume: {kills} kills (SIGKILL: {', '.join(LAUNCHES[:-1])}); "
              f"{len(LAUNCHES) - 1} relaunches, {resumed} resumed (from updates "
              f"{[n for n in starts[1:] if n]}), {len(LAUNCHES) - 1 - resumed} started afresh "
              f"(nothing saved yet); identical endings: 1 of 1 (model and optimizer state at "
              f"update {UPDATES}); identical interval checkpoints: {len(saved)} of {len(saved)}")
    assert kills == len(LAUNCHES) - 1 and max(starts) > 0

    # A checkpoint cut short by other means (a full disk, an older writer): fairseq-train
    # stops with an error that names the file and what to do (not a bare OSError).
    last = save / "checkpoint_last.pt"
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size // 3)
    proc = run_main("fairseq-train", *args, check=False)
    assert proc.returncode != 0
    assert f"checkpoint {last} is damaged" in proc.stdout, proc.stdout[-3000:]
    assert f"python -m span_plugin.runtime.checkpoints resume {save}" in proc.stdout
