"""GLUE metrics of the span_classification criterion: equal to sklearn/scipy, and
exact when logging outputs are summed over simulated workers and batches."""

import numpy as np
import pytest
import torch
import torch.nn as nn
from fairseq.data import Dictionary
from fairseq.logging import metrics
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef

from span_plugin.runtime.data_record import STATE_KEY
from span_plugin.criterions import glue_metrics
from span_plugin.criterions.span_pair_classification import (
    SpanPairClassificationCriterion, SpanPairCriterionConfig)
from span_plugin.criterions.span_classification import (
    SpanClassificationCriterion,
    SpanClassificationCriterionConfig,
)


def test_confusion_metrics_match_sklearn():
    rng = np.random.default_rng(0)
    for c in (2, 3):
        y = rng.integers(0, c, 300)
        p = np.where(rng.random(300) < 0.6, y, rng.integers(0, c, 300))
        cm = glue_metrics.confusion_counts(torch.tensor(p), torch.tensor(y), c).numpy()
        assert cm.sum() == 300 and cm[1, 0] == ((y == 1) & (p == 0)).sum()
        assert glue_metrics.mcc(cm) == pytest.approx(matthews_corrcoef(y, p))
        if c == 2:
            assert glue_metrics.f1(cm) == pytest.approx(f1_score(y, p))
    assert glue_metrics.mcc(np.array([[5, 0], [0, 0]])) == 0.0  # undefined -> 0 (sklearn too)
    assert glue_metrics.f1(np.zeros((2, 2))) == 0.0


def test_correlations_match_scipy():
    rng = np.random.default_rng(1)
    y = rng.random(200) * 5
    x = y + rng.normal(0, 1, 200)
    sums = glue_metrics.moment_sums(torch.tensor(x), torch.tensor(y))
    assert glue_metrics.pearson_from_sums(sums) == pytest.approx(pearsonr(x, y)[0], abs=1e-9)
    assert glue_metrics.spearman(x, y) == pytest.approx(spearmanr(x, y)[0])


class _Task:
    def __init__(self, num_classes, labels):
        self.cfg = type("Cfg", (), {"num_classes": num_classes})()
        self.datasets = {"valid": range(200)}
        self.label_dictionary = Dictionary()
        for name in labels:
            self.label_dictionary.add_symbol(name)


class _Model(nn.Module):
    """Returns the logits it is given in net_input (no encoder)."""

    def __init__(self):
        super().__init__()
        self.classification_heads = {"sentence_classification_head": None}

    def forward(self, logits, **kwargs):
        return logits, None

    def get_targets(self, sample, net_output):
        return sample["target"]


def _criterion(num_classes, labels, regression=False, positive="1"):
    cfg = SpanClassificationCriterionConfig(regression_target=regression,
                                            positive_label=positive if num_classes == 2 else None)
    return SpanClassificationCriterion(cfg, _Task(num_classes, labels))


def _run(criterion, batches, workers):
    """Logging outputs of each batch, summed per worker as fairseq's fast path does
    (or concatenated, when the criterion says they cannot be summed), then reduced.
    workers=0: reduce each batch on its own in one aggregation, as fairseq's
    validation loop does."""
    model = _Model().eval()
    logs = [criterion(model, b)[2] for b in batches]
    if workers == 0:
        with metrics.aggregate(new_root=True) as agg:
            for log in logs:
                SpanClassificationCriterion.reduce_metrics([log])
            return agg.get_smoothed_values()
    per_worker = [logs[w::workers] for w in range(workers)]
    if criterion.logging_outputs_can_be_summed():
        gathered = [{k: sum(log[k] for log in ws) for k in ws[0]} for ws in per_worker]
        gathered = [{k: sum(g[k] for g in gathered) for k in gathered[0]}]
    else:
        gathered = [log for ws in per_worker for log in ws]
    with metrics.aggregate(new_root=True) as agg:
        SpanClassificationCriterion.reduce_metrics(gathered)
        return agg.get_smoothed_values()


