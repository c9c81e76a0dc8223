"""Answers of questions from the score grids of their windows (both QA heads).

For each window the ``top_k`` best candidates of ``scores [N, T, A]`` (the grid of
:mod:`span_plugin.modules.qa_heads`) are mapped to characters of the context; the
candidates of all windows of a question are merged (an answer seen in two overlapping
windows keeps its best score) and the ``n_best`` best kept, with probabilities from a
softmax over them (as BERT's n-best file). The no-answer score of a question is its
lowest window no-answer score (BERT's SQuAD 2.0 rule); ``null_margin`` = that minus the
best answer's score, and the answer is "" when it is above the threshold.
"""

import math

import torch


def top_candidates(scores, top_k):
    """Best ``top_k`` finite entries per window: lists (one per window) of
    ``(score, start position, last position)``."""
    n, length, a = scores.shape
    flat = scores.reshape(n, -1)
    k = min(top_k, flat.size(1))
    values, index = flat.float().topk(k, dim=1)
    out = []
    for row_v, row_i in zip(values.tolist(), index.tolist()):
        out.append([(v, i // a, i // a + i % a) for v, i in zip(row_v, row_i)
                    if v != float("-inf")])
    return out


def decode_answers(scores, null, question, offsets, contexts, n_best=20, null_threshold=None):
    """Answers of B questions from their N windows.

    scores ``[N, T, A]``, null ``[N]``: the head's output; question ``[N]``: the question
    (0..B-1) of each window; offsets ``[N, T, 2]``: characters of each passage token in
    its context (-1 elsewhere); contexts: the B context strings.
    null_threshold: None never answers "" (SQuAD 1.1); a number answers "" when
    ``null_margin > null_threshold``.
    Returns B dicts: ``text``, ``start``, ``end`` (characters, end exclusive; -1 for
    none), ``score``, ``null_margin``, ``nbest`` (list of dicts text, start, end, score,
    probability).
    """
    windows = top_candidates(scores, n_best)
    offsets = offsets.tolist()
    nulls = null.float().tolist()
    found = [dict() for _ in contexts]  # (char start, char end) -> best score
    null_score = [math.inf] * len(contexts)
    for w, q in enumerate(question.tolist()):
        null_score[q] = min(null_score[q], nulls[w])
        for score, i, j in windows[w]:
            key = (offsets[w][i][0], offsets[w][j][1])
            if score > found[q].get(key, -math.inf):
                found[q][key] = score
    out = []
    for q, context in enumerate(contexts):
        ranked = sorted(found[q].items(), key=lambda kv: -kv[1])[:n_best]
        top = max((s for _, s in ranked), default=0.0)
        z = sum(math.exp(s - top) for _, s in ranked)
        nbest = [{"text": context[a:b], "start": a, "end": b, "score": s,
                  "probability": math.exp(s - top) / z} for (a, b), s in ranked]
        margin = null_score[q] - top if ranked else math.inf
        best = nbest[0] if nbest else {"text": "", "start": -1, "end": -1, "score": -math.inf}
        if null_threshold is not None and margin > null_threshold:
            best = {"text": "", "start": -1, "end": -1, "score": null_score[q]}
        out.append({"text": best["text"], "start": best["start"], "end": best["end"],
                    "score": best["score"], "null_margin": margin, "nbest": nbest})
    return out


def answers_of_batch(output, question, offsets, contexts, n_best=20, null_threshold=None):
    """:func:`decode_answers` of a head's output dict (``scores``, ``null``)."""
    with torch.no_grad():
        return decode_answers(output["scores"], output["null"], question, offsets, contexts,
                              n_best, null_threshold)
