"""A weak phrase aligner for paraphrase sentence pairs (``span-preprocess align-pairs``):
phrase pairs (paraphrase, in-paraphrase and random negatives) from MRPC / STS-B
paraphrase rows by a word diff; :func:`align_file` is the entry point,
:func:`identity_rule` scores the "identical strings -> paraphrase" rule on a file.
Aligner version :data:`ALIGNER_VERSION`; the rule, step by step: docs/SPAN_PAIRS.md,
"The weak aligner"."""

import difflib
import json
import random
import statistics
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Optional

from span_plugin.tokenizers import words as W
from span_plugin.files.atomic import atomic_file
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_file_lines
from span_plugin.formats.pairs import read_pair_rows
from span_plugin.preprocess.segmentation.ngrams import load_ngrams
from span_plugin.preprocess.segmentation.segment import Segmenter

ALIGNER_VERSION = 2
MAX_PHRASE_WORDS = 4
PARAPHRASE, RANDOM, IN_PARAPHRASE = "paraphrase", "random", "in-paraphrase"
PARAPHRASE_ROW, RANDOM_ROW = "1", "0"  # sentence labels of the written rows


@dataclass
class AlignStats:
    paraphrase_rows: int = 0
    excluded_rows: int = 0
    random_rows: int = 0
    classes: Counter = field(default_factory=Counter)
    identical: int = 0
    one_word: int = 0
    digit_gaps: int = 0  # replace blocks left out for holding a digit
    long_gaps: int = 0  # replace blocks left out for a side over MAX_PHRASE_WORDS words
    pairs_per_row: list = field(default_factory=list)
    source_words: list = field(default_factory=list)
    rule: "IdentityRule" = None
    holdout: "AlignStats" = None

    def report(self):
        pos = self.classes[PARAPHRASE]
        per = self.pairs_per_row or [0]
        lens = self.source_words or [0]
        lines = [
            f"rows: {self.paraphrase_rows} paraphrase pairs, {self.random_rows} random partners"
            + (f" ({self.excluded_rows} paraphrase pairs dropped: they share a sentence with "
               f"an excluded file)" if self.excluded_rows else ""),
            "phrase pairs: " + ", ".join(f"{k} {v}" for k, v in sorted(self.classes.items())),
            f"positives: {100.0 * self.identical / max(pos, 1):.1f}% identical strings, "
            f"{100.0 * self.one_word / max(pos, 1):.1f}% one word on both sides; gaps left "
            f"out: {self.digit_gaps} holding a digit, {self.long_gaps} over "
            f"{MAX_PHRASE_WORDS} words",
            f"pairs per paraphrase row: mean {statistics.fmean(per):.2f}, max {max(per)}, "
            f"rows with none {sum(1 for p in per if p == 0)}",
            f"source phrase words: mean {statistics.fmean(lens):.2f}, max {max(lens)}",
        ]
        if self.rule is not None:
            lines.append(self.rule.describe())
        if self.holdout is not None:
            lines += ["held out:"] + ["  " + line for line in self.holdout.report().splitlines()]
        return "\n".join(lines)


def read_paraphrases(path, source="auto", min_score=4.0):
    """(sentence1, sentence2) of the paraphrase rows of a GLUE MRPC or STS-B TSV."""
    lines = read_file_lines(path)
    if not lines:
        raise BadInputError(f"{path}:1: empty file")
    header = lines[0].split("\t")
    if source == "auto":
        source = "mrpc" if "Quality" in header else "stsb" if "score" in header else None
        if source is None:
            raise BadInputError(f"{path}:1: neither an MRPC (Quality) nor an STS-B (score) "
                                f"header: {header}")
    cols = ({"a": "#1 String", "b": "#2 String", "y": "Quality"} if source == "mrpc"
            else {"a": "sentence1", "b": "sentence2", "y": "score"})
    try:
        idx = {k: header.index(v) for k, v in cols.items()}
    except ValueError as err:
        raise BadInputError(f"{path}:1: {err} (header {header})") from None
    out = []
    for lineno, line in enumerate(lines[1:], 2):
        f = line.split("\t")
        if len(f) <= max(idx.values()):
            raise BadInputError(f"{path}:{lineno}: {len(f)} fields, expected at least "
                                f"{max(idx.values()) + 1}")
        y = f[idx["y"]]
        keep = y == "1" if source == "mrpc" else float(y) >= min_score
        if keep:
            out.append((f[idx["a"]].strip(), f[idx["b"]].strip()))
    return out


TEXT_COLUMNS = ("#1 String", "#2 String", "sentence1", "sentence2", "sentence",
                "question1", "question2", "question")


