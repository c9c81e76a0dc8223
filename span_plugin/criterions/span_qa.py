"""Criterion ``span_qa``: the QA head's loss per window, and in validation the official
SQuAD scores of the decoded answers, under the official scripts' names (percent):
``exact_match`` and ``f1``, and for SQuAD 2.0 folders ``HasAns_exact``, ``HasAns_f1``,
``NoAns_exact``, ``NoAns_f1``.

Every question's windows are in one batch (:mod:`span_plugin.data.qa_windows`), so the
answers decoded here are those ``span-predict`` writes (the task's
``--answer-boundaries``), and the per-question scores, logged as sums, give the exact
figures of the split whatever the batching; select checkpoints with
``--best-checkpoint-metric f1 --maximize-best-checkpoint-metric``.

Until the names were made the official ones, exact match was logged as ``em``,
``HasAns_em`` and ``NoAns_em``. A run that selects checkpoints by one of those names
(``--best-checkpoint-metric em``: an older run resumed with its command) gets that name
logged too, so that fairseq finds the figure it selects by.
"""

from dataclasses import dataclass, field

from fairseq.criterions import register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from omegaconf import II
from omegaconf.errors import OmegaConfBaseException

from span_plugin.criterions.sums import SummedCriterion
from span_plugin.formats.squad_metrics import gold_texts, score_answer
from span_plugin.modules.qa_decoding import answers_of_batch

GROUPS = ("", "HasAns_", "NoAns_")  # all questions; SQuAD 2.0: answerable, impossible
# (exact match, F1) of each group, as the official scripts name them
NAMES = {"": ("exact_match", "f1"), "HasAns_": ("HasAns_exact", "HasAns_f1"),
         "NoAns_": ("NoAns_exact", "NoAns_f1")}
OLD_NAMES = {"em": "exact_match", "HasAns_em": "HasAns_exact", "NoAns_em": "NoAns_exact"}
OLD_NAME_KEY = "old_name:"  # a logging-output key prefix: the old name wanted, and its sums


@dataclass
class SpanQACriterionConfig(FairseqDataclass):
    classification_head_name: str = field(default="qa_head")
    best_checkpoint_metric: str = II("checkpoint.best_checkpoint_metric")


def _selected_metric(cfg):
    """The run's --best-checkpoint-metric, or None where the config has none (a criterion
    built on its own, outside a full fairseq config)."""
    try:
        return getattr(cfg, "best_checkpoint_metric", None)
    except OmegaConfBaseException:  # an interpolation with nothing to resolve against
        return None


@register_criterion("span_qa", dataclass=SpanQACriterionConfig)
class SpanQACriterion(SummedCriterion):
    """Sample size = windows scored (a span-head window whose answer is longer than
    ``--max-answer-tokens`` is left out and counted as ``unreachable``)."""

    def __init__(self, cfg, task):
        super().__init__(task)
        self.head_name = cfg.classification_head_name
        selected = _selected_metric(cfg)
        self.old_name = selected if selected in OLD_NAMES else None

    def forward(self, model, sample, reduce=True):
        output, _ = model(**sample["net_input"], classification_head_name=self.head_name)
        head = model.classification_heads[self.head_name]
        loss, unreachable = head.loss(output, sample["target"])
        windows = sample["target"].size(0)
        log = {"loss": loss.data, "ntokens": sample["ntokens"],
               "nsentences": sample["nsentences"], "sample_size": windows - unreachable,
               "windows": windows, "unreachable": unreachable}
        if not model.training:
            self._log_scores(log, output, sample)
        return loss, log["sample_size"], log

    def _log_scores(self, log, output, sample):
        qa = sample["qa"]
        records = qa["records"]
        v2 = self.task.squad_v2
        answers = answers_of_batch(output, qa["question"], qa["offsets"],
                                   [r.context for r in records], self.task.cfg.n_best,
                                   self.task.cfg.null_threshold if v2 else None,
                                   self.task.answer_boundaries)
        for record, answer in zip(records, answers):
            em, f1 = score_answer(answer["text"], gold_texts(record), "2.0" if v2 else "1.1")
            groups = ("", "NoAns_" if record.impossible else "HasAns_") if v2 else ("",)
            for group in groups:
                log[group + "em"] = log.get(group + "em", 0.0) + em
                log[group + "f1"] = log.get(group + "f1", 0.0) + f1
                log[group + "questions"] = log.get(group + "questions", 0) + 1
        if self.old_name is not None:
            log[OLD_NAME_KEY + self.old_name] = 1

    @staticmethod
    def log_metrics(total, sample_size, logging_outputs) -> None:
        unreachable = total("unreachable")
        if unreachable:
            metrics.log_scalar_sum("unreachable", unreachable)
        keys = set().union(*(log.keys() for log in logging_outputs))
        for group in GROUPS:
            n = total(group + "questions")
            if group + "questions" not in keys or (group and not n):
                continue
            for key, name in zip(("em", "f1"), NAMES[group]):
                metrics.log_scalar(name, 100.0 * total(group + key) / max(n, 1), n, round=2)
        for old in OLD_NAMES:  # the sums of exact match are kept under the old names
            n = total(old[:-2] + "questions")
            if OLD_NAME_KEY + old in keys and n:
                metrics.log_scalar(old, 100.0 * total(old) / n, n, round=2)
