"""A weak phrase aligner for paraphrase sentence pairs (``span-preprocess align-pairs``).

No phrase-alignment corpus is on these machines, so phrase pairs are made from real
paraphrase pairs (MRPC train rows labelled 1, STS-B train rows scored >= 4) by string
matching. It is a weak aligner: users with better alignments write them in the same
JSON Lines format (docs/SPAN_PAIRS.md) and skip this step.

Per paraphrase pair (words are those of the encoder's word scheme, ``words``: GPT-2
pre-token words, or BERT pre-tokens for WordPiece; every phrase then starts and ends at
a word boundary of that encoder, so ``span-preprocess pairs`` can map it to tokens):

1. each sentence is segmented by the n-gram segmenter (greedy longest match);
2. anchors: segments whose lower-cased words occur exactly once as a segment in each
   sentence, kept in order on both sides (a later anchor must lie to the right of the
   previous one in both), punctuation-only segments left out;
3. gap positives: the words between two consecutive anchors (or an anchor and the
   sentence's start or end), 1-4 words on each side and
   not identical after lower-casing (non-identical paraphrases, so a classifier cannot
   win by string identity alone);
4. in-paraphrase negatives: for each positive, a segment of the target sentence that
   does not overlap the aligned target (``require_overlap``: that shares a word with the
   source phrase, when one exists);
5. random partners: ``random_ratio`` x (paraphrase pairs) extra rows, sentence 1 of one
   pair with sentence 2 of another (sentence label ``0``); their phrase pairs are the
   random negatives: each positive source phrase of sentence 1 against a random segment
   of the partner (so every phrase pair stays inside its own sentence pair).

Everything is drawn from one ``random.Random(seed)``: the same input and seed give the
same file.

``exclude``: paraphrase rows that share a sentence with these files (GLUE TSVs: the
target task's dev and test files) are dropped before anything is drawn, with case,
spaces and punctuation ignored, so that transfer data cannot leak a target's evaluation
sentences (STS-B's MSRpar genre comes from the MRPC corpus).
"""

import json
import random
import statistics
from collections import Counter
from dataclasses import dataclass, field

from span_plugin.tokenizers import words as W
from span_plugin.formats.lines import BadInputError, read_file_lines
from span_plugin.preprocess.ngrams import load_ngrams
from span_plugin.preprocess.segment import Segmenter

MAX_GAP_WORDS = 4


@dataclass
class AlignStats:
    paraphrase_rows: int = 0
    excluded_rows: int = 0
    random_rows: int = 0
    classes: Counter = field(default_factory=Counter)
    identical: int = 0
    one_word: int = 0
    pairs_per_row: list = field(default_factory=list)
    source_words: list = field(default_factory=list)

    def report(self):
        pos = self.classes["paraphrase"]
        per = self.pairs_per_row or [0]
        lens = self.source_words or [0]
        return "\n".join([
            f"rows: {self.paraphrase_rows} paraphrase pairs, {self.random_rows} random partners"
            + (f" ({self.excluded_rows} paraphrase pairs dropped: they share a sentence with "
               f"an excluded file)" if self.excluded_rows else ""),
            "phrase pairs: " + ", ".join(f"{k} {v}" for k, v in sorted(self.classes.items())),
            f"positives: {100.0 * self.identical / max(pos, 1):.1f}% identical strings, "
            f"{100.0 * self.one_word / max(pos, 1):.1f}% one word on both sides",
            f"pairs per paraphrase row: mean {statistics.fmean(per):.2f}, max {max(per)}, "
            f"rows with none {sum(1 for p in per if p == 0)}",
            f"source phrase words: mean {statistics.fmean(lens):.2f}, max {max(lens)}",
        ])


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


def word_ranges(text, scheme):
    """(start, end) character ranges of the words of ``text`` and their match keys, in
    the word scheme ``scheme`` (:data:`span_plugin.tokenizers.words.WORD_SCHEMES`)."""
    if scheme == "gpt2":
        found = [(m.start(), m.end()) for m in W._WORD_RE.finditer(text) if m.end() > m.start()]
        return found, W.match_keys([text[a:b] for a, b in found])
    if scheme == "bert":
        # Cut the raw text: whitespace and punctuation cuts are cuts of the normalised
        # text too, so each word ends where a WordPiece token ends.
        found = [span for _, span in W._bert_parts()[1].pre_tokenize_str(text)]
        return found, W.bert_keys([text[a:b] for a, b in found])
    raise ValueError(f"word scheme {scheme!r}: expected one of {W.WORD_SCHEMES}")


class _Sentence:
    """Words with character ranges and the segments (word ranges) of one sentence."""

    def __init__(self, text, segmenter, scheme):
        self.text = text
        self.chars, self.keys = word_ranges(text, scheme)
        self.segments, i = [], 0
        for n in segmenter(self.keys, text) if self.keys else []:
            self.segments.append((i, i + n))
            i += n

    def key(self, seg):
        return tuple(self.keys[seg[0]:seg[1]])

    def char_range(self, seg):
        return [self.chars[seg[0]][0], self.chars[seg[1] - 1][1]]

    def is_word_segment(self, seg):
        return any(any(c.isalnum() for c in k) for k in self.key(seg))


