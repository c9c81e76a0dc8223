"""Criteria ``span_tagging`` and ``span_labeling``: cross-entropy, and entity-level
``precision``, ``recall`` and ``f1`` (percent): exact boundaries and type, entities read
in the task's ``--metric-mode`` (``default``: conlleval's chunking, seqeval's default
mode; ``strict``: seqeval's strict IOB2 mode; :mod:`span_plugin.modules.entities`,
tested against seqeval in both). Tagging heads' tags come from the task's
``--token-decoding`` (``viterbi``: the best well-formed IOB2 sequence; ``argmax``: per
word); the word ``accuracy`` is the per-word argmax's either way. Span labeling is scored
on its flat decoding (CoNLL entities do not nest).

Entity metrics are computed in eval mode (validation) from three counts, true
positives, predicted and gold entities, logged with ``log_scalar_sum``: summed over
batches and workers they give the epoch's exact figures, whatever the batching, so
``--best-checkpoint-metric f1 --maximize-best-checkpoint-metric`` selects on them.
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.criterions import register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from span_plugin.modules import entities as ner
from span_plugin.data.tagging_datasets import IGNORE
from span_plugin.criterions.sums import SummedCriterion

COUNTS = ("_ent_tp", "_ent_pred", "_ent_gold")


@dataclass
class NerCriterionConfig(FairseqDataclass):
    classification_head_name: str = field(default="tagging_head")


class _EntityCriterion(SummedCriterion):
    def __init__(self, cfg, task):
        super().__init__(task)
        self.head_name = cfg.classification_head_name

    @property
    def metric_mode(self):
        """The task's ``--metric-mode`` (``default`` for a task config without one)."""
        return ner.task_setting(self.task.cfg, "metric_mode")

    @property
    def token_decoding(self):
        """The task's ``--token-decoding`` (``argmax`` for a task config without one)."""
        return ner.task_setting(self.task.cfg, "token_decoding")

    def _log_entities(self, log, predicted, gold):
        for key, value in zip(COUNTS, ner.match_counts(predicted, gold)):
            log[key] = value

    @staticmethod
    def log_metrics(total, sample_size, logging_outputs) -> None:
        if "n_correct" in set().union(*(log.keys() for log in logging_outputs)):
            metrics.log_scalar("accuracy", 100.0 * total("n_correct") / max(sample_size, 1),
                               sample_size, round=2)
        if not any(COUNTS[2] in log for log in logging_outputs):
            return
        for key in COUNTS:
            metrics.log_scalar_sum(key, total(key))
        for i, name in enumerate(("precision", "recall", "f1")):
            metrics.log_derived(name, lambda m, i=i: round(100.0 * ner.prf(
                *(m[k].sum for k in COUNTS))[i], 2))
        unreachable = total("unreachable")
        if unreachable:
            metrics.log_scalar_sum("unreachable", unreachable)


@register_criterion("span_tagging", dataclass=NerCriterionConfig)
class SpanTaggingCriterion(_EntityCriterion):
    """Cross-entropy of each word's tag at its first sub-token; sample size = words."""

    def forward(self, model, sample, reduce=True):
        net_input = sample["net_input"]
        logits, _ = model(**net_input, classification_head_name=self.head_name)
        scores = ner.word_logits(logits, net_input["words"])  # [B, W, C]
        target = sample["target"]
        mask = target != IGNORE
        loss = F.cross_entropy(scores.flatten(0, 1).float(), target.flatten(),
                               ignore_index=IGNORE, reduction="sum")
        log = {"loss": loss.data, "ntokens": sample["ntokens"],
               "nsentences": target.size(0), "sample_size": int(mask.sum()),
               "n_correct": int(((scores.argmax(-1) == target) & mask).sum())}
        if not model.training:
            _, predicted = ner.tagging_entities(logits, net_input["words"], self.task.tag_names,
                                                self.metric_mode, self.token_decoding)
            self._log_entities(log, predicted, ner.gold_entities(target, self.task.tag_names,
                                                                 self.metric_mode))
        return loss, log["sample_size"], log


@register_criterion("span_labeling", dataclass=NerCriterionConfig)
class SpanLabelingCriterion(_EntityCriterion):
    """Cross-entropy of each candidate span's label (none or a type) over every
    candidate, or the gold entities plus sampled negatives (the task's
    ``--negative-sampling``, training only); sample size = candidates scored."""

    def forward(self, model, sample, reduce=True):
        net_input = sample["net_input"]
        (logits, valid), _ = model(**net_input, classification_head_name=self.head_name)
        target, unreachable = ner.labeling_targets(sample["entities"], valid)
        mask = valid
        rate = self.task.cfg.negative_sampling
        if model.training and rate > 0:
            mask = valid & ((target > 0) | self._sample_negatives(valid & (target == 0),
                                                                  net_input["words"], rate))
        loss = F.cross_entropy(logits[mask].float(), target[mask], reduction="sum")
        log = {"loss": loss.data, "ntokens": sample["ntokens"], "nsentences": target.size(0),
               "sample_size": int(mask.sum()), "unreachable": unreachable}
        if not model.training:
            predicted = ner.labeling_entities(logits, valid, self.task.entity_types)
            self._log_entities(log, predicted, ner.gold_entities(
                sample["target"], self.task.tag_names, self.metric_mode))
        return loss, log["sample_size"], log

    @staticmethod
    def _sample_negatives(negative, words, rate):
        """Per example, round(rate * words) of its negatives, uniformly (torch's RNG,
        which fairseq seeds per update): BoolTensor like ``negative [B, W, L]``."""
        batch = negative.size(0)
        keys = torch.rand(negative.shape, device=negative.device).masked_fill(~negative, 2.0)
        rank = keys.view(batch, -1).argsort(-1).argsort(-1).view_as(negative)
        quota = torch.round(rate * ner.word_counts(words).float()).long().view(-1, 1, 1)
        return negative & (rank < quota)
