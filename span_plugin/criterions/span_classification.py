"""Criterion ``span_classification``: sentence_prediction's loss and GLUE metrics
(accuracy, MCC, F1 of the positive label; Pearson, Spearman) logged as counts and sums,
so they stay exact when summed over batches and workers. It checks the data folder
against its record and keeps the latest validation pass's predictions in the task state
(``valid_predictions``). How each statistic is summed and who reads the predictions:
docs/GLUE.md, section "Module notes"."""

import logging
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq.criterions import register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from span_plugin.preprocess.records import provenance
from span_plugin.runtime import data_record
from span_plugin.criterions import glue_metrics
from span_plugin.criterions.sums import SummedCriterion
from span_plugin.runtime.checkpoints import VALID_PREDICTIONS

logger = logging.getLogger(__name__)

MAX_CONFUSION_CLASSES = 16  # beyond this, no per-cell counts (and no mcc)


@dataclass
class SpanClassificationCriterionConfig(FairseqDataclass):
    classification_head_name: str = field(
        default="sentence_classification_head",
        metadata={"help": "name of the classification head to use"},
    )
    regression_target: bool = field(default=False)
    positive_label: Optional[str] = field(
        default=None,
        metadata={"help": "label (as written in the data) that F1 counts as positive; "
                  "default: the one the data folder's record names (none: no f1)"},
    )


