"""Word tokenizer, n-gram counting and dictionary format, segmentation: on real text."""

import collections
import gzip
import itertools

import pytest

from conftest import DATA, GLUE, run_cli
from span_plugin.preprocess import load_ngrams, NgramFormatError, Segmenter, default_ngrams_path
from span_plugin.preprocess.segmentation import ngrams as NG
from span_plugin.tokenizers import words as W

WIKI = DATA / "wikitext-2" / "wiki.valid.tokens"


def _glue_fields(limit_per_file=400):
    for tsv in sorted(GLUE.glob("*/*.tsv")):
        with open(tsv, encoding="utf-8-sig") as f:
            for line in itertools.islice(f, limit_per_file):
                yield from line.rstrip("\n").split("\t")


def test_words_are_gpt2_pretokens_without_whitespace():
    n = 0
    for text in _glue_fields():
        pts = W.pretokens(text)
        expected = [W.word_of(p) for p in pts if not W.is_space(p)]
        assert W.split_words(text) == expected
        assert "".join(pts) == text  # pre-tokens cover the text
        n += 1
    assert n > 5000
    # punctuation and clitics are words of their own; runs of spaces give no word
    assert W.split_words("New York,  it's  'sx") == ["New", "York", ",", "it", "'s", "'", "sx"]
    assert W.match_keys(["ΟΔΟΣ", "İstanbul", "NEW"]) == [w.lower() for w in ["ΟΔΟΣ", "İstanbul", "NEW"]]


def _brute_counts(paths, wikitext, max_n=5):
    c = collections.Counter()
    for p in paths:
        text = open(p, "rb").read().decode("utf-8", "replace")
        for line in NG.corpus_lines(text, wikitext):
            k = W.match_keys(W.split_words(line))
            for n in range(2, max_n + 1):
                for i in range(len(k) - n + 1):
                    c[tuple(k[i:i + n])] += 1
    return c


def test_count_ngrams_is_exact_on_wikitext(tmp_path):
    # a real slice, counted with small chunks so that many chunks and partitions merge
    part = tmp_path / "wiki.tokens"
    part.write_bytes(b"".join(open(WIKI, "rb").readlines()[:1500]))
    res = NG.count_ngrams([part], NG.NgramCounting(min_count=2, edge_punct=True), workers=2,
                          wikitext=True, chunk_bytes=16 << 10, partitions=3)
    ref = _brute_counts([part], True)
    expected = sorted(((g, c) for g, c in ref.items() if c >= 2), key=lambda gc: (-gc[1], gc[0]))
    assert len(expected) > 5000
    assert res.items == expected
    assert any(len(g) == 5 for g, _ in res.items)
    # min_n/max_n and top_k
    res3 = NG.count_ngrams([part], NG.NgramCounting(min_n=3, max_n=3, min_count=2, top_k=100,
                                                    edge_punct=True), workers=1)
    assert [g for g, _ in res3.items] == [g for g, _ in
                                          sorted(((g, c) for g, c in _brute_counts([part], False, 3).items()
                                                  if len(g) == 3 and c >= 2),
                                                 key=lambda gc: (-gc[1], gc[0]))][:100]


def test_edge_punctuation_filter(tmp_path):
    part = tmp_path / "t.txt"
    part.write_text("in new york , the city .\n" * 3 + "a state-of-the-art plan .\n" * 3,
                    encoding="utf-8")
    grams = {g for g, _ in NG.count_ngrams([part], NG.NgramCounting(min_count=3), workers=1).items}
    assert ("new", "york") in grams and ("state", "-", "of") in grams
    assert all(W.split_words(g[0])[0].isalnum() and g[-1].isalnum() for g in grams)
    assert ("york", ",") not in grams and (",", "the") not in grams
    every = {g for g, _ in NG.count_ngrams([part], NG.NgramCounting(min_count=3, edge_punct=True),
                                           workers=1).items}
    assert ("york", ",") in every and grams < every


def test_wikitext_cleaning_matches_plain_text():
    line = " the state @-@ of @-@ the @-@ art 1 @,@ 000 it 's <unk> didn 't"
    assert list(NG.corpus_lines(line, wikitext=True)) == [
        " the state-of-the-art 1,000 it's ", " didn't"]
    assert list(NG.corpus_lines(" = Heading = ", wikitext=True)) == []


