"""What the plugin's criteria share: logging outputs that are sums over the workers (so
every metric is exact whatever the batching), the loss in bits, and the base class that
reduces them."""

import math

from fairseq.criterions import FairseqCriterion
from fairseq.logging import metrics


def summer(logging_outputs):
    """``total(key)``: the sum of ``key`` over ``logging_outputs`` (0 where absent).
    Tensors stay tensors on their device: fairseq reduces the metrics after every
    update, and a ``.item()`` here would make the host wait for the device each time;
    fairseq's meters turn them into numbers when they are logged."""
    def total(key):
        return sum(log.get(key, 0) for log in logging_outputs)

    return total


def log_loss(total):
    """Log ``loss`` (summed loss / sample_size, in bits) as fairseq's criteria do;
    returns the sample size."""
    sample_size = total("sample_size")
    metrics.log_scalar("loss", total("loss") / max(sample_size, 1) / math.log(2),
                       sample_size, round=3)
    return sample_size


class SummedCriterion(FairseqCriterion):
    """Base of the plugin's criteria: every logging output sums over workers; ``loss``
    is logged in bits per ``sample_size``, and :meth:`log_metrics` adds the rest."""

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        total = summer(logging_outputs)
        cls.log_metrics(total, log_loss(total), logging_outputs)

    @staticmethod
    def log_metrics(total, sample_size, logging_outputs) -> None:
        """Log the criterion's own metrics. ``total(key)`` sums ``key`` over
        ``logging_outputs``; ``sample_size`` is ``total("sample_size")``."""
