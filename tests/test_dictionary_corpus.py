"""Dictionaries come from general text: gzip corpora, the header that records how a
dictionary was built, and the refusal of a corpus that contains a task's rows."""

import gzip
import os
import subprocess
import sys

import pytest

from conftest import DATA, GLUE
from span_plugin.preprocess.segmentation import ngrams as NG
from span_plugin.preprocess.segmentation.leakage import task_fingerprints, task_row_hits

WIKI = DATA / "wikipedia" / "wiki.AA.txt.gz"


@pytest.fixture(scope="module")
def wiki_lines():
    """The first 3,000 paragraphs of the real Wikipedia corpus."""
    out = []
    with gzip.open(WIKI, "rt", encoding="utf-8") as f:
        for line in f:
            out.append(line)
            if len(out) == 3000:
                break
    return out


def _cola_dev_sentences(n):
    with open(GLUE / "CoLA" / "dev.tsv", encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t")[3] for line in f][:n]


def test_gzip_corpus_counts_as_its_text(tmp_path, wiki_lines):
    plain = tmp_path / "wiki.txt"
    plain.write_text("".join(wiki_lines), encoding="utf-8")
    packed = tmp_path / "wiki.txt.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write("".join(wiki_lines))
    a = NG.count_ngrams([plain], NG.NgramCounting(min_count=3, words="bert"), workers=1)
    b = NG.count_ngrams([packed], NG.NgramCounting(min_count=3, words="bert"), workers=2,
                        chunk_bytes=64 << 10)
    assert len(a.items) > 1000 and a.items == b.items and a.corpus_tokens == b.corpus_tokens


def test_header_records_corpus_and_settings(tmp_path, wiki_lines):
    corpus = tmp_path / "my wiki.txt"
    corpus.write_text("".join(wiki_lines), encoding="utf-8")
    out = tmp_path / "d.txt.gz"
    res = NG.build_dictionary([corpus], out, NG.NgramCounting(min_count=11, words="gpt2"),
                              workers=1, task_rows=[GLUE / "CoLA"])
    head = NG.read_header(out)
    assert head["words"] == "gpt2" and head["n"] == "2..5" and head["min_count"] == "11"
    assert head["corpus"] == "my%20wiki.txt"
    assert int(head["corpus_tokens"]) == res.corpus_tokens > 100_000
    assert int(head["task_rows_checked"]) > 9000  # CoLA train + dev + test sentences
    d = NG.load_ngrams(out)
    assert d.words == "gpt2" and len(d) == len(res.items)
    assert min(d.counts.values()) >= 11
    # a size is a prefix: cutting the full file = counting with top_k
    assert NG.cut_dictionary(out, tmp_path / "top50.txt", 50) == 50
    top = NG.count_ngrams([corpus], NG.NgramCounting(min_count=11, top_k=50), workers=1)
    assert NG.load_ngrams(tmp_path / "top50.txt").counts == dict(top.items)
    assert NG.read_header(tmp_path / "top50.txt") == dict(head, top_k="50")


def test_corpus_with_task_rows_is_refused(tmp_path, wiki_lines):
    leaked = _cola_dev_sentences(3)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(wiki_lines[:500]) + "\n".join(leaked) + "\n"
                      + "".join(wiki_lines[500:1000]), encoding="utf-8")
    with pytest.raises(NG.TaskRowsInCorpus, match=r"3 corpus lines .*corpus\.txt:50[0-9]"):
        NG.build_dictionary([corpus], tmp_path / "d.txt", task_rows=[GLUE / "CoLA"])
    assert not (tmp_path / "d.txt").exists()
    # drop: the same counts as the corpus without those lines, recorded in the header
    NG.build_dictionary([corpus], tmp_path / "d.txt", task_rows=[GLUE / "CoLA"],
                        on_task_rows="drop", workers=1)
    clean = tmp_path / "clean1000.txt"
    clean.write_text("".join(wiki_lines[:1000]), encoding="utf-8")
    assert NG.load_ngrams(tmp_path / "d.txt").counts == dict(
        NG.count_ngrams([clean], workers=1).items)
    assert NG.read_header(tmp_path / "d.txt")["task_rows_dropped"] == "3"
    # a whole task TSV appended is found field by field
    tsv = tmp_path / "corpus2.txt"
    tsv.write_text("".join(wiki_lines[:200]) + (GLUE / "CoLA" / "dev.tsv").read_text(),
                   encoding="utf-8")
    hits, examples, _ = task_row_hits([tsv], task_fingerprints([GLUE / "CoLA" / "dev.tsv"])[0])
    assert hits == len((GLUE / "CoLA" / "dev.tsv").read_text().splitlines()) - sum(
        1 for s in _cola_dev_sentences(10_000) if len(s.split()) < 4)
    assert examples[0][1] == 201
    # general text passes the same check
    clean = tmp_path / "clean.txt"
    clean.write_text("".join(wiki_lines), encoding="utf-8")
    assert task_row_hits([clean], task_fingerprints([GLUE / "CoLA", GLUE / "MRPC"])[0])[0] == 0


def test_cli_refuses_and_allows_task_rows(tmp_path, wiki_lines):
    corpus = tmp_path / "corpus.txt.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.write("".join(wiki_lines[:300]) + "\n".join(_cola_dev_sentences(2)) + "\n")
    cli = [sys.executable, "-m", "span_plugin.cli.preprocess", "ngrams", "--text", str(corpus),
           "--min-count", "2", "--workers", "1", "--task-rows", str(GLUE / "CoLA")]
    r = subprocess.run(cli + ["--out", str(tmp_path / "a.txt")], capture_output=True, text=True)
    assert r.returncode != 0 and "2 corpus lines are sentences" in r.stderr
    assert "corpus.txt.gz:301" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(cli + ["--out", str(tmp_path / "b.txt"), "--on-task-rows", "count"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "counted anyway" in r.stderr and os.path.getsize(tmp_path / "b.txt") > 0
    r = subprocess.run(cli[:6] + ["--glue-dir", str(GLUE), "--out", str(tmp_path / "c.txt")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--glue-dir was removed" in r.stderr


def test_missing_task_rows_path_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-task"):
        task_fingerprints([tmp_path / "no-such-task"])