def normalise(sentence):
    """A sentence's comparison key: lower-cased letters and digits only."""
    return "".join(c for c in sentence.lower() if c.isalnum())


def sentences_of(path):
    """Normalised sentences of every text column (:data:`TEXT_COLUMNS`) of a TSV file
    with a header, such as any GLUE split."""
    lines = read_file_lines(path)
    header = lines[0].split("\t") if lines else []
    cols = [i for i, name in enumerate(header) if name in TEXT_COLUMNS]
    if not cols:
        raise BadInputError(f"{path}:1: no text column ({', '.join(TEXT_COLUMNS)}) in the "
                            f"header {header}")
    out = set()
    for line in lines[1:]:
        fields = line.split("\t")
        out.update(normalise(fields[i]) for i in cols if i < len(fields))
    out.discard("")
    return out


class _Sentence:
    """Words of one sentence: character ranges, case-folded keys, which hold a letter or
    digit; spans are word ranges ``(first, last + 1)``."""

    def __init__(self, text, scheme, segmenter=None):
        self.text = text
        self.chars, self.keys = W.word_ranges(text, scheme)
        self.keys = [k.strip() for k in self.keys]
        self.wordlike = [any(c.isalnum() for c in k) for k in self.keys]
        self.segments = []
        if segmenter is not None and self.keys:
            i = 0
            for n in segmenter(self.keys, text):
                self.segments.append((i, i + n))
                i += n

    def key(self, span):
        return tuple(self.keys[span[0]:span[1]])

    def char_range(self, span):
        return [self.chars[span[0]][0], self.chars[span[1] - 1][1]]

    def has_digit(self, span):
        return any(c.isdigit() for k in self.keys[span[0]:span[1]] for c in k)


def _trim(sent, lo, hi):
    """The word range [lo, hi) without punctuation-only words at either end."""
    while lo < hi and not sent.wordlike[lo]:
        lo += 1
    while hi > lo and not sent.wordlike[hi - 1]:
        hi -= 1
    return lo, hi


def diff_blocks(s, t):
    """The diff of two sentences' keys, in order: ``(op, (i1, i2), (j1, j2))`` with op
    ``equal`` (an anchor), ``replace`` (differing spans on both sides), ``insert`` or
    ``delete`` (a span on one side only); equal blocks and the others alternate."""
    matcher = difflib.SequenceMatcher(None, s.keys, t.keys, autojunk=False)
    return [(op, (i1, i2), (j1, j2)) for op, i1, i2, j1, j2 in matcher.get_opcodes()]


def _anchor(s, block):
    """An anchor a gap may lean on: an equal block holding a word with a letter or digit
    (a lone comma or quote matches too easily)."""
    return block[0] == "equal" and any(s.wordlike[block[1][0]:block[1][1]])


def gap_positives(s, t, blocks, stats=None):
    """Paraphrase pairs of one sentence pair: the replace blocks with an anchor on both
    sides, trimmed, 1-MAX_PHRASE_WORDS words a side, no digit; list of (source span,
    target span)."""
    out = []
    for k, (op, (i1, i2), (j1, j2)) in enumerate(blocks):
        if op != "replace" or not (0 < k < len(blocks) - 1 and _anchor(s, blocks[k - 1])
                                   and _anchor(s, blocks[k + 1])):
            continue
        a, b = _trim(s, i1, i2), _trim(t, j1, j2)
        if a[0] == a[1] or b[0] == b[1]:
            continue
        if not (a[1] - a[0] <= MAX_PHRASE_WORDS and b[1] - b[0] <= MAX_PHRASE_WORDS):
            if stats is not None:
                stats.long_gaps += 1
            continue
        if s.has_digit(a) or t.has_digit(b):
            if stats is not None:
                stats.digit_gaps += 1
            continue
        if s.key(a) != t.key(b):  # always so after a diff; kept as the rule itself
            out.append((a, b))
    return out


def identical_positives(s, t, blocks):
    """Identical pairs (``keep_identical``): the source segments inside an anchor with a
    letter or digit, each with the same words of the target."""
    out = []
    for op, (i1, i2), (j1, _) in blocks:
        if op != "equal":
            continue
        for a, b in s.segments:
            if i1 <= a and b <= i2 and any(s.wordlike[a:b]):
                out.append(((a, b), (j1 + a - i1, j1 + b - i1)))
    return out


def _windows(sent, n, avoid):
    """Word windows of ``n`` words starting and ending on a word with a letter or digit,
    not overlapping the span ``avoid`` (None: anywhere)."""
    return [(i, i + n) for i in range(len(sent.keys) - n + 1)
            if sent.wordlike[i] and sent.wordlike[i + n - 1]
            and (avoid is None or i + n <= avoid[0] or i >= avoid[1])]


