"""A run stopped after k updates and resumed from checkpoint_last.pt ends where an
uninterrupted run ends (CPU, same seed): optimizer, LR schedule, data order and
dropout seeds all come back."""

import pytest
import torch

from conftest import num_updates, run_cli, train_args

SCHEDULE = ["--lr-scheduler", "polynomial_decay", "--total-num-update", "10",
            "--warmup-updates", "2", "--batch-size", "8"]


@pytest.mark.slow
def test_resume_matches_uninterrupted_run(sst2_bin, tmp_path):
    # 96 examples in batches of 8: 12 updates an epoch; stop at 5, mid-epoch.
    straight = tmp_path / "straight"
    run_cli("fairseq-train", *train_args(sst2_bin, straight, *SCHEDULE, max_update=10))

    stopped = tmp_path / "stopped"
    run_cli("fairseq-train", *train_args(sst2_bin, stopped, *SCHEDULE, max_update=5))
    log = run_cli("fairseq-train", *train_args(sst2_bin, stopped, *SCHEDULE, max_update=10)).stdout
    assert "@ 5 updates" in log and max(num_updates(log)) == 10, log

    a = torch.load(straight / "checkpoint_last.pt")
    b = torch.load(stopped / "checkpoint_last.pt")
    for name, value in a["model"].items():
        assert torch.equal(value, b["model"][name]), f"{name} differs after resume"
    assert a["optimizer_history"][-1]["num_updates"] == b["optimizer_history"][-1]["num_updates"] == 10