def _batches(logits, targets, size):
    return [
        {"net_input": {"logits": logits[i : i + size]}, "target": targets[i : i + size],
         "id": torch.arange(i, min(i + size, len(targets))),
         "ntokens": 10 * len(targets[i : i + size])}
        for i in range(0, len(targets), size)
    ]


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_binary_metrics_summed_over_workers(workers):
    # The label dictionary lists "0" first: F1 must still count label "1" as positive.
    crit = _criterion(2, ["0", "1"])
    assert crit.positive == 1
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(97, 2, generator=g)
    y = torch.randint(0, 2, (97,), generator=g)
    stats = _run(crit, _batches(logits, y, 10), workers)
    p = logits.argmax(-1).numpy()
    assert stats["accuracy"] == pytest.approx(100 * (p == y.numpy()).mean(), abs=0.01)
    assert stats["f1"] == pytest.approx(100 * f1_score(y.numpy(), p), abs=0.01)
    assert stats["mcc"] == pytest.approx(100 * matthews_corrcoef(y.numpy(), p), abs=0.01)


def test_f1_positive_label_when_it_is_not_index_1():
    crit = _criterion(2, ["1", "0"])  # index 0 is label "1"
    assert crit.positive == 0
    logits = torch.tensor([[5.0, 0.0], [5.0, 0.0], [0.0, 5.0], [0.0, 5.0], [5.0, 0.0]])
    y = torch.tensor([0, 1, 1, 1, 0])  # indices: 0 = "1", 1 = "0"
    stats = _run(crit, _batches(logits, y, 2), 2)
    truth = (y == 0).long().numpy()  # 1 where the label is "1"
    pred = (logits.argmax(-1) == 0).long().numpy()
    assert stats["f1"] == pytest.approx(100 * f1_score(truth, pred), abs=0.01)


def test_multiclass_mcc_and_no_f1():
    crit = _criterion(3, ["a", "b", "c"])
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(60, 3, generator=g)
    y = torch.randint(0, 3, (60,), generator=g)
    stats = _run(crit, _batches(logits, y, 7), 2)
    assert "f1" not in stats
    assert stats["mcc"] == pytest.approx(100 * matthews_corrcoef(y.numpy(), logits.argmax(-1).numpy()), abs=0.01)


@pytest.mark.parametrize("workers", [0, 1, 4])
def test_regression_metrics_over_workers(workers):
    crit = _criterion(1, [], regression=True)
    assert crit.logging_outputs_can_be_summed()  # Spearman too: vectors indexed by id
    g = torch.Generator().manual_seed(3)
    y = torch.rand(83, generator=g)
    x = y + 0.3 * torch.randn(83, generator=g)
    stats = _run(crit, _batches(x.view(-1, 1), y, 9), workers)
    assert stats["pearson"] == pytest.approx(100 * pearsonr(x, y)[0], abs=0.01)
    assert stats["spearman"] == pytest.approx(100 * spearmanr(x, y)[0], abs=0.01)
    assert "accuracy" not in stats


def test_unknown_positive_label_is_an_error():
    cfg = SpanClassificationCriterionConfig(positive_label="yes")
    with pytest.raises(ValueError, match=r"positive label 'yes' \(from --positive-label\) is "
                                         r"not a label of this task \(labels: \['0', '1'\]\)"):
        SpanClassificationCriterion(cfg, _Task(2, ["0", "1"]))


def test_binary_labels_without_a_known_positive_report_no_f1(caplog):
    """Word labels (RTE's) and no positive label named: the run goes on with accuracy
    and mcc, and says that f1 is not reported."""
    crit = _criterion(2, ["not_entailment", "entailment"], positive=None)
    assert crit.positive is None
    assert "f1 is not reported" in caplog.text and "--positive-label" in caplog.text
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(40, 2, generator=g)
    y = torch.randint(0, 2, (40,), generator=g)
    stats = _run(crit, _batches(logits, y, 8), 2)
    assert "f1" not in stats
    assert stats["mcc"] == pytest.approx(100 * matthews_corrcoef(y.numpy(), logits.argmax(-1).numpy()), abs=0.01)
    # Named, a word label works like any other.
    named = _criterion(2, ["not_entailment", "entailment"], positive="entailment")
    assert named.positive == 1 and "f1" in _run(named, _batches(logits, y, 8), 2)


