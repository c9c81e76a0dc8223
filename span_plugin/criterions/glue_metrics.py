"""GLUE metrics from statistics that can be summed over batches and workers.

Confusion counts give accuracy, F1 and Matthews correlation exactly; the moment sums
(n, x, y, xx, yy, xy) give Pearson's r. Spearman's rho needs the ranks of the whole
set and is computed from the gathered predictions.
"""

import numpy as np
import torch
from scipy.stats import spearmanr

MOMENT_KEYS = ("n", "x", "y", "xx", "yy", "xy")


def label_names(dictionary):
    """The labels of a fairseq label dictionary, without specials and padding words."""
    return [s for s in dictionary.symbols[dictionary.nspecial:] if not s.startswith("madeupword")]


def positive_class(dictionary, name, source):
    """Index among the classes of label ``name`` (None stays None); an unknown label is
    an error naming ``source``, where the name came from."""
    if name is None:
        return None
    idx = dictionary.index(name)
    if idx == dictionary.unk():
        raise ValueError(f"positive label {name!r} (from {source}) is not a label of this "
                         f"task (labels: {label_names(dictionary)})")
    return idx - dictionary.nspecial


def confusion_counts(preds, targets, num_classes):
    """LongTensor ``[C, C]``: cell (i, j) counts examples of true class i predicted j.

    preds, targets: LongTensor ``[N]`` of class indices in ``[0, C)``.
    """
    flat = targets.long() * num_classes + preds.long()
    return torch.bincount(flat, minlength=num_classes * num_classes).view(num_classes, num_classes)


def mcc(cm):
    """Matthews correlation of a confusion matrix ``[C, C]`` (rows: true class);
    the multi-class formula of sklearn, 0 when undefined."""
    cm = np.asarray(cm, dtype=np.float64)
    s = cm.sum()
    c = np.trace(cm)
    t = cm.sum(axis=1)  # true counts per class
    p = cm.sum(axis=0)  # predicted counts per class
    cov_ytyp = c * s - np.dot(t, p)
    cov_ypyp = s * s - np.dot(p, p)
    cov_ytyt = s * s - np.dot(t, t)
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return float(cov_ytyp / np.sqrt(cov_ytyt * cov_ypyp))


def f1(cm, positive=1):
    """F1 of class ``positive`` from a confusion matrix ``[C, C]``; 0 when undefined."""
    cm = np.asarray(cm, dtype=np.float64)
    tp = cm[positive, positive]
    fp = cm[:, positive].sum() - tp
    fn = cm[positive, :].sum() - tp
    denom = 2 * tp + fp + fn
    return float(2 * tp / denom) if denom > 0 else 0.0


def moment_sums(x, y):
    """Sums for Pearson's r of FloatTensors ``[N]``: dict of python floats."""
    x = x.double()
    y = y.double()
    return {
        "n": float(x.numel()),
        "x": float(x.sum()),
        "y": float(y.sum()),
        "xx": float((x * x).sum()),
        "yy": float((y * y).sum()),
        "xy": float((x * y).sum()),
    }


def pearson_from_sums(s):
    """Pearson's r from :func:`moment_sums` (summed); 0 when undefined."""
    n = s["n"]
    if n < 2:
        return 0.0
    cov = s["xy"] - s["x"] * s["y"] / n
    vx = s["xx"] - s["x"] ** 2 / n
    vy = s["yy"] - s["y"] ** 2 / n
    if vx <= 0 or vy <= 0:
        return 0.0
    return float(cov / np.sqrt(vx * vy))


def spearman(preds, targets):
    """Spearman's rho of two arrays ``[N]``; 0 when undefined."""
    if len(preds) < 2:
        return 0.0
    rho = spearmanr(preds, targets)[0]
    return 0.0 if np.isnan(rho) else float(rho)
