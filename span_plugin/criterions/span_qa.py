"""Criterion ``span_qa``: the QA head's loss per window, and in validation the official
SQuAD exact match and F1 of the decoded answers (percent; SQuAD 2.0 folders add the
HasAns/NoAns breakdown).

Every question's windows are in one batch (:mod:`span_plugin.data.qa_windows`), so the
answers decoded here are those ``span-predict`` writes, and the per-question scores,
logged as sums, give the exact figures of the split whatever the batching; select
checkpoints with ``--best-checkpoint-metric f1 --maximize-best-checkpoint-metric``.
"""

from dataclasses import dataclass, field

from fairseq.criterions import register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from span_plugin.criterions.sums import SummedCriterion
from span_plugin.formats.squad_metrics import gold_texts, score_answer
from span_plugin.modules.qa_decoding import answers_of_batch

GROUPS = ("", "HasAns_", "NoAns_")  # all questions; SQuAD 2.0: answerable, impossible


@dataclass
class SpanQACriterionConfig(FairseqDataclass):
    classification_head_name: str = field(default="qa_head")


@register_criterion("span_qa", dataclass=SpanQACriterionConfig)
class SpanQACriterion(SummedCriterion):
    """Sample size = windows scored (a span-head window whose answer is longer than
    ``--max-answer-tokens`` is left out and counted as ``unreachable``)."""

    def __init__(self, cfg, task):
        super().__init__(task)
        self.head_name = cfg.classification_head_name

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
                                   self.task.cfg.null_threshold if v2 else None)
        for record, answer in zip(records, answers):
            em, f1 = score_answer(answer["text"], gold_texts(record), "2.0" if v2 else "1.1")
            groups = ("", "NoAns_" if record.impossible else "HasAns_") if v2 else ("",)
            for group in groups:
                log[group + "em"] = log.get(group + "em", 0.0) + em
                log[group + "f1"] = log.get(group + "f1", 0.0) + f1
                log[group + "questions"] = log.get(group + "questions", 0) + 1

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
            for name in ("em", "f1"):
                metrics.log_scalar(group + name, 100.0 * total(group + name) / max(n, 1), n,
                                   round=2)