def test_dictionary_roundtrip_and_errors(tmp_path):
    path = tmp_path / "d.txt.gz"
    NG.save_ngrams(path, [(("new", "york"), 5), (("the", "united", "states"), 9)], "test")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert lines[0].startswith("# span_plugin ngrams v1")
    assert lines[1:] == ["the united states\t9", "new york\t5"]
    d = load_ngrams(path)
    assert ("new", "york") in d and len(d) == 2 and d.first_max["the"] == 3
    assert len(load_ngrams(path, top_k=1)) == 1
    for bad, why in [("new york 5\n", "no tab"), ("new york\tfive\n", "count"),
                     ("york\t5\n", "one word"), ("new  york\t5\n", "double space")]:
        p = tmp_path / "bad.txt"
        p.write_text("# c\nof the\t7\n" + bad, encoding="utf-8")
        with pytest.raises(NgramFormatError, match=rf"{p}:3: expected"):
            load_ngrams(p)


def test_packaged_default_dictionary():
    d = load_ngrams()
    assert 50_000 <= len(d) <= 100_000
    assert default_ngrams_path().endswith("ngrams.default.txt.gz")
    assert ("of", "the") in d and d.max_n == 5


def test_greedy_segmentation_fixes_reference_faults():
    d = NG.NgramDict.from_counts([(("new", "york"), 9), (("new", "york", "city"), 5),
                                  (("of", "the"), 9)])
    seg = Segmenter(d, "greedy")
    words = W.split_words("I love New York, the city of the NEW YORK")
    keys = W.match_keys(words)
    lengths = seg(keys)
    spans, i = [], 0
    for n in lengths:
        spans.append(words[i:i + n])
        i += n
    # "York," still matches (punctuation is its own word); the n-gram ending on the
    # last word is found; matching ignores case.
    assert spans == [["I"], ["love"], ["New", "York"], [","], ["the"], ["city"],
                     ["of", "the"], ["NEW", "YORK"]]
    # longest match wins
    assert seg(W.match_keys(W.split_words("new york city"))) == [3]


def test_random_and_none_segmentations():
    d = load_ngrams()
    greedy, rnd, none = (Segmenter(d, m, seed=3) for m in ("greedy", "random", "none"))
    total_g, total_r, moved = collections.Counter(), collections.Counter(), 0
    for text in itertools.islice(_glue_fields(200), 2000):
        keys = W.match_keys(W.split_words(text))
        g, r = greedy(keys, text), rnd(keys, text)
        assert sorted(g) == sorted(r) and sum(r) == len(keys)
        assert r == rnd(keys, text)  # seeded by seed + text: deterministic
        moved += g != r
        total_g.update(g)
        total_r.update(r)
        assert none(keys, text) == [1] * len(keys)
    assert total_g == total_r and total_g[2] > 100
    assert moved > 100
    other = Segmenter(d, "random", seed=4)
    text = "the united states of america is a country in north america , and new york is a city"
    keys = W.match_keys(W.split_words(text))
    assert any(Segmenter(d, "random", seed=s)(keys, text) != other(keys, text) for s in range(5))


def test_ngrams_cli_and_malformed_dictionary(tmp_path):
    out = tmp_path / "ng.txt"
    run_cli("span-preprocess", "ngrams", "--out", out, "--wikitext", WIKI, "--min-count", "20",
            "--workers", "2")
    d = load_ngrams(out)
    assert ("of", "the") in d and len(d) > 100
    assert all(c >= 20 for c in d.counts.values())
    out.write_text(out.read_text(encoding="utf-8") + "broken line\n", encoding="utf-8")
    n = len(out.read_text(encoding="utf-8").splitlines())
    proc = run_cli("span-preprocess", "encode", "--ngrams", out, "--gpt2-encoder-json",
                   DATA / "gpt2_bpe" / "encoder.json", "--gpt2-vocab-bpe",
                   DATA / "gpt2_bpe" / "vocab.bpe", "new york", check=False)
    assert proc.returncode != 0 and f"{out}:{n}:" in proc.stdout


def test_stats_table_and_plot(tmp_path):
    d = tmp_path / "d.txt"
    NG.save_ngrams(d, [(("new", "york"), 9), (("of", "the"), 5), (("new", "york", "city"), 2)])
    text = tmp_path / "s.txt"
    text.write_text("New York City is in the state of New York.\n\nof the people\n",
                    encoding="utf-8")
    png = tmp_path / "fig.png"
    proc = run_cli("span-preprocess", "stats", "--text", text, "--ngrams", d,
                   "--sizes", "1,all", "--plot", png)
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| dict")}
    # all 3 n-grams: [New York City] is in the state of [New York] . -> 8 spans;
    # [of the] people -> 2 spans (the empty line is not a sentence): 5.00 per sentence
    assert rows["3"].split("|")[2].strip() == "5.00"
    # top-1 ("new york"): [New York] City is in the state of [New York] . -> 9; 3 -> 6.00
    assert rows["1"].split("|")[2].strip() == "6.00"
    assert rows["0"].split("|")[2].strip() == "7.00"
    assert png.stat().st_size > 10_000
