"""The span head under fairseq's own half-precision training path.

fairseq's --fp16 keeps an fp32 copy of the weights on CUDA, so on CPU the fp16 path
that runs is --memory-efficient-fp16: the whole model in float16, dynamic loss
scaling, fp16 gradients. --bf16 (no loss scaling) runs on CPU too: test_bf16.py. Module-level fp16/bf16
checks are in test_span_encoder.py; GPU figures are recorded in benchmarks/RESULTS.md
when a GPU is available.
"""

import re

import pytest
import torch

from conftest import run_main
from test_task_data import glue_folder
from test_task_train import span_args, valid_stats


@pytest.mark.slow
@pytest.mark.parametrize("encoder", ["cnn-cnn", "attn-attn"])
def test_memory_efficient_fp16_training(encoder, tmp_path):
    log = run_main(
        "fairseq-train",
        *span_args(glue_folder("MRPC"), tmp_path, "--memory-efficient-fp16",
                   "--span-encoder", encoder, max_update=6, metric="f1"),
    ).stdout
    assert "loss_scale=" in log  # fairseq's fp16 optimizer ran
    assert "overflow" not in log, log[-3000:]  # no loss-scale trips of our own making
    train_losses = [float(x) for x in re.findall(r"train_inner \|.* loss=([-\d.]+)", log)]
    assert len(train_losses) == 6 and all(map(torch.isfinite, torch.tensor(train_losses)))
    stats = valid_stats(log)
    assert {"f1", "accuracy"} <= set(stats) and torch.isfinite(torch.tensor(float(stats["loss"])))
    model = torch.load(tmp_path / "checkpoint_last.pt")["model"]
    head = {k: v for k, v in model.items() if "span_encoder" in k}
    assert head and all(torch.isfinite(v).all() for v in head.values())
