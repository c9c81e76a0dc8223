"""The weak aligner (version 2): positives are the differing spans between
two anchors, never identical strings; the three classes on real MRPC and STS-B training
pairs; the identity rule ("identical -> paraphrase; random partner -> random; else
in-paraphrase") recomputed here from the files; hold-out and exclusion errors."""

import json
import re

import pytest

from conftest import GLUE
from span_plugin.files.errors import BadInputError
from span_plugin.preprocess.folders.align import (MAX_PHRASE_WORDS, AlignSettings, align_file,
                                                  identity_rule)
from span_plugin.tokenizers.words import word_ranges

HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"


def mrpc_file(path, pairs):
    path.write_text(HEADER + "".join(f"1\t{i}\t{i + 100}\t{a}\t{b}\n"
                                     for i, (a, b) in enumerate(pairs)), encoding="utf-8")
    return path


def phrases(path):
    """Every phrase pair of a written file: (row index, sentence label, source text,
    target text, label, source range, target range)."""
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        row = json.loads(line)
        for p in row["phrases"]:
            out.append((i, row["label"], row["sentence1"][slice(*p["source"])],
                        row["sentence2"][slice(*p["target"])], p["label"],
                        tuple(p["source"]), tuple(p["target"])))
    return out


def rule_by_hand(path):
    """The identity rule, from the file alone: (correct, total)."""
    correct = total = 0
    for _, sentence_label, a, b, label, _, _ in phrases(path):
        guess = ("paraphrase" if a.lower() == b.lower()
                 else "random" if sentence_label == "0" else "in-paraphrase")
        correct += guess == label
        total += 1
    return correct, total


def test_positives_are_the_differing_spans_between_anchors(tmp_path):
    src = mrpc_file(tmp_path / "train.tsv", [
        # two gaps between anchors: company/firm, rose/increased
        ("The company said profits rose sharply last year .",
         "The firm said profits increased sharply last year ."),
        # a gap at the sentence start has no anchor before it: no pair
        ("Yesterday the court ruled against him .", "On Monday the court ruled against him ."),
        # numbers that differ are another fact, not a paraphrase
        ("Shares rose 5 percent on Friday .", "Shares rose 6 percent on Friday ."),
        # 1 word against 7: over the length bound
        ("He said the deal was signed .",
         "He told reporters in a brief statement that the deal was signed ."),
    ])
    out = tmp_path / "pairs.jsonl"
    stats = align_file(src, out, AlignSettings(seed=1, words="bert"))
    found = phrases(out)
    positives = {(a, b) for i, _, a, b, y, _, _ in found if y == "paraphrase"}
    assert positives == {("company", "firm"), ("rose", "increased")}
    assert {i for i, *_, y, _, _ in found if y == "paraphrase"} == {0}
    assert (stats.digit_gaps, stats.long_gaps, stats.identical) == (1, 1, 0)
    # One in-paraphrase negative per positive: the same source phrase, another window of
    # the same target sentence of the positive's length, not overlapping it, not the
    # source's own string.
    aligned = {a: t for i, _, a, _, y, _, t in found if y == "paraphrase"}
    negatives = [(a, b, t) for i, _, a, b, y, _, t in found if y == "in-paraphrase"]
    assert sorted(a for a, _, _ in negatives) == sorted(aligned)
    for a, b, t in negatives:
        assert len(b.split()) == 1 and b.lower() != a.lower()
        assert t[1] <= aligned[a][0] or t[0] >= aligned[a][1]
    # Random partners: sentence label 0, only random pairs, sources from the positives.
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["label"] for r in rows] == ["1"] * 4 + ["0"] * 2
    for i, label, a, b, y, _, _ in found:
        assert (y == "random") == (label == "0")
        assert y != "random" or (a in aligned and a.lower() != b.lower())
    # The identity rule gets no positive: they are never identical.
    assert stats.rule.correct["paraphrase"] == 0
    assert stats.rule.accuracy == pytest.approx(100.0 * (len(found) - 2) / len(found))

    # --keep-identical: identical segments of the anchors are positives too.
    kept = tmp_path / "kept.jsonl"
    stats = align_file(src, kept, AlignSettings(seed=1, words="bert", keep_identical=True))
    same = [(a, b) for _, _, a, b, y, _, _ in phrases(kept) if y == "paraphrase" and a == b]
    assert stats.identical == len(same) > 5 and ("profits", "profits") in same
    assert stats.rule.correct["paraphrase"] == len(same)


