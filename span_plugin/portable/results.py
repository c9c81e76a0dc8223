"""Predictions from a head's output (labels and scores, entities, decoding settings), as
every predictor gives them, and the check that no output is NaN or +inf."""

import torch
import torch.nn.functional as F

from span_plugin.modules import entities as ner
from span_plugin.modules.tag_decoding import TOKEN_DECODINGS


class NotFiniteError(ValueError):
    """A model's output holds values that are not numbers: no label is made of it."""


def _tensors(output):
    if torch.is_tensor(output):
        yield output
    elif isinstance(output, (tuple, list)):
        for item in output:
            yield from _tensors(item)
    elif isinstance(output, dict):
        for item in output.values():
            yield from _tensors(item)


def finite_outputs(output, head):
    """``output`` (a head's tensor, or tuples and dicts of them) when it holds no NaN and
    no +inf (-inf is a masked score: QA's impossible spans); else a
    :class:`NotFiniteError` naming the head: a label or answer made of such values would
    mean nothing."""
    for t in _tensors(output):
        if t.is_floating_point() and bool((torch.isnan(t) | torch.isposinf(t)).any()):
            what = "NaN" if bool(torch.isnan(t).any()) else "inf"
            raise NotFiniteError(
                f"head {head!r} gave outputs that are not finite numbers ({what}) for a "
                f"batch of {t.shape[0] if t.dim() else 1}: its weights, or these inputs in "
                f"this precision, overflow; nothing is predicted from them")
    return output


def _finite_rows(scores, what):
    bad = (~torch.isfinite(scores)).view(scores.shape[0], -1).any(-1).nonzero()
    if len(bad):
        raise NotFiniteError(f"example {int(bad[0])}: the model's {what} are not finite "
                             f"numbers ({scores[int(bad[0])].tolist()}); no label is made of "
                             f"them")


def class_results(logits, names, regression):
    """Sentence predictions of logits ``[N, C]``: ``[{"score": x}]`` (regression, C = 1)
    or ``[{"label": name, "probs": {name: p}}]``."""
    if regression:
        _finite_rows(logits, "scores")
        return [{"score": float(x)} for x in logits[:, 0]]
    probs = F.softmax(logits, dim=-1)
    _finite_rows(probs, "class probabilities")
    return [{"label": names[int(p.argmax())], "probs": dict(zip(names, map(float, p)))}
            for p in probs]


def scored(names, logits):
    """``{"label": best name, "scores": {name: probability}}`` of logits ``[C]``."""
    p = F.softmax(logits.float(), dim=-1).cpu()
    _finite_rows(p[None], "class probabilities")
    return {"label": names[int(p.argmax())], "scores": dict(zip(names, map(float, p)))}


def decoding_settings(kind, default_token_decoding, token_decoding=None, overlap=None,
                      span_threshold=None):
    """The decoding of a tagging model (``kind`` "span_tagging": ``{"token_decoding"}``,
    its default the checkpoint's) or a span-labeling one (``{"overlap",
    "span_threshold"}``) with the settings given; a setting of the other kind is an
    error."""
    if kind == "span_labeling":
        if token_decoding is not None:
            raise ValueError(f"token decoding (--token-decoding {token_decoding}) applies "
                             f"to span_tagging checkpoints; this one is span_labeling "
                             f"(--overlap, --span-threshold)")
        overlap = overlap or "flat"
        ner.check_span_output(overlap, span_threshold)
        if overlap == "nested" and span_threshold is None:
            span_threshold = ner.DEFAULT_SPAN_THRESHOLD
        return {"overlap": overlap, "span_threshold": span_threshold}
    if overlap not in (None, "flat") or span_threshold is not None:
        raise ValueError("--overlap and --span-threshold apply to span_labeling "
                         "checkpoints; this one is span_tagging (--token-decoding)")
    token_decoding = token_decoding or default_token_decoding
    if token_decoding not in TOKEN_DECODINGS:
        raise ValueError(f"token decoding {token_decoding!r}: expected one of "
                         f"{TOKEN_DECODINGS}")
    return {"token_decoding": token_decoding}
