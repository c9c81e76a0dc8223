"""GLUE metrics through fairseq's real multi-worker path: two torchrun workers each
validate half of the valid set; their reported metrics must equal one process
validating the same checkpoint (summed counts for f1/mcc, gathered predictions for
Spearman)."""

import re

import pytest

from conftest import USER_DIR, run_main
from test_distributed import torchrun
from test_task_data import glue_folder
from test_task_train import span_args, valid_stats


def _metrics(stats, names):
    return {k: float(stats[k]) for k in names}


@pytest.mark.slow
@pytest.mark.parametrize("task,names", [("MRPC", ("accuracy", "f1", "mcc")), ("STS-B", ("pearson", "spearman"))])
def test_two_workers_report_the_metrics_of_one_process(task, names, tmp_path):
    data = glue_folder(task)
    extra = ["--regression-target"] if task == "STS-B" else []
    num_classes = 1 if task == "STS-B" else 2
    args = span_args(data, tmp_path / "two", *extra, "--batch-size", "8", "--find-unused-parameters",
                     num_classes=num_classes, max_update=2, metric=names[-1])
    log = torchrun(2, tmp_path / "params", args).stdout
    assert "distributed init (rank 1)" in log, log[-3000:]
    two = _metrics(valid_stats(log), names)

    one = run_main(
        "fairseq-validate", data, "--path", tmp_path / "two" / "checkpoint_last.pt",
        "--user-dir", USER_DIR, "--task", "span_classification", "--criterion", "span_classification",
        "--num-classes", num_classes, "--init-token", "0", "--separator-token", "2",
        "--max-positions", "128", "--shorten-method", "truncate", "--max-spans", "64",
        "--max-span-tokens", "16", "--batch-size", "8", "--valid-subset", "valid", "--cpu",
        "--num-workers", "0", *extra,
    ).stdout
    line = [x for x in one.splitlines() if "valid on 'valid' subset" in x][-1]
    single = {k: float(v) for k, v in re.findall(r"\| (\w+) ([-\d.]+)", line) if k in names}
    assert single.keys() == two.keys(), (single, two)
    for k in names:
        assert single[k] == pytest.approx(two[k], abs=0.011), (k, single, two)
