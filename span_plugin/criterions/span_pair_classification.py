"""Criterion ``span_pair_classification``: ``w_p * phrasal + w_s * sentential``.

Each part is a mean cross-entropy over its own items (phrase pairs, sentence pairs) of
the batch, weighted by the task's ``--phrasal-weight`` / ``--sentential-weight``;
sample_size is 1 per batch, so the gradient is that weighted sum of means. Logged:
``loss`` (the weighted sum), ``phrasal_loss`` and ``phrasal_accuracy`` over phrase pairs,
``sentential_loss`` and ``sentential_accuracy`` over sentence pairs, and
``sentential_f1`` of the positive sentence label when the folder's record names one
(``span-preprocess pairs --positive-label``; the recipe passes 1, "paraphrase"); losses
in bits, accuracies and F1 in percent, all from sums and counts, so exact whatever the
batching.
"""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.criterions import register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from span_plugin.preprocess.records import provenance
from span_plugin.runtime import data_record
from span_plugin.data.phrase_pairs import IGNORE
from span_plugin.criterions import glue_metrics
from span_plugin.criterions.sums import SummedCriterion


@dataclass
class SpanPairCriterionConfig(FairseqDataclass):
    classification_head_name: str = field(default="sentence_classification_head")
    # sentence_prediction's task config reads this from the criterion; sentence labels
    # here are classes.
    regression_target: bool = field(default=False)


@register_criterion("span_pair_classification", dataclass=SpanPairCriterionConfig)
class SpanPairClassificationCriterion(SummedCriterion):
    def __init__(self, cfg, task):
        super().__init__(task)
        self.head_name = cfg.classification_head_name
        self.w_p = float(task.cfg.phrasal_weight)
        self.w_s = float(task.cfg.sentential_weight)
        self.positive = self._positive_class(task) if self.w_s > 0 else None

    @staticmethod
    def _positive_class(task):
        """Index (among the label classes) of the record's positive label, or None."""
        data_record.attach(task)
        name = provenance.positive_label(data_record.task_record(task))
        if task.label_dictionary is None:
            return None
        return glue_metrics.positive_class(task.label_dictionary, name,
                                           f"the record of {task.cfg.data}")

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
            pred = logits.argmax(-1)
            log.update(sentential_loss_sum=summed.detach(), sentential_n=n,
                       sentential_correct=(pred == target).sum().detach())
            if self.positive is not None:
                hit, said = target == self.positive, pred == self.positive
                log.update(sentential_tp=(hit & said).sum().detach(),
                           sentential_fp=(~hit & said).sum().detach(),
                           sentential_fn=(hit & ~said).sum().detach())
        if not torch.is_tensor(loss):
            loss = torch.zeros((), requires_grad=True)
        log["loss"] = loss.detach()
        return loss, 1, log

    @staticmethod
    def log_metrics(total, sample_size, logging_outputs) -> None:
        for part in ("phrasal", "sentential"):
            n = total(f"{part}_n")
            if not any(f"{part}_n" in log for log in logging_outputs):
                continue
            metrics.log_scalar(f"{part}_loss", total(f"{part}_loss_sum") / max(n, 1) / math.log(2),
                               n, round=3)
            metrics.log_scalar(f"{part}_accuracy", 100.0 * total(f"{part}_correct") / max(n, 1),
                               n, round=2)
        if any("sentential_tp" in log for log in logging_outputs):
            for k in ("tp", "fp", "fn"):
                metrics.log_scalar_sum(f"_sentential_{k}", total(f"sentential_{k}"))
            # Rows are gold, columns predicted, the positive class at index 1.
            metrics.log_derived("sentential_f1", lambda m: round(100.0 * glue_metrics.f1(
                [[0, m["_sentential_fp"].sum], [m["_sentential_fn"].sum, m["_sentential_tp"].sum]]),
                2))
