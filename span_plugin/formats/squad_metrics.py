"""The official SQuAD scores: exact match and token F1 (v1.1 and v2.0 evaluation scripts'
definitions), written here.

- normalize: lower case, drop ``string.punctuation``, drop the whole words a/an/the,
  collapse whitespace; EM: the normalized strings are equal; F1: overlap F1 of the
  normalized whitespace tokens (multiset intersection); the score of a question is the
  maximum over its gold answers.
- version "2.0" (the v2.0 script): gold answers that normalize to nothing are dropped,
  an unanswerable question's golds are ``[""]``, and F1 is EM when either token list is
  empty. Version "1.1" (the v1.1 script, also the MRQA one): every gold answer counts
  and F1 is 0 when either token list is empty. :func:`squad_scores` takes "2.0" when
  any question is impossible, else "1.1".
- reused question ids, as each script counts them (:func:`scored_questions`): v1.1
  scores every question of the file with the one prediction of its id; v2.0 keeps the
  last occurrence of each id.
"""

import re
import string
from collections import Counter

VERSIONS = ("1.1", "2.0")
_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text):
    """Lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _version(version):
    if version not in VERSIONS:
        raise ValueError(f"version {version!r}: expected one of {VERSIONS}")
    return version


def exact_match(prediction, gold):
    """1.0 when the normalized strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction, gold, version="2.0"):
    """Token-overlap F1 of the normalized answers, in [0, 1]."""
    pred = normalize_answer(prediction).split()
    ref = normalize_answer(gold).split()
    if _version(version) == "2.0" and (not pred or not ref):
        return float(pred == ref)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def score_answer(prediction, golds, version="2.0"):
    """(EM, F1) of one prediction: the maximum over ``golds`` (``[]``: unanswerable)."""
    golds = list(golds)
    if _version(version) == "2.0":
        golds = [g for g in golds if normalize_answer(g)]
    if not golds:
        golds = [""]
    return (max(exact_match(prediction, g) for g in golds),
            max(f1_score(prediction, g, version) for g in golds))


def gold_texts(example):
    """The gold answer texts of a QAExample: ``[""]`` when impossible, MRQA's accepted
    answers when given, else the texts of its answers, placed or not (each once, in
    order: the official scripts read every answer's text and never its offset)."""
    if example.impossible:
        return [""]
    texts = list(getattr(example, "accepted", None) or (
        [t for t, _ in example.answers] + [t for t, _ in getattr(example, "unplaced", ())]))
    return list(dict.fromkeys(texts))


def scored_questions(examples, version):
    """The questions the official script of ``version`` scores, in order: v1.1 every
    question of the file (it looks each one's prediction up by id, so a reused id is
    scored at every occurrence); v2.0 the last occurrence of each id (it keys its
    scores by id, so a later occurrence replaces an earlier one)."""
    if _version(version) == "1.1":
        return list(examples)
    last = {ex.id: k for k, ex in enumerate(examples)}
    return [ex for k, ex in enumerate(examples) if last[ex.id] == k]


def _check(predictions, examples, version, what="predictions"):
    """The version to score with (None: "2.0" when any question is impossible)."""
    if not examples:
        raise ValueError("no examples to score")
    known = {ex.id for ex in examples}
    unknown = [k for k in predictions if k not in known]
    if unknown:
        raise ValueError(f"{len(unknown)} {what} for question ids not among the "
                         f"examples, such as {unknown[:3]}")
    if version is None:
        version = "2.0" if any(ex.impossible for ex in examples) else "1.1"
    return _version(version)


def _scores(predictions, questions, version):
    """``[(em, f1) or None]``: each question's scores, None without a prediction."""
    out = []
    for ex in questions:
        if ex.id not in predictions:
            out.append(None)
            continue
        pred = predictions[ex.id]
        if not isinstance(pred, str):
            raise ValueError(f"prediction for {ex.id!r} is {pred!r}, expected a string")
        out.append(score_answer(pred, gold_texts(ex), version))
    return out


def squad_scores(predictions, examples, version=None):
    """The official summary, in percent: ``exact_match``, ``f1``, ``total``, ``missing``
    (questions without a prediction, scored 0) and, when any question is impossible,
    ``HasAns_*`` and ``NoAns_*`` (``_exact``, ``_f1``, ``_total``) of each group present.

    predictions: {question id: answer text} ("" predicts no answer); examples: the
    :class:`QAExample` of a file, in its order, reused ids included (counted as
    :func:`scored_questions` says). version: None (auto), "1.1" or "2.0".
    """
    version = _check(predictions, examples, version)
    questions = scored_questions(examples, version)
    scores = _scores(predictions, questions, version)

    def summary(group, prefix, exact_key):
        got = [scores[k] or (0.0, 0.0) for k in group]
        n = len(group)
        return {f"{prefix}{exact_key}": 100.0 * sum(s[0] for s in got) / n,
                f"{prefix}f1": 100.0 * sum(s[1] for s in got) / n, f"{prefix}total": n}

    out = summary(range(len(questions)), "", "exact_match")
    out["missing"] = sum(s is None for s in scores)
    if any(ex.impossible for ex in questions):
        for prefix, impossible in (("HasAns_", False), ("NoAns_", True)):
            group = [k for k, ex in enumerate(questions) if ex.impossible == impossible]
            if group:
                out.update(summary(group, prefix, "exact"))
    return out


def best_null_threshold(predictions, null_margins, examples, version=None):
    """The no-answer threshold that maximizes F1 (the v2.0 script's best_f1_thresh).

    A question's answer is "" when its ``null_margins[id]`` (null score minus the best
    span's score) is above the threshold, else ``predictions[id]``. Returns
    ``(threshold, exact, f1)``: EM and F1 in percent at that threshold, equal to
    :func:`squad_scores` of the thresholded predictions (missing predictions score 0;
    the questions counted as :func:`scored_questions` says). Questions of equal margin
    switch together; of equally good thresholds the lowest is taken. The
    all-no-answer threshold is 0.0 when every margin is positive (as the official
    script reports it), else one below the lowest margin.
    """
    version = _check(predictions, examples, version)
    _check(null_margins, examples, version, "null margins")
    lacking = [k for k in predictions if k not in null_margins]
    if lacking:
        raise ValueError(f"{len(lacking)} predictions without a null margin, such as "
                         f"{lacking[:3]}")
    questions = [ex for ex in scored_questions(examples, version) if ex.id in predictions]
    answered = _scores(predictions, questions, version)
    null = [score_answer("", gold_texts(ex), version) for ex in questions]
    f1 = sum(s[1] for s in null)
    gain = {}  # F1 gained by answering instead of "", per id (all its occurrences)
    for ex, a, n in zip(questions, answered, null):
        gain[ex.id] = gain.get(ex.id, 0.0) + a[1] - n[1]
    margins = {k: null_margins[k] for k in gain}
    lowest = min(margins.values(), default=0.0)
    best_thresh, best_f1 = (0.0 if lowest > 0.0 else lowest - 1.0), f1
    order = sorted(margins, key=margins.get)
    for i, qid in enumerate(order):
        f1 += gain[qid]
        if i + 1 < len(order) and margins[order[i + 1]] == margins[qid]:
            continue  # the whole group of this margin switches at once
        if f1 > best_f1 + 1e-9:  # a running sum: no gain from rounding alone
            best_thresh, best_f1 = margins[qid], f1
    final = {k: "" if null_margins[k] > best_thresh else p for k, p in predictions.items()}
    scores = squad_scores(final, examples, version)
    return best_thresh, scores["exact_match"], scores["f1"]
