"""Criterion ``spanbert_masked_lm``: masked-LM loss plus SpanBERT's span boundary objective.

loss = MLM + sbo_weight * SBO, both summed cross-entropies over the masked tokens and
divided by their number; ``mlm_loss`` and ``sbo_loss`` are logged beside ``loss`` (in
bits, as fairseq's masked_lm logs), and ``ppl`` is the MLM perplexity.
``--sbo-weight 0`` trains the MLM alone (any RoBERTa model, e.g. ``--arch roberta_base``).

The SBO reads its spans from the batch alone: the predicted tokens are the positions
whose target is not ``<pad>``, a span is a maximal run of them in a row, and its
boundaries are the tokens just left and right of the run. This is the same for every
``--masking`` of the task: SpanBERT's spans (a run per span, as spans never touch),
whole words and single tokens (a run per word or token, or per group of neighbours
chosen together). The masker never chooses a block's first or last token, so both
boundaries are always tokens of the row (not padding, not the run itself).
"""

import math
from dataclasses import dataclass, field

from fairseq import modules, utils
from fairseq.criterions import register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from span_plugin.criterions.sums import SummedCriterion


@dataclass
class SpanBertMaskedLMCriterionConfig(FairseqDataclass):
    sbo_weight: float = field(
        default=1.0,
        metadata={"help": "weight of the span boundary objective; 0 trains the masked "
                  "LM alone (then any RoBERTa architecture will do)"},
    )


@register_criterion("spanbert_masked_lm", dataclass=SpanBertMaskedLMCriterionConfig)
class SpanBertMaskedLMLoss(SummedCriterion):
    def __init__(self, cfg: SpanBertMaskedLMCriterionConfig, task):
        super().__init__(task)
        self.sbo_weight = cfg.sbo_weight

    def forward(self, model, sample, reduce=True):
        masked = sample["target"].ne(self.padding_idx)  # [B, T]
        sample_size = masked.sum()
        extra_args = {}
        if self.sbo_weight > 0:
            if "span_boundary" not in getattr(model, "classification_heads", {}):
                raise ValueError(
                    "criterion spanbert_masked_lm with --sbo-weight > 0 needs a model with the "
                    "span boundary head (--arch roberta_spanbert_base, roberta_spanbert_large "
                    "or roberta_spanbert); use --sbo-weight 0 to train the masked LM alone")
            extra_args["span_boundary"] = True
        logits, extra = model(**sample["net_input"], masked_tokens=masked, **extra_args)
        targets = sample["target"][masked]  # [N]
        mlm = modules.cross_entropy(logits.view(-1, logits.size(-1)), targets, reduction="sum")
        loss = mlm
        logging_output = {
            "mlm_loss": mlm.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
        }
        if extra_args:
            sbo = modules.cross_entropy(extra["sbo_logits"], targets, reduction="sum")
            loss = mlm + self.sbo_weight * sbo
            logging_output["sbo_loss"] = sbo.data
        logging_output["loss"] = loss.data
        return loss, sample_size, logging_output

    @staticmethod
    def log_metrics(total, sample_size, logging_outputs) -> None:
        for key in ("mlm_loss", "sbo_loss"):
            if any(key in log for log in logging_outputs):
                metrics.log_scalar(key, total(key) / max(sample_size, 1) / math.log(2),
                                   sample_size, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["mlm_loss"].avg))