def _anchors(s, t):
    """In-order unique exact segment matches: list of (source seg, target seg)."""
    def unique(sent):
        count = Counter(sent.key(g) for g in sent.segments)
        return {sent.key(g): g for g in sent.segments
                if count[sent.key(g)] == 1 and sent.is_word_segment(g)}

    us, ut = unique(s), unique(t)
    out, last = [], -1
    for g in s.segments:
        k = s.key(g)
        if k in us and k in ut and ut[k][0] > last:
            out.append((g, ut[k]))
            last = ut[k][0]
    return out


def align_pair(s, t, rng, require_overlap=False):
    """Phrase pairs of one paraphrase pair: list of (source seg, target seg, label)."""
    anchors = _anchors(s, t)
    positives = list(anchors)
    # Sentence edges act as anchors too, so the words before the first and after the
    # last anchor are gaps as well.
    bounds = ([((0, 0), (0, 0))] + anchors
              + [((len(s.keys),) * 2, (len(t.keys),) * 2)]) if anchors else []
    for (sa, ta), (sb, tb) in zip(bounds, bounds[1:]):
        gs, gt = (sa[1], sb[0]), (ta[1], tb[0])
        ns, nt = gs[1] - gs[0], gt[1] - gt[0]
        if 1 <= ns <= MAX_GAP_WORDS and 1 <= nt <= MAX_GAP_WORDS and s.key(gs) != t.key(gt) \
                and s.is_word_segment(gs) and t.is_word_segment(gt):
            positives.append((gs, gt))
    positives.sort()
    out = [(a, b, "paraphrase") for a, b in positives]
    for a, b in positives:
        others = [g for g in t.segments if (g[1] <= b[0] or g[0] >= b[1]) and t.is_word_segment(g)]
        if require_overlap:
            words = set(s.key(a))
            shared = [g for g in others if words & set(t.key(g))]
            others = shared or others
        if others:
            out.append((a, rng.choice(others), "in-paraphrase"))
    return out


def align_file(path, out_path, source="auto", ngrams=None, random_ratio=0.5, seed=1,
               require_overlap=False, min_score=4.0, exclude=(), words="gpt2"):
    """Write the JSON Lines file of :mod:`span_plugin.preprocess.pairs` from the
    paraphrase rows of ``path``, without those sharing a sentence with the files
    ``exclude``; ``words``: the word scheme of the encoder that will read the file (and
    of the n-gram dictionary); returns :class:`AlignStats`."""
    rng = random.Random(seed)
    segmenter = Segmenter(load_ngrams(ngrams, words=words), method="greedy")
    rows = read_paraphrases(path, source, min_score)
    banned = set().union(*(sentences_of(p) for p in exclude))
    kept = [(a, b) for a, b in rows if normalise(a) not in banned and normalise(b) not in banned]
    excluded, rows = len(rows) - len(kept), kept
    if len(rows) < 2:
        raise BadInputError(f"{path}: {len(rows)} paraphrase rows; need at least 2")
    sents = [(_Sentence(a, segmenter, words), _Sentence(b, segmenter, words)) for a, b in rows]
    stats = AlignStats(excluded_rows=excluded)
    positives_of = []
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        def write(s, t, label, pairs):
            f.write(json.dumps({"sentence1": s.text, "sentence2": t.text, "label": label,
                                "phrases": [{"source": s.char_range(a), "target": t.char_range(b),
                                             "label": y} for a, b, y in pairs]},
                               ensure_ascii=False) + "\n")
            for a, b, y in pairs:
                stats.classes[y] += 1

        for s, t in sents:
            pairs = align_pair(s, t, rng, require_overlap)
            pos = [(a, b) for a, b, y in pairs if y == "paraphrase"]
            positives_of.append([a for a, _ in pos])
            stats.identical += sum(s.key(a) == t.key(b) for a, b in pos)
            stats.one_word += sum(a[1] - a[0] == 1 and b[1] - b[0] == 1 for a, b in pos)
            stats.pairs_per_row.append(len(pairs))
            stats.source_words += [a[1] - a[0] for a, _ in pos]
            write(s, t, "1", pairs)
            stats.paraphrase_rows += 1
        for _ in range(int(round(random_ratio * len(sents)))):
            i = rng.randrange(len(sents))
            j = rng.randrange(len(sents) - 1)
            j += j >= i  # another pair's sentence 2
            s, t = sents[i][0], sents[j][1]
            words = [g for g in t.segments if t.is_word_segment(g)]
            pairs = [(a, rng.choice(words), "random") for a in positives_of[i]] if words else []
            write(s, t, "0", pairs)
            stats.random_rows += 1
    return stats
