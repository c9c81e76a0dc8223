"""Span-index binarization: byte-identical tokens to fairseq's pipeline, worker-count
invariance, and each kind of bad input keeping every file aligned or failing by line."""

import filecmp
import itertools
import sys

import subprocess

import pytest
from fairseq.data import indexed_dataset

from conftest import GLUE, GPT2_BPE, run_cli, run_main
from span_plugin.data import span_index
from span_plugin.preprocess import EncoderSpec
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import line_offsets
from span_plugin.preprocess.binary.binarize import binarize_file

import fairseq

SPEC = EncoderSpec(encoder_json=str(GPT2_BPE / "encoder.json"),
                   vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
DICT = str(GPT2_BPE / "dict.txt")


def _real_lines(n=1500):
    rows = []
    for tsv, col in [(GLUE / "SST-2" / "dev.tsv", 0), (GLUE / "MRPC" / "train.tsv", 3),
                     (GLUE / "STS-B" / "dev.tsv", 7)]:
        with open(tsv, encoding="utf-8-sig") as f:
            next(f)
            rows += [line.rstrip("\n").split("\t")[col] for line in itertools.islice(f, n // 3)]
    return rows


def _items(prefix):
    ds = indexed_dataset.MMapIndexedDataset(prefix)
    return [ds[i].tolist() for i in range(len(ds))]


@pytest.mark.slow
def test_tokens_identical_to_recipe_bpe_and_fairseq_preprocess(tmp_path):
    raw = tmp_path / "train.raw"
    raw.write_text("\n".join(_real_lines()) + "\n\n  \nlast line\n", encoding="utf-8")
    # fairseq's own pipeline: multiprocessing_bpe_encoder.py --keep-empty, fairseq-preprocess
    script = (fairseq.__path__[0] + "/examples/roberta/multiprocessing_bpe_encoder.py")
    subprocess.run([sys.executable, script, "--encoder-json", SPEC.encoder_json,
                    "--vocab-bpe", SPEC.vocab_bpe, "--inputs", str(raw), "--outputs",
                    str(tmp_path / "train.bpe"), "--workers", "2", "--keep-empty"], check=True,
                   capture_output=True)
    run_main("fairseq-preprocess", "--only-source", "--trainpref", tmp_path / "train.bpe",
             "--destdir", tmp_path / "fs", "--srcdict", DICT, "--workers", "2")
    for workers in (1, 2, 3):
        out = tmp_path / f"ours{workers}"
        summary = binarize_file(raw, out / "train", SPEC, DICT, workers=workers,
                                text_out=out / "train.bpe")
        assert summary.lines == len(raw.read_text(encoding="utf-8").splitlines())
        assert filecmp.cmp(out / "train.bpe", tmp_path / "train.bpe", shallow=False)
        for ext in ("bin", "idx"):
            assert filecmp.cmp(out / f"train.{ext}", tmp_path / "fs" / f"train.{ext}",
                               shallow=False)
            assert filecmp.cmp(out / f"train.spans.{ext}",
                               tmp_path / "ours1" / f"train.spans.{ext}", shallow=False)
    tokens = indexed_dataset.MMapIndexedDataset(str(tmp_path / "ours2" / "train"))
    spans = span_index.load_spans(str(tmp_path / "ours2" / "train.spans"))
    span_index.check_alignment(str(tmp_path / "ours2" / "train.spans"), spans, tokens.sizes - 1)
    # spans cover every token of every sentence; empty lines have empty items
    for i in range(len(tokens)):
        flat = spans[i].tolist()
        n = len(tokens[i]) - 1
        assert (flat[0] == 0 and flat[-1] == n) if n else flat == []


def _bin(tmp_path, name, data, **kw):
    src = tmp_path / f"{name}.txt"
    src.write_bytes(data)
    binarize_file(src, tmp_path / name / "train", SPEC, DICT, **kw)
    return _items(str(tmp_path / name / "train")), _items(str(tmp_path / name / "train.spans"))


def test_bad_input_keeps_alignment(tmp_path):
    lines = _real_lines(90)
    plain = ("\n".join(lines) + "\n").encode()
    ref_tok, ref_spans = _bin(tmp_path, "plain", plain, workers=1)
    assert len(ref_tok) == len(lines)
    # CRLF endings, a BOM, no final newline: same items
    crlf = b"\xef\xbb\xbf" + "\r\n".join(lines).encode()
    assert _bin(tmp_path, "crlf", crlf, workers=2) == (ref_tok, ref_spans)
    # empty lines and tabs stay items of their own, in place
    messy = lines[:5] + ["", "\t", "a\tb  c"] + lines[5:]
    tok, spans = _bin(tmp_path, "messy", ("\n".join(messy) + "\n").encode(), workers=3)
    assert len(tok) == len(messy)
    assert tok[:5] == ref_tok[:5] and tok[8:] == ref_tok[5:]
    assert tok[5] == tok[6] == [2] and spans[5] == spans[6] == []  # just </s>
    assert len(tok[7]) > 1 and spans[7][0] == 0 and spans[7][-1] == len(tok[7]) - 1
    # a 10k-word line
    long_line = " ".join(lines[:40]).split(" ")
    long_text = " ".join(itertools.islice(itertools.cycle(long_line), 10_000))
    tok, spans = _bin(tmp_path, "long", (lines[0] + "\n" + long_text + "\n").encode())
    assert len(tok) == 2 and len(tok[1]) > 10_000 and spans[1][-1] == len(tok[1]) - 1


def test_invalid_utf8_names_file_and_line(tmp_path):
    lines = [s.encode() for s in _real_lines(300)]
    lines[250] = lines[250][:5] + b"\xff\xfe" + lines[250][5:]
    src = tmp_path / "bad.txt"
    src.write_bytes(b"\n".join(lines) + b"\n")
    assert len(line_offsets(src, 3)) == 3  # the bad line lies in a later worker's range
    with pytest.raises(BadInputError, match=rf"{src}:251: invalid UTF-8"):
        binarize_file(src, tmp_path / "o" / "train", SPEC, DICT, workers=3)
    s = binarize_file(src, tmp_path / "r" / "train", SPEC, DICT, workers=3, bad_utf8="replace")
    assert s.lines == 300
    proc = run_cli("span-preprocess", "binarize", src, tmp_path / "cli" / "train",
                   "--gpt2-encoder-json", SPEC.encoder_json, "--gpt2-vocab-bpe", SPEC.vocab_bpe,
                   "--srcdict", DICT, "--workers", "2", check=False)
    assert proc.returncode == 2 and f"{src}:251: invalid UTF-8" in proc.stdout


def test_segmentation_methods_share_tokens(tmp_path):
    data = ("\n".join(_real_lines(60)) + "\n").encode()
    base, _ = _bin(tmp_path, "g", data)
    for method in ("random", "none"):
        spec = EncoderSpec(**{**SPEC.__dict__, "segmentation": method, "seed": 7})
        src = tmp_path / "g.txt"
        binarize_file(src, tmp_path / method / "train", spec, DICT, workers=2)
        assert _items(str(tmp_path / method / "train")) == base
        spans = _items(str(tmp_path / method / "train.spans"))
        assert all(len(s) >= 2 for s in spans)
    greedy = _items(str(tmp_path / "g" / "train.spans"))
    none = _items(str(tmp_path / "none" / "train.spans"))
    assert sum(map(len, none)) > sum(map(len, greedy))
    rnd = _items(str(tmp_path / "random" / "train.spans"))
    assert [len(s) for s in rnd] == [len(s) for s in greedy]  # same number of spans
    assert sum(a != b for a, b in zip(rnd, greedy)) > 10  # at other places
