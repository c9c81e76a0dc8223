"""Criterion ``span_pair_classification``: ``w_p * phrasal + w_s * sentential``.

Each part is a mean cross-entropy over its own items (phrase pairs, sentence pairs) of
the batch, weighted by the task's ``--phrasal-weight`` / ``--sentential-weight``;
sample_size is 1 per batch, so the gradient is that weighted sum of means. Logged:
``loss`` (the weighted sum), ``phrasal_loss`` and ``phrasal_accuracy`` over phrase pairs,
``sentential_loss`` and ``sentential_accuracy`` over sentence pairs (losses in bits,
accuracies in percent), all from sums and counts, so exact whatever the batching.
"""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from ..data.phrase_pairs import IGNORE
from .sums import log_loss, summer


@dataclass
class SpanPairCriterionConfig(FairseqDataclass):
    classification_head_name: str = field(default="sentence_classification_head")
    # sentence_prediction's task config reads this from the criterion; sentence labels
    # here are classes.
    regression_target: bool = field(default=False)


@register_criterion("span_pair_classification", dataclass=SpanPairCriterionConfig)
class SpanPairClassificationCriterion(FairseqCriterion):
    def __init__(self, cfg, task):
        super().__init__(task)
        self.head_name = cfg.classification_head_name
        self.w_p = float(task.cfg.phrasal_weight)
        self.w_s = float(task.cfg.sentential_weight)

    def forward(self, model, sample, reduce=True):
        out, _ = model(**sample["net_input"], classification_head_name=self.head_name)
        loss = 0.0
        log = {"nsentences": sample["nsentences"], "ntokens": sample["ntokens"], "sample_size": 1}
        if self.w_p > 0:
            target = sample["phrase_target"]
            target = target[target != IGNORE]  # [P], the order of the head's packed rows
            logits = out["phrasal"]
            summed = F.cross_entropy(logits.float(), target, reduction="sum")
            n = target.numel()
            loss = loss + self.w_p * summed / max(n, 1)
            log.update(phrasal_loss_sum=summed.detach(), phrasal_n=n,
                       phrasal_correct=(logits.argmax(-1) == target).sum().detach())
        if self.w_s > 0:
            target = sample["target"].view(-1)
            logits = out["sentential"]
            summed = F.cross_entropy(logits.float(), target, reduction="sum")
            n = target.numel()
            loss = loss + self.w_s * summed / max(n, 1)
            log.update(sentential_loss_sum=summed.detach(), sentential_n=n,
                       sentential_correct=(logits.argmax(-1) == target).sum().detach())
        if not torch.is_tensor(loss):
            loss = torch.zeros((), requires_grad=True)
        log["loss"] = loss.detach()
        return loss, 1, log

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        total = summer(logging_outputs)
        log_loss(total)
        for part in ("phrasal", "sentential"):
            n = total(f"{part}_n")
            if not any(f"{part}_n" in log for log in logging_outputs):
                continue
            metrics.log_scalar(f"{part}_loss", total(f"{part}_loss_sum") / max(n, 1) / math.log(2),
                               n, round=3)
            metrics.log_scalar(f"{part}_accuracy", 100.0 * total(f"{part}_correct") / max(n, 1),
                               n, round=2)
