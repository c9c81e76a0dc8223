"""The accuracy guard's metrics as sums over examples, and how sure a drop is.

Each metric the guard reports is a function of per-example counts summed over the
examples (:data:`FORMULAS`): accuracy of (correct, 1); F1 of the positive class of (true
positive, predicted positive, gold positive); MCC of the confusion cells; Pearson of
(x, y, x², y², xy, 1); entity F1 of each sentence's (matched, predicted, gold); SQuAD F1
of each question's (F1, 1); phrase accuracy of each example's (correct, phrases). So a
resample of the examples is a weighted sum, and the paired bootstrap of the drop
(float32's metric minus int8's on the same resample) is two ``[R, N] x [N, K]`` products:
:func:`drop_interval`.

Why it is reported: a weak QA model's int8 graph changed about a fifth of its 600
answers, and the drop's 95% interval spanned 3.7 points around its estimate; a 0.5-point
threshold judged on the estimate alone judges noise (benchmarks/RESULTS.md).
"""

import numpy as np

RESAMPLES = 1000
SEED = 0  # the same resamples every run: a record can be recomputed
CELLS = 1 << 22  # resample weights held at once (a dev set of 40,000 rows: 104 resamples)


def _ratio(num, den):
    return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


def _f1(s):
    return 100 * _ratio(2 * s[..., 0], s[..., 1] + s[..., 2])


def _share(s):
    return 100 * _ratio(s[..., 0], s[..., 1])


def _pearson(s):
    x, y, xx, yy, xy, n = (s[..., k] for k in range(6))
    den = (n * xx - x * x) * (n * yy - y * y)
    return 100 * _ratio(n * xy - x * y, np.sqrt(np.maximum(den, 0)))


def _mcc(s):
    labels = int(round(np.sqrt(s.shape[-1])))
    cm = s.reshape(*s.shape[:-1], labels, labels)  # [..., gold, predicted]
    t, p = cm.sum(-1), cm.sum(-2)
    c, n = np.trace(cm, axis1=-2, axis2=-1), cm.sum((-2, -1))
    den = np.maximum(n * n - (p * p).sum(-1), 0) * np.maximum(n * n - (t * t).sum(-1), 0)
    return 100 * _ratio(c * n - (t * p).sum(-1), np.sqrt(den))


# metric name -> points from summed counts [..., K]
FORMULAS = {"accuracy": _share, "f1": _f1, "mcc": _mcc, "pearson": _pearson,
            "entity f1": _f1, "squad f1": _share, "phrase accuracy": _share}


def labels_counts(predicted, gold, name, positive=None, labels=()):
    """Per-example counts ``[N, K]`` of a classification or regression metric ``name``
    ("accuracy", "f1" of class ``positive``, "mcc" over ``labels`` (and whatever else
    occurs: give the model's classes so that two predictions' cells line up), "pearson"
    of float scores)."""
    if name == "pearson":
        x, y = np.asarray(predicted, dtype=np.float64), np.asarray(gold, dtype=np.float64)
        return np.stack([x, y, x * x, y * y, x * y, np.ones_like(x)], axis=1)
    if name == "f1":
        pred = np.asarray([p == positive for p in predicted], dtype=np.float64)
        true = np.asarray([g == positive for g in gold], dtype=np.float64)
        return np.stack([pred * true, pred, true], axis=1)
    if name == "mcc":
        labels = sorted(set(labels) | set(predicted) | set(gold))
        index = {x: i for i, x in enumerate(labels)}
        cells = np.zeros((len(gold), len(labels) ** 2))
        cells[np.arange(len(gold)), [index[g] * len(labels) + index[p]
                                     for p, g in zip(predicted, gold)]] = 1
        return cells
    return np.asarray([[p == g, 1] for p, g in zip(predicted, gold)], dtype=np.float64)


def points(name, counts):
    """The metric ``name`` of per-example ``counts`` ``[N, K]``, in points."""
    return float(FORMULAS[name](counts.sum(0)))


def drop_interval(name, fp32_counts, int8_counts, level=95.0):
    """``[low, high]``: the central ``level``% of float32's metric minus int8's over
    :data:`RESAMPLES` paired resamples of the examples (the same examples drawn for
    both), rounded to 0.01 point."""
    n = len(fp32_counts)
    if fp32_counts.shape != int8_counts.shape or n == 0:
        raise ValueError(f"{name}: counts of {fp32_counts.shape} and {int8_counts.shape} "
                         f"examples are not one paired sample")
    formula = FORMULAS[name]
    drops = np.concatenate([formula(w @ fp32_counts) - formula(w @ int8_counts)
                            for w in resample_weights(n)])
    tail = (100 - level) / 2
    low, high = np.percentile(drops, [tail, 100 - tail])
    return [round(float(low), 2), round(float(high), 2)]


def resample_weights(n):
    """The :data:`RESAMPLES` bootstrap resamples of ``n`` examples, as how many times
    each is drawn (``[r, n]`` arrays, a few at a time so that a large split stays
    within :data:`CELLS`), seeded with :data:`SEED`."""
    rng = np.random.default_rng(SEED)
    step = max(1, CELLS // n)
    for start in range(0, RESAMPLES, step):
        yield rng.multinomial(n, np.full(n, 1 / n), size=min(step, RESAMPLES - start))
