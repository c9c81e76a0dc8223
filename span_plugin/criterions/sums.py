"""What the criteria's ``reduce_metrics`` share: sums over the workers' logging outputs
(so every metric is exact whatever the batching) and the loss in bits."""

import math

import torch
from fairseq.logging import metrics


def summer(logging_outputs):
    """``total(key)``: the sum of ``key`` over ``logging_outputs`` (0 where absent)."""
    def total(key):
        return sum(_number(log.get(key, 0)) for log in logging_outputs)

    return total


def log_loss(total):
    """Log ``loss`` (summed loss / sample_size, in bits) as fairseq's criteria do;
    returns the sample size."""
    sample_size = total("sample_size")
    metrics.log_scalar("loss", total("loss") / max(sample_size, 1) / math.log(2),
                       sample_size, round=3)
    return sample_size


def _number(v):
    return v.item() if torch.is_tensor(v) else v