def test_best_checkpoint_metric_that_validation_did_not_report_is_explained():
    """fairseq-train would stop with a bare KeyError: 'f1' after its first validation."""
    import fairseq_cli.train as train
    from omegaconf import OmegaConf

    from span_plugin.runtime import compat

    compat.explain_missing_best_metric()  # as when the plugin loads inside fairseq-train
    cfg = OmegaConf.create({"checkpoint": {"best_checkpoint_metric": "f1",
                                           "maximize_best_checkpoint_metric": True}})
    trainer = type("T", (), {"get_num_updates": lambda self: 3})()
    with pytest.raises(ValueError, match=r"--best-checkpoint-metric f1: validation reported no "
                                         r"'f1' \(it reported: accuracy, loss, mcc\)\. f1 needs "
                                         r"the positive label: pass --positive-label NAME"):
        train.get_valid_stats(cfg, trainer, {"loss": 1.0, "accuracy": 50.0, "mcc": 0.0}, True)
    stats = train.get_valid_stats(cfg, trainer, {"loss": 1.0, "f1": 40.0}, False)
    assert stats["num_updates"] == 3


class _PairTask:
    """What the span-pair criterion reads of its task: weights, labels, the record."""

    def __init__(self, labels, positive):
        self.cfg = type("Cfg", (), {"phrasal_weight": 0.0, "sentential_weight": 1.0,
                                    "data": None})()
        self.label_dictionary = Dictionary()
        for name in labels:
            self.label_dictionary.add_symbol(name)
        record = {"labels": {"positive": positive}}
        self.state = type("State", (), {"state_dict": {STATE_KEY: record}})()


class _PairModel(nn.Module):
    def forward(self, logits, **kwargs):
        return {"sentential": logits}, None


@pytest.mark.parametrize("labels", [["0", "1"], ["1", "0"]])
def test_sentential_f1_of_the_recorded_positive_label_over_workers(labels):
    crit = SpanPairClassificationCriterion(SpanPairCriterionConfig(), _PairTask(labels, "1"))
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(53, 2, generator=g)
    y = torch.randint(0, 2, (53,), generator=g)
    logs = [crit(_PairModel(), {"net_input": {"logits": logits[i:i + 8]}, "target": y[i:i + 8],
                                "nsentences": len(y[i:i + 8]), "ntokens": 1})[2]
            for i in range(0, 53, 8)]
    per_worker = [{k: sum(log[k] for log in logs[w::2]) for k in logs[0]} for w in range(2)]
    with metrics.aggregate(new_root=True) as agg:
        SpanPairClassificationCriterion.reduce_metrics(per_worker)
        stats = agg.get_smoothed_values()
    positive = labels.index("1")
    truth = (y == positive).long().numpy()
    pred = (logits.argmax(-1) == positive).long().numpy()
    assert stats["sentential_f1"] == pytest.approx(100 * f1_score(truth, pred), abs=0.01)
    assert stats["sentential_accuracy"] == pytest.approx(
        100 * (logits.argmax(-1) == y).float().mean().item(), abs=0.01)


def test_sentential_f1_needs_a_known_positive_label():
    crit = SpanPairClassificationCriterion(SpanPairCriterionConfig(), _PairTask(["a", "b"], None))
    assert crit.positive is None
    with pytest.raises(ValueError, match="positive label 'yes' .from the record of None. is "
                                         "not a label"):
        SpanPairClassificationCriterion(SpanPairCriterionConfig(), _PairTask(["a", "b"], "yes"))
