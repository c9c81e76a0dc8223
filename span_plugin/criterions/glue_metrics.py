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


def mcc_tensor(cm):
    """Matthews correlation of a confusion matrix ``[C, C]`` (rows: true class; a
    tensor or array) as a float64 tensor on its device: the multi-class formula of
    sklearn, 0 when undefined. Tensor ops only, so a device never waits on it."""
    cm = torch.as_tensor(cm).to(torch.float64)
    s = cm.sum()
    t = cm.sum(1)  # true counts per class
    p = cm.sum(0)  # predicted counts per class
    cov_ytyp = cm.trace() * s - t @ p
    denominator = (s * s - p @ p) * (s * s - t @ t)
    return torch.where(denominator > 0, cov_ytyp / denominator.clamp(min=1e-300).sqrt(), 0.0)


def f1_tensor(cm, positive=1):
    """F1 of class ``positive`` from a confusion matrix ``[C, C]`` as a float64
    tensor; 0 when undefined."""
    cm = torch.as_tensor(cm).to(torch.float64)
    tp = cm[positive, positive]
    denominator = cm[:, positive].sum() + cm[positive, :].sum()  # 2 tp + fp + fn
    return torch.where(denominator > 0, 2 * tp / denominator.clamp(min=1), 0.0)


def mcc(cm):
    """:func:`mcc_tensor` as a float."""
    return float(mcc_tensor(cm))


def f1(cm, positive=1):
    """:func:`f1_tensor` as a float."""
    return float(f1_tensor(cm, positive))


def moment_sums(x, y):
    """Sums for Pearson's r of FloatTensors ``[N]``: dict of float64 tensors on their
    device (summed over batches and workers as they are)."""
    x = x.double()
    y = y.double()
    return {
        "n": x.new_tensor(float(x.numel())),
        "x": x.sum(),
        "y": y.sum(),
        "xx": (x * x).sum(),
        "yy": (y * y).sum(),
        "xy": (x * y).sum(),
    }


def pearson_tensor(s):
    """Pearson's r from :func:`moment_sums` (summed; tensors or numbers) as a float64
    tensor; 0 when undefined."""
    s = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in s.items()}
    n = s["n"].clamp(min=1)
    cov = s["xy"] - s["x"] * s["y"] / n
    vx = s["xx"] - s["x"] ** 2 / n
    vy = s["yy"] - s["y"] ** 2 / n
    defined = (s["n"] >= 2) & (vx > 0) & (vy > 0)
    return torch.where(defined, cov / (vx * vy).clamp(min=1e-300).sqrt(), 0.0)


def pearson_from_sums(s):
    """:func:`pearson_tensor` as a float."""
    return float(pearson_tensor(s))


def spearman(preds, targets):
    """Spearman's rho of two arrays ``[N]``; 0 when undefined."""
    if len(preds) < 2:
        return 0.0
    rho = spearmanr(preds, targets)[0]
    return 0.0 if np.isnan(rho) else float(rho)