def pick_window(rng, sent, n, source_key, avoid=None, prefer=()):
    """A window for a negative: ``n`` words (else the nearest other length with one, the
    shorter first), not the source phrase's own string; among them the first non-empty
    set of ``prefer`` (predicates on a span), else any. None when the sentence has none."""
    lengths = sorted(range(1, MAX_PHRASE_WORDS + 1), key=lambda m: (abs(m - n), m))
    for m in lengths:
        found = [w for w in _windows(sent, m, avoid) if sent.key(w) != source_key]
        if found:
            for keep in prefer:
                kept = [w for w in found if keep(w)]
                if kept:
                    return rng.choice(kept)
            return rng.choice(found)
    return None


def align_pair(s, t, rng, require_overlap=False, keep_identical=False, stats=None):
    """Phrase pairs of one paraphrase pair: list of (source span, target span, label)."""
    blocks = diff_blocks(s, t)
    positives = gap_positives(s, t, blocks, stats)
    if keep_identical:
        positives += identical_positives(s, t, blocks)
    positives.sort()
    source_words = set(s.keys)
    out = [(a, b, PARAPHRASE) for a, b in positives]
    for a, b in positives:
        prefer = [lambda w: bool(set(s.key(a)) & set(t.key(w)))] if require_overlap else []
        prefer.append(lambda w: not set(t.key(w)) <= source_words)
        w = pick_window(rng, t, b[1] - b[0], s.key(a), avoid=b, prefer=prefer)
        if w is not None:
            out.append((a, w, IN_PARAPHRASE))
    return out


def paraphrase_rows(path, source="auto", min_score=4.0, exclude=()):
    """The paraphrase rows of ``path`` without those sharing a sentence with a file of
    ``exclude``: (rows, number dropped)."""
    rows = read_paraphrases(path, source, min_score)
    banned = set().union(*(sentences_of(p) for p in exclude))
    kept = [(a, b) for a, b in rows if normalise(a) not in banned and normalise(b) not in banned]
    return kept, len(rows) - len(kept)


@dataclass(frozen=True)
class AlignSettings:
    """How the aligner pairs phrases. words: the word scheme of the encoder that will
    read the file (and of the n-gram dictionary ``ngrams``; None: the packaged one);
    random_ratio: random partner rows per paraphrase row; seed: of the one
    ``random.Random`` everything is drawn from; require_overlap: prefer in-paraphrase
    windows that share a word with the source phrase; keep_identical: also keep the
    identical segments of the anchors as paraphrase pairs."""

    words: str = "gpt2"
    ngrams: Optional[str] = None
    random_ratio: float = 0.5
    seed: int = 1
    require_overlap: bool = False
    keep_identical: bool = False


def align_rows(rows, out_path, settings=AlignSettings(), where=None):
    """Write the phrase pairs of the paraphrase ``rows`` ((sentence1, sentence2) pairs)
    and their random partners to ``out_path`` as ``settings`` (:class:`AlignSettings`)
    say; returns :class:`AlignStats`."""
    if len(rows) < 2:
        raise BadInputError(f"{where or out_path}: {len(rows)} paraphrase rows; need at "
                            f"least 2 (random partners pair two rows)")
    rng = random.Random(settings.seed)
    words, keep_identical = settings.words, settings.keep_identical
    segmenter = (Segmenter(load_ngrams(settings.ngrams, words=words), segmentation="greedy")
                 if keep_identical else None)
    sents = [(_Sentence(a, words, segmenter), _Sentence(b, words, segmenter)) for a, b in rows]
    stats = AlignStats()
    positives_of = []
    with atomic_file(out_path, text=True) as f:  # whole or absent
        def write(s, t, label, pairs):
            f.write(json.dumps({"sentence1": s.text, "sentence2": t.text, "label": label,
                                "phrases": [{"source": s.char_range(a), "target": t.char_range(b),
                                             "label": y} for a, b, y in pairs]},
                               ensure_ascii=False) + "\n")
            for a, b, y in pairs:
                stats.classes[y] += 1

        for s, t in sents:
            pairs = align_pair(s, t, rng, settings.require_overlap, keep_identical, stats)
            pos = [(a, b) for a, b, y in pairs if y == PARAPHRASE]
            positives_of.append(pos)
            stats.identical += sum(s.key(a) == t.key(b) for a, b in pos)
            stats.one_word += sum(a[1] - a[0] == 1 and b[1] - b[0] == 1 for a, b in pos)
            stats.pairs_per_row.append(len(pairs))
            stats.source_words += [a[1] - a[0] for a, _ in pos]
            write(s, t, PARAPHRASE_ROW, pairs)
            stats.paraphrase_rows += 1
        for _ in range(int(round(settings.random_ratio * len(sents)))):
            i = rng.randrange(len(sents))
            j = rng.randrange(len(sents) - 1)
            j += j >= i  # another pair's sentence 2
            s, t = sents[i][0], sents[j][1]
            pairs = []
            for a, b in positives_of[i]:
                w = pick_window(rng, t, b[1] - b[0], s.key(a))
                if w is not None:
                    pairs.append((a, w, RANDOM))
            write(s, t, RANDOM_ROW, pairs)
            stats.random_rows += 1
    stats.rule = identity_rule(out_path)
    return stats