@register_criterion("span_classification", dataclass=SpanClassificationCriterionConfig)
class SpanClassificationCriterion(SummedCriterion):
    def __init__(self, cfg: SpanClassificationCriterionConfig, task):
        super().__init__(task)
        self.head_name = cfg.classification_head_name
        self.regression_target = cfg.regression_target
        self.num_classes = int(task.cfg.num_classes)
        data_record.attach(task)
        data = getattr(getattr(task, "cfg", None), "data", None)
        if data:
            provenance.verify_folder(data)
        self._valid_pass = None  # the current validation pass's record, in the task state
        self.positive = None
        if not self.regression_target and self.num_classes == 2:
            name = cfg.positive_label
            source = "--positive-label"
            if name is None:
                name = provenance.positive_label(data_record.task_record(task))
                source = f"the record of {data}"
            if name is None:
                logger.warning(
                    "f1 is not reported: no positive label is known for this task "
                    "(labels: %s); pass --positive-label NAME to get it. Reported: "
                    "accuracy, mcc.", glue_metrics.label_names(task.label_dictionary))
            self.positive = glue_metrics.positive_class(task.label_dictionary, name, source)

    def forward(self, model, sample, reduce=True):
        """Loss (summed over the batch), sample size, logging output."""
        if self.head_name not in getattr(model, "classification_heads", {}):
            raise ValueError(
                f"model has no classification head {self.head_name!r} "
                f"(--classification-head-name)"
            )
        logits, _ = model(
            **sample["net_input"], features_only=True, classification_head_name=self.head_name
        )
        targets = model.get_targets(sample, [logits]).view(-1)
        sample_size = targets.numel()
        log = {"ntokens": sample["ntokens"], "nsentences": sample_size, "sample_size": sample_size}
        if not self.regression_target:
            lprobs = F.log_softmax(logits, dim=-1, dtype=torch.float32)
            loss = F.nll_loss(lprobs, targets, reduction="sum")
            preds = logits.argmax(dim=-1)
            log["ncorrect"] = (preds == targets).sum()
            if self.num_classes <= MAX_CONFUSION_CLASSES:
                p, t = preds, targets
                if self.positive == 0:  # log binary counts with the positive label as 1
                    p, t = 1 - p, 1 - t
                log["_cm"] = glue_metrics.confusion_counts(p, t, self.num_classes)  # [C, C]
                if self.num_classes == 2 and self.positive is not None:
                    log["_f1_known"] = 1
        else:
            preds = logits.view(-1).float()
            targets = targets.float()
            loss = F.mse_loss(preds, targets, reduction="sum")
            for key, value in glue_metrics.moment_sums(preds.detach(), targets).items():
                log["_" + key] = value
            if not model.training:
                log.update(self._by_id(sample["id"], preds.detach(), targets))
        log["loss"] = loss.data
        if not model.training:
            log["_eval"] = 1
        self._remember(model, sample, preds)
        return loss, sample_size, log

    def _remember(self, model, sample, preds):
        """Keep eval-mode predictions by example id in the task state (see above)."""
        if model.training or getattr(self.task, "state", None) is None:
            self._valid_pass = None  # the next eval-mode call starts a new pass
            return
        if self._valid_pass is None:
            self._valid_pass = {"ids": [], "values": []}
            self.task.state.merge_state_dict({VALID_PREDICTIONS: self._valid_pass})
        self._valid_pass["ids"].extend(sample["id"].tolist())
        self._valid_pass["values"].extend(preds.detach().cpu().tolist())

    def _by_id(self, ids, preds, targets):
        """``[N]`` float64 vectors of predictions, targets and seen-flags, indexed by
        example id; N is fixed per run so every worker's vectors have one shape."""
        n = max((len(ds) for ds in self.task.datasets.values()), default=0)
        n = max(n, int(ids.max()) + 1 if ids.numel() else 0)
        out = {}
        for key, values in (("_pred_by_id", preds), ("_targ_by_id", targets),
                            ("_seen_by_id", torch.ones_like(preds))):
            v = torch.zeros(n, dtype=torch.float64, device=preds.device)
            v[ids] = values.double()
            out[key] = v
        return out

    @staticmethod
    def log_metrics(total, sample_size, logging_outputs) -> None:
        nsentences = total("nsentences")
        if not logging_outputs:
            return
        keys = set().union(*(log.keys() for log in logging_outputs))
        if "ncorrect" in keys:
            metrics.log_scalar(
                "accuracy", 100.0 * total("ncorrect") / max(nsentences, 1), nsentences, round=2
            )
        # Derived metrics stay device tensors on training steps, where fairseq smooths
        # every metric after every update (no host-device sync for them); validation
        # gets numbers, for checkpoint selection and early stopping.
        as_number = "_eval" in keys
        if "_cm" in keys:
            metrics.log_scalar_sum("_cm", total("_cm"))
            metrics.log_derived("mcc", lambda m: _pct(glue_metrics.mcc_tensor(m["_cm"].sum), as_number))
            if "_f1_known" in keys:  # two classes, a positive label known
                metrics.log_derived("f1", lambda m: _pct(glue_metrics.f1_tensor(m["_cm"].sum), as_number))
        if "_n" in keys:
            for k in glue_metrics.MOMENT_KEYS:
                metrics.log_scalar_sum("_" + k, total("_" + k))
            metrics.log_derived(
                "pearson",
                lambda m: _pct(glue_metrics.pearson_tensor(
                    {k: m["_" + k].sum for k in glue_metrics.MOMENT_KEYS}), as_number),
            )
        if "_seen_by_id" in keys:
            seen = sum(log["_seen_by_id"] for log in logging_outputs if "_seen_by_id" in log)
            mask = seen.cpu() > 0
            for k in ("pred", "targ"):
                total = sum(log[f"_{k}_by_id"] for log in logging_outputs if f"_{k}_by_id" in log)
                metrics.log_concat_tensor("_" + k, total.cpu()[mask], dim=0)
            metrics.log_derived(
                "spearman",
                lambda m: _pct(
                    glue_metrics.spearman(m["_pred"].tensor.numpy(), m["_targ"].tensor.numpy())
                ),
            )


def _pct(value, as_number=True):
    """A metric in [0, 1] as a percentage rounded to 2 places: a float, or a tensor
    on the value's device (no sync)."""
    if not torch.is_tensor(value):
        return round(100.0 * float(value), 2)
    value = torch.round(100.0 * value, decimals=2)
    return float(value) if as_number else value
