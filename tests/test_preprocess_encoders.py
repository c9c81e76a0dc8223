"""Span encoders on real GLUE rows: GPT-2 ids equal fairseq's, spans cover the tokens,
multi-word spans decode to dictionary n-grams; sentencepiece and fastBPE offsets."""

import itertools

import pytest
from fairseq.data.encoders.gpt2_bpe import GPT2BPE, GPT2BPEConfig

from conftest import GLUE, GPT2_BPE
from span_plugin.preprocess import load_ngrams, make_encoder
from span_plugin.tokenizers import words as W
from span_plugin.preprocess.segmentation.segment import Segmenter, lengths_to_bounds


def _gpt2(**kw):
    return make_encoder(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                        vocab_bpe=str(GPT2_BPE / "vocab.bpe"), **kw)


def _fields(per_file=300):
    """Input fields of real rows from every GLUE file (header included: MRPC's BOM)."""
    for tsv in sorted(GLUE.glob("*/*.tsv")):
        with open(tsv, encoding="utf-8") as f:
            for line in itertools.islice(f, per_file):
                yield from line.rstrip("\n").split("\t")


def _check_cover(tokens, spans):
    if not tokens:
        assert spans == []
        return
    assert spans[0][0] == 0 and spans[-1][1] == len(tokens)
    for (s, e), (s2, _) in zip(spans, spans[1:]):
        assert s < e == s2


@pytest.fixture(scope="module")
def gpt2():
    return _gpt2()


def test_gpt2_ids_equal_fairseq_on_real_rows(gpt2):
    ref = GPT2BPE(GPT2BPEConfig(gpt2_encoder_json=str(GPT2_BPE / "encoder.json"),
                                gpt2_vocab_bpe=str(GPT2_BPE / "vocab.bpe")))
    n = 0
    for text in _fields():
        tokens, spans = gpt2.encode(text)
        # multiprocessing_bpe_encoder.py strips each line before encoding
        assert " ".join(tokens) == ref.encode(text.strip()), text
        _check_cover(tokens, spans)
        n += 1
    assert n > 8000
    # odd whitespace, control characters, non-Latin text, a BOM
    for text in ["a  b\t\tc", "\ufeffQuality x", "x \x1c y", "ΟΔΟΣ 東京 naïve — “q”", "  "]:
        tokens, spans = gpt2.encode(text)
        assert " ".join(tokens) == ref.encode(text.strip())
        _check_cover(tokens, spans)


def test_multiword_spans_decode_to_dictionary_ngrams(gpt2):
    d = load_ngrams()
    multi = 0
    for text in _fields():
        tokens, spans = gpt2.encode(text)
        for s, e in spans:
            keys = W.match_keys(W.split_words(gpt2.decode(tokens[s:e])))
            if len(keys) > 1:
                assert tuple(keys) in d, (text, keys)
                multi += 1
            else:
                assert len(keys) == 1
    assert multi > 5000


def test_spans_from_top_k_dictionary_and_segmentations(gpt2):
    text = "The United States of America is a country in North America, and New York is big."
    tokens, spans = gpt2.encode(text)
    words = [gpt2.decode(tokens[s:e]).strip() for s, e in spans]
    # greedy longest match: the packaged (Wikipedia) dictionary holds the whole 5-gram
    assert ("the", "united", "states", "of", "america") in load_ngrams()
    assert words[0] == "The United States of America" and "," in words and "." in words
    small = _gpt2(ngrams_top_k=10)
    assert len(small.encode(text)[1]) > len(spans)
    none = _gpt2(segmentation="none")
    assert len(none.encode(text)[1]) == len(W.split_words(text))
    r1, r2 = _gpt2(segmentation="random", seed=1), _gpt2(segmentation="random", seed=1)
    assert r1.encode(text) == r2.encode(text)
    assert sorted(e - s for s, e in r1.encode(text)[1]) != [] and r1.encode(text)[0] == tokens


def test_sentencepiece_offsets(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "sst.txt"
    with open(GLUE / "SST-2" / "dev.tsv", encoding="utf-8") as f:
        next(f)
        corpus.write_text("".join(line.split("\t")[0] + "\n" for line in f), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"),
                                   vocab_size=400, model_type="bpe", minloglevel=2)
    enc = make_encoder(bpe="sentencepiece", sentencepiece_model=str(tmp_path / "sp.model"))
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
    for text in corpus.read_text(encoding="utf-8").splitlines()[:200]:
        tokens, spans = enc.encode(text)
        _check_cover(tokens, spans)
        words = W.split_words(text)
        # each span holds exactly its words' pieces
        per_word = [sp.encode(w, out_type=str) for w in words]
        assert tokens == [p for ps in per_word for p in ps]
        pieces_by_span = [tokens[s:e] for s, e in spans]
        assert sum(len(p) for p in pieces_by_span) == len(tokens)
        assert enc.decode(tokens).replace(" ", "") == "".join(words)


def test_fastbpe_offsets(tmp_path):
    pytest.importorskip("fastBPE")
    codes = tmp_path / "codes"
    codes.write_text("t h 10\nth e</w> 9\na n 8\nan d</w> 7\no f</w> 6\n", encoding="utf-8")
    enc = make_encoder(bpe="fastbpe", bpe_codes=str(codes))
    text = "The United States of America, and then of the"
    tokens, spans = enc.encode(text)
    _check_cover(tokens, spans)
    assert enc.decode(tokens) == " ".join(W.split_words(text))
    got = [enc.decode(tokens[s:e]) for s, e in spans]
    # the spans are the greedy segmentation of the words, whatever the BPE pieces
    words = W.split_words(text)
    bounds = lengths_to_bounds(Segmenter(load_ngrams())(W.match_keys(words)))
    assert got == [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert got[0] == "The United States of America" and len(got) < len(words)
    # a word cut into pieces stays inside one span
    assert any("@@" in t for t in tokens)
    for s, e in spans:
        assert not tokens[e - 1].endswith("@@")