@pytest.mark.parametrize("task", ["MRPC", "STS-B"])
def test_real_training_pairs_classes_and_identity_rule(tmp_path, task):
    """On a real training file: no positive is an identical string or shares a word
    with its partner; lengths bounded; no digits; in-paraphrase and paraphrase pairs as
    many; the identity rule, recomputed from the file, only gets the negatives."""
    out = tmp_path / "pairs.jsonl"
    stats = align_file(GLUE / task / "train.tsv", out, AlignSettings(seed=1, words="bert"))
    found = phrases(out)
    counts = {y: sum(1 for *_, lab, _, _ in found if lab == y)
              for y in ("paraphrase", "in-paraphrase", "random")}
    assert counts == dict(stats.classes)
    assert counts["paraphrase"] == counts["in-paraphrase"] > 900
    assert 0.3 < counts["random"] / counts["paraphrase"] < 0.7  # random_ratio 0.5
    for _, label, a, b, y, _, _ in found:
        if y == "paraphrase":
            assert a.lower() != b.lower()
            assert not set(re.findall(r"\w+", a.lower())) & set(re.findall(r"\w+", b.lower()))
            assert not re.search(r"\d", a + b)
            for text in (a, b):
                assert 1 <= len(word_ranges(text, "bert")[0]) <= MAX_PHRASE_WORDS, (a, b)
        assert (y == "random") == (label == "0")
    correct, total = rule_by_hand(out)
    assert total == len(found) and correct == counts["in-paraphrase"] + counts["random"]
    assert stats.rule.accuracy == pytest.approx(100.0 * correct / total)
    assert 55 < stats.rule.accuracy < 65
    assert identity_rule(out).as_dict() == stats.rule.as_dict()

    # Version 1's positives (--keep-identical): the identity rule nearly solves the task.
    old = tmp_path / "old.jsonl"
    stats = align_file(GLUE / task / "train.tsv", old,
                       AlignSettings(seed=1, words="bert", keep_identical=True))
    correct, total = rule_by_hand(old)
    assert stats.rule.accuracy == pytest.approx(100.0 * correct / total) and correct / total > 0.9


def test_holdout_rows_go_to_their_own_file(tmp_path):
    train, held = tmp_path / "train.jsonl", tmp_path / "held.jsonl"
    stats = align_file(GLUE / "MRPC" / "train.tsv", train, AlignSettings(seed=1, words="bert"),
                       holdout=50, holdout_path=held)
    assert stats.holdout.paraphrase_rows == 50 and stats.holdout.random_rows == 25
    assert stats.paraphrase_rows + 50 == sum(1 for line in (GLUE / "MRPC" / "train.tsv").open()
                                             if line.startswith("1\t"))
    rows = {p: [json.loads(line) for line in p.read_text().splitlines()] for p in (train, held)}
    sents = {p: {r["sentence1"] for r in rs} | {r["sentence2"] for r in rs} for p, rs in rows.items()}
    last = [line.split("\t")[3].strip() for line in (GLUE / "MRPC" / "train.tsv").open()
            if line.startswith("1\t")][-50:]
    assert set(last) <= sents[held]
    assert "held out:" in stats.report()


def test_excluding_the_files_own_split_says_what_exclude_takes(tmp_path):
    """"0 paraphrase rows; need at least 2" came from excluding MRPC's dev file from
    MRPC's dev file: the error now says what was dropped and what EXCLUDE takes."""
    dev = GLUE / "MRPC" / "dev.tsv"
    with pytest.raises(BadInputError, match=r"dev\.tsv: after dropping \d+ paraphrase rows that "
                       r"share a sentence with .*dev\.tsv \(EXCLUDE / --exclude-sentences-of "
                       r"takes the target task's dev and test files.*: 0 paraphrase rows"):
        align_file(dev, tmp_path / "x.jsonl", exclude=[dev])
