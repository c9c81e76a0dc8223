"""Answers of questions from the score grids ``scores [N, T, A]`` of their windows (every
QA head; :func:`decode_answers`, :func:`answers_of_batch`): each window's best
candidates mapped to characters of the context, merged per question, the ``n_best`` kept
with softmax probabilities, and "" when the no-answer margin is above the threshold.
Answer boundaries ``"word"`` or ``"token"``, and why words: docs/QA.md, section
"Module notes"."""

import functools
import math
import unicodedata

import torch
import torch.nn.functional as F

from span_plugin.formats.unicode_text import trim_invisible

ANSWER_BOUNDARIES = ("word", "token")

# CJK ideographs: each is a word (as BERT's BasicTokenizer splits them), since the text
# around them has no separators.
_CJK = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2A6DF),
        (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0x2F800, 0x2FA1F))


@functools.lru_cache(maxsize=None)
def is_word_char(char):
    """Whether ``char`` continues a word: a letter, digit or combining mark that is not
    a CJK ideograph."""
    if unicodedata.category(char)[0] not in "LNM":
        return False
    code = ord(char)
    return not any(lo <= code <= hi for lo, hi in _CJK)


def word_boundaries(text):
    """``bytes`` of ``len(text) + 1``: 1 where an answer may start or end (between
    two characters that are not both inside one word, or at either end)."""
    inside = [is_word_char(c) for c in text]
    return bytes([1] + [int(not (a and b)) for a, b in zip(inside, inside[1:])] + [1])


def cuts_word(text, start, end):
    """``(starts inside a word, ends inside a word)`` of the answer ``text[start:end]``."""
    def inside(p):
        return 0 < p < len(text) and is_word_char(text[p - 1]) and is_word_char(text[p])

    return inside(start), inside(end)


def word_aligned(offsets, question, contexts, length, max_answer_tokens):
    """BoolTensor ``[N, length, A]``: candidate ``(t, t + w)`` of window n begins and ends
    on word boundaries of its question's context. offsets ``[N, T, 2]`` (-1 outside the
    passage; a score grid may be longer, ``length >= T``), question ``[N]``."""
    bounds = [torch.tensor(list(word_boundaries(c)), dtype=torch.bool) for c in contexts]
    base = torch.tensor([0] + [len(b) for b in bounds[:-1]]).cumsum(0)  # each context's first
    flat = torch.cat(bounds)
    offsets = offsets.cpu()
    inside = offsets[..., 0] >= 0
    where = base[question.cpu()].view(-1, 1, 1) + offsets.clamp(min=0)  # [N, T, 2]
    begins = F.pad(inside & flat[where[..., 0]], (0, length - inside.size(1)), value=False)
    ends = F.pad(inside & flat[where[..., 1]], (0, length - inside.size(1) + max_answer_tokens - 1),
                 value=False)
    return begins.unsqueeze(-1) & ends.unfold(1, max_answer_tokens, 1)


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


def _window_candidates(scores, question, offsets, contexts, top_k, boundaries):
    """The candidates of each window (:func:`top_candidates`), word-aligned ones only
    for ``boundaries="word"``, except in the windows of a question none of whose
    candidates is word-aligned (module docstring)."""
    if boundaries not in ANSWER_BOUNDARIES:
        raise ValueError(f"answer boundaries {boundaries!r}: expected one of {ANSWER_BOUNDARIES}")
    if boundaries == "token":
        return top_candidates(scores, top_k)
    allowed = word_aligned(offsets, question, contexts, scores.size(1), scores.size(2))
    allowed = allowed.to(scores.device)
    windows = top_candidates(scores.masked_fill(~allowed, float("-inf")), top_k)
    answered = {q for w, q in enumerate(question.tolist()) if windows[w]}
    fallback = [w for w, q in enumerate(question.tolist()) if q not in answered]
    if fallback:
        for w, found in zip(fallback, top_candidates(scores[fallback], top_k)):
            windows[w] = found
    return windows


def decode_answers(scores, null, question, offsets, contexts, n_best=20, null_threshold=None,
                   boundaries="word"):
    """Answers of B questions from their N windows.

    scores ``[N, T, A]``, null ``[N]``: the head's output; question ``[N]``: the question
    (0..B-1) of each window; offsets ``[N, T, 2]``: characters of each passage token in
    its context (-1 elsewhere); contexts: the B context strings.
    null_threshold: None never answers "" (SQuAD 1.1); a number answers "" when
    ``null_margin > null_threshold``. boundaries: "word" or "token" (module docstring).
    Returns B dicts: ``text``, ``start``, ``end`` (characters, end exclusive; -1 for
    none), ``score``, ``null_margin``, ``nbest`` (list of dicts text, start, end, score,
    probability).
    """
    windows = _window_candidates(scores, question, offsets, contexts, n_best, boundaries)
    offsets = offsets.tolist()
    nulls = null.float().tolist()
    found = [dict() for _ in contexts]  # (char start, char end) -> best score
    null_score = [math.inf] * len(contexts)
    for w, q in enumerate(question.tolist()):
        null_score[q] = min(null_score[q], nulls[w])
        for score, i, j in windows[w]:
            # a token's characters may begin with a zero-width space or a control: an
            # answer never does (nor ends with one)
            key = trim_invisible(contexts[q], offsets[w][i][0], offsets[w][j][1])
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


def answers_of_batch(output, question, offsets, contexts, n_best=20, null_threshold=None,
                     boundaries="word"):
    """:func:`decode_answers` of a head's output dict (``scores``, ``null``)."""
    with torch.no_grad():
        return decode_answers(output["scores"], output["null"], question, offsets, contexts,
                              n_best, null_threshold, boundaries)
