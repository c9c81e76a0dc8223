"""Entity P/R/F1 with CoNLL semantics equals seqeval's (default mode) on real CoNLL-2003
tag sequences, and stays exact when summed over batches and workers."""

import random

import pytest
from fairseq.logging import metrics

from conftest import DATA
from span_plugin.modules import entities as ner
from span_plugin.formats import tags as T
from span_plugin.criterions.ner import SpanTaggingCriterion
from span_plugin.formats.conll import read_conll

seqeval = pytest.importorskip("seqeval.metrics")


def noisy(tags, rng):
    """Model-like errors on real gold tags: wrong type, a B- read as I- (ill-formed after
    O), boundaries moved, spurious and missed entities, BIOES-style stray tags."""
    out = list(tags)
    kinds = ["PER", "LOC", "ORG", "MISC"]
    for i, tag in enumerate(out):
        r = rng.random()
        if r < 0.05 and tag != "O":
            out[i] = tag[:2] + rng.choice(kinds)
        elif r < 0.08 and tag.startswith("B-"):
            out[i] = "I-" + tag[2:]
        elif r < 0.11:
            out[i] = rng.choice(["O", "B-" + rng.choice(kinds), "I-" + rng.choice(kinds)])
    return out


@pytest.fixture(scope="module")
def dev_pairs():
    gold = [s.tags for s in read_conll(str(DATA / "conll2003" / "valid.txt")).sentences]
    rng = random.Random(0)
    return gold, [noisy(g, rng) for g in gold]


def test_entities_follow_conlleval_chunking(dev_pairs):
    from seqeval.metrics.sequence_labeling import get_entities

    for seq in dev_pairs[1][:800] + [["I-PER", "I-PER", "B-LOC", "I-ORG", "O", "I-ORG"]]:
        ours = sorted((k, s, e - 1) for s, e, k in T.entities(seq))
        assert ours == sorted(get_entities(seq))


def test_f1_equals_seqeval_on_real_dev_tags(dev_pairs):
    gold, pred = dev_pairs
    counts = ner.match_counts([T.entities(p) for p in pred], [T.entities(g) for g in gold])
    p, r, f = ner.prf(*counts)
    assert counts[2] == 5942  # CoNLL-2003 dev entities
    assert p == pytest.approx(seqeval.precision_score(gold, pred), abs=1e-12)
    assert r == pytest.approx(seqeval.recall_score(gold, pred), abs=1e-12)
    assert f == pytest.approx(seqeval.f1_score(gold, pred), abs=1e-12)
    assert 0.5 < f < 0.95  # the noise leaves a realistic score


def test_counts_summed_over_batches_and_workers_are_exact(dev_pairs):
    gold, pred = dev_pairs
    rng = random.Random(1)
    logs, i = [], 0
    while i < len(gold):  # uneven batches, as several workers would log them
        n = rng.randint(1, 64)
        tp, npred, ngold = ner.match_counts([T.entities(p) for p in pred[i:i + n]],
                                            [T.entities(g) for g in gold[i:i + n]])
        logs.append({"loss": 1.0, "sample_size": n, "_ent_tp": tp, "_ent_pred": npred,
                     "_ent_gold": ngold})
        i += n
    with metrics.aggregate() as agg:
        SpanTaggingCriterion.reduce_metrics(logs[::2])  # worker 0
        SpanTaggingCriterion.reduce_metrics(logs[1::2])  # worker 1
        values = agg.get_smoothed_values()
    assert values["f1"] == round(100 * seqeval.f1_score(gold, pred), 2)
    assert values["precision"] == round(100 * seqeval.precision_score(gold, pred), 2)
    assert values["recall"] == round(100 * seqeval.recall_score(gold, pred), 2)
