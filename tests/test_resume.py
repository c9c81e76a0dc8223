"""A run stopped after k updates and resumed from checkpoint_last.pt ends where an
uninterrupted run ends (CPU, same seed): optimizer, LR schedule, data order and
dropout seeds all come back."""

import pytest
import torch

from conftest import num_updates, run_cli
from test_task_data import ROWS, glue_folder
from test_task_train import span_args

SCHEDULE = ["--lr-scheduler", "polynomial_decay", "--total-num-update", "10",
            "--warmup-updates", "2", "--batch-size", "8",
            "--validate-interval-updates", "5", "--save-interval-updates", "5"]


def run(data, save_dir, max_update):
    return run_cli("fairseq-train", *span_args(data, save_dir, *SCHEDULE, max_update=max_update,
                                               metric="f1")).stdout


@pytest.mark.slow
def test_resume_matches_uninterrupted_run(tmp_path):
    data = glue_folder("MRPC")
    assert ROWS["train"] > 10 * 8  # stopping at update 5 is mid-epoch
    straight = tmp_path / "straight"
    run(data, straight, max_update=10)

    stopped = tmp_path / "stopped"
    run(data, stopped, max_update=5)
    log = run(data, stopped, max_update=10)
    assert "@ 5 updates" in log and max(num_updates(log)) == 10, log

    a = torch.load(straight / "checkpoint_last.pt")
    b = torch.load(stopped / "checkpoint_last.pt")
    for name, value in a["model"].items():
        assert torch.equal(value, b["model"][name]), f"{name} differs after resume"
    assert a["optimizer_history"][-1]["num_updates"] == b["optimizer_history"][-1]["num_updates"] == 10