def align_file(path, out_path, settings=AlignSettings(), *, source="auto", min_score=4.0,
               exclude=(), holdout=0, holdout_path=None):
    """Write the JSON Lines file of :mod:`span_plugin.preprocess.folders.pairs` from the
    paraphrase rows of ``path`` (``source``: "mrpc", "stsb" or "auto"; STS-B rows scored
    ``min_score`` or more), without those sharing a sentence with the files ``exclude``,
    aligned as ``settings`` (:class:`AlignSettings`) say; ``holdout`` > 0: the last
    ``holdout`` rows left go to ``holdout_path`` instead (aligned on their own, seed +
    1). Returns :class:`AlignStats` (the held-out file's in ``.holdout``)."""
    rows, excluded = paraphrase_rows(path, source, min_score, exclude)
    where = (f"{path}: after dropping {excluded} paraphrase rows that share a sentence with "
             f"{', '.join(map(str, exclude))} (EXCLUDE / --exclude-sentences-of takes the "
             f"target task's dev and test files; a file's own split drops all of its rows)"
             if exclude else str(path))
    held = None
    if holdout:
        if holdout_path is None:
            raise ValueError("holdout needs holdout_path")
        if len(rows) - holdout < 2:
            raise BadInputError(f"{where}: {len(rows)} paraphrase rows, too few to hold out "
                                f"{holdout} and train on the rest")
        rows, kept = rows[:-holdout], rows[-holdout:]
        held = align_rows(kept, holdout_path, replace(settings, seed=settings.seed + 1),
                          where=f"{where} (held out)")
    stats = align_rows(rows, out_path, settings, where=where)
    stats.excluded_rows = excluded
    stats.holdout = held
    return stats


# ----------------------------------------------------------------------------------
# How far string identity gets on a phrase-pair file


@dataclass
class IdentityRule:
    """The rule "identical strings -> paraphrase; random partner row -> random; else
    in-paraphrase" on a phrase-pair file: per gold class, pairs and how many it got."""
    counts: Counter = field(default_factory=Counter)
    correct: Counter = field(default_factory=Counter)
    identical: int = 0  # pairs whose two phrases are the same string

    @property
    def total(self):
        return sum(self.counts.values())

    @property
    def accuracy(self):
        return 100.0 * sum(self.correct.values()) / max(self.total, 1)

    def as_dict(self):
        return {"accuracy": round(self.accuracy, 2), "pairs": self.total,
                "identical": self.identical, "classes": dict(sorted(self.counts.items())),
                "correct": dict(sorted(self.correct.items()))}

    def describe(self):
        per = ", ".join(f"{k} {self.correct[k]}/{n}" for k, n in sorted(self.counts.items()))
        return (f"identity rule (identical -> paraphrase; random partner -> random; else "
                f"in-paraphrase): {self.accuracy:.1f}% of {self.total} phrase pairs ({per})")


def same_string(a, b):
    """Two phrases are identical: equal after case-folding and collapsing whitespace."""
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


def identity_rule(path, label_column="label", random_label=RANDOM_ROW,
                  text_columns=("sentence1", "sentence2")):
    """Score the identity rule (:class:`IdentityRule`) on a phrase-pair JSON Lines file
    (docs/SPAN_PAIRS.md, section 1, labels ``paraphrase random in-paraphrase``): a
    phrase pair is guessed ``paraphrase`` when its two phrases are the same string,
    else ``random`` in a row whose sentence label is ``random_label``, else
    ``in-paraphrase``."""
    labels = (PARAPHRASE, RANDOM, IN_PARAPHRASE)
    rule = IdentityRule()
    for row in read_pair_rows(path, text_columns, label_column, phrase_labels=labels):
        for source, target, y in row.phrases:
            same = same_string(row.texts[0][source[0]:source[1]],
                               row.texts[1][target[0]:target[1]])
            rule.identical += same
            guess = PARAPHRASE if same else RANDOM if row.label == random_label else IN_PARAPHRASE
            rule.counts[labels[y]] += 1
            rule.correct[labels[y]] += guess == labels[y]
    return rule
