"""Multi-process span fine-tuning on CPU through fairseq's real distributed path
(torchrun, gloo, torch DDP), with the plugin loaded in every worker."""

import socket

import pytest
import torch

from conftest import ROOT, run_cli, run_main
from test_task_data import glue_folder
from test_task_train import span_args

# no dropout anywhere (encoder and span head): the ranks and the single process draw
# different dropout masks, so only the summation order may differ
DETERMINISTIC = ["--dropout", "0", "--attention-dropout", "0", "--span-dropout", "0", "--lr", "1e-4"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc, out_prefix, args):
    return run_cli(
        "torchrun", "--nproc_per_node", nproc, "--master_addr", "127.0.0.1",
        "--master_port", free_port(), ROOT / "tests" / "dist_worker.py", out_prefix, *args,
    )


@pytest.mark.slow
def test_two_workers_match_each_other_and_one_process(tmp_path):
    data = glue_folder("MRPC")  # pairs: spans of both sentences move with the layout
    # Two workers with 8 examples each per update...
    two = span_args(data, tmp_path / "two", *DETERMINISTIC, "--batch-size", "8",
                    "--find-unused-parameters", max_update=4, metric="f1")
    log = torchrun(2, tmp_path / "params", two).stdout
    assert "distributed init (rank 1)" in log and "roberta_span" in log, log
    rank0 = torch.load(tmp_path / "params.rank0.pt")["model"]
    rank1 = torch.load(tmp_path / "params.rank1.pt")["model"]
    assert rank0.keys() == rank1.keys()
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), f"ranks differ in {name}"

    # ...against one process accumulating the same two batches of 8 per update.
    one = span_args(data, tmp_path / "one", *DETERMINISTIC, "--batch-size", "8",
                    "--update-freq", "2", max_update=4, metric="f1")
    run_main("fairseq-train", *one)
    single = torch.load(tmp_path / "one" / "checkpoint_last.pt")["model"]
    saved = torch.load(tmp_path / "two" / "checkpoint_last.pt")["model"]
    assert all(torch.equal(saved[k], rank0[k]) for k in saved)  # the harness saw the end
    worst = max((single[k].float() - rank0[k].float()).abs().max().item() for k in single)
    print(f"largest parameter difference, 1 vs 2 processes: {worst:.2e}")
    # Only the order of summation differs (measured: ~2e-9); 4 Adam steps of lr 1e-4
    # move weights by ~4e-4, so a wrong batch split or a missed all-reduce shows.
    assert worst < 1e-6
