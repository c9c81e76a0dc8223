"""--segmentation chunker (the paper's "NLTK SF"): NLTK's POS tagger and a chunker trained
on CoNLL-2000, its chunks as spans over exactly the encoder's words.

The chunker is built once per test session (trained, or loaded from the JSON cache in
$SPAN_CACHE that conftest points at a temporary folder)."""

import json
import os
import sys

import pytest

from conftest import DATA, GLUE, GPT2_BPE, minilm_dir, run_cli
from span_plugin.preprocess.segmentation import chunker as C
from span_plugin.preprocess import make_encoder
from span_plugin.preprocess.records import provenance
from span_plugin.preprocess.binary import span_files
from span_plugin.preprocess.records.encoder_settings import SettingsMismatch, encoder_spec
from span_plugin.preprocess.segmentation.segment import Segmenter
from span_plugin.tokenizers import words as W

NLTK_DATA = DATA / "nltk_data"
TEST = NLTK_DATA / C.TEST_FILE


@pytest.fixture(scope="module")
def model():
    return C.build(NLTK_DATA)


def _glue_sentences(n_cola=300, n_mrpc=150):
    """Real GLUE rows: CoLA train sentences (column 4, no header) and both MRPC train
    sentences (columns 4 and 5, after the header)."""
    cola = (GLUE / "CoLA" / "train.tsv").read_text(encoding="utf-8").splitlines()[:n_cola]
    mrpc = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines()[1:n_mrpc + 1]
    return ([line.split("\t")[3] for line in cola]
            + [s for line in mrpc for s in line.split("\t")[3:5]])


def test_chunk_lengths_are_conlleval_chunks():
    """On every CoNLL-2000 test sentence, the spans are seqeval's chunks (conlleval
    reading of IOB) with each word outside a chunk a span of its own."""
    from seqeval.metrics.sequence_labeling import get_entities

    for sentence in C.read_conll2000(TEST):
        tags = [t for _, _, t in sentence]
        expected, at = [], 0
        for _, start, end in sorted(get_entities(tags), key=lambda e: e[1]):
            expected += [1] * (start - at) + [end - start + 1]
            at = end + 1
        expected += [1] * (len(tags) - at)
        assert C.chunk_lengths(tags) == expected, tags
    # An I- tag that continues no chunk of its type starts one, as conlleval reads it.
    assert C.chunk_lengths(["I-NP", "I-NP", "I-VP", "B-NP", "O", "I-PP"]) == [2, 1, 1, 1, 1]


def test_f1_on_conll2000_test(model):
    """Chunk F1 with the tagger's POS tags (as when segmenting) is in the low 90s; NLTK's
    ChunkScore and seqeval (conlleval) agree on it, and the record reports the same."""
    from seqeval.metrics import f1_score, precision_score, recall_score

    sentences = C.retag(model.tagger, C.read_conll2000(TEST))
    gold = [[t for _, _, t in s] for s in sentences]
    guess = [model.chunker.tag([x[0] for x in s], [x[1] for x in s]) for s in sentences]
    scores = C.score(sentences, guess)
    assert scores["f1"] == pytest.approx(f1_score(gold, guess), abs=1e-9)
    assert scores["precision"] == pytest.approx(precision_score(gold, guess), abs=1e-9)
    assert scores["recall"] == pytest.approx(recall_score(gold, guess), abs=1e-9)
    assert scores["f1"] >= 0.90, scores
    assert scores == pytest.approx(model.scores)  # measured at training, cached, recorded
    # The dense scoring decides as NLTK's own AveragedPerceptron.predict does.
    for s, tags in zip(sentences[:300], guess):
        assert tags == model.chunker.tag_like_nltk([x[0] for x in s], [x[1] for x in s])


def test_training_is_deterministic_and_cached_as_json(model, tmp_path):
    sentences = C.retag(model.tagger, C.read_conll2000(NLTK_DATA / C.TRAIN_FILE)[:200])
    a, b = C.ChunkTagger.train(sentences, passes=1), C.ChunkTagger.train(sentences, passes=1)
    assert a.fingerprint() == b.fingerprint()
    # The JSON form gives the same model back (no pickle anywhere).
    back = C.ChunkTagger(**json.loads(json.dumps(a.to_json())))
    assert back.fingerprint() == a.fingerprint()
    cached = [os.path.join(C.cache_dir(), f) for f in os.listdir(C.cache_dir())]
    data = json.load(open(next(p for p in cached if p.endswith(".json")), encoding="utf-8"))
    assert data["format"] == C.CACHE_FORMAT and data["key"]["train"] == provenance.sha256(
        NLTK_DATA / C.TRAIN_FILE)


def test_units_join_words_that_share_a_treebank_token():
    from nltk.tokenize import NLTKWordTokenizer

    text = 'Mr. Smith didn\'t pay $3.5 for "it".'
    words = C._gpt2_words(text)
    assert [w for w, _, _ in words] == ["Mr", ".", "Smith", "didn", "'t", "pay", "$", "3",
                                        ".", "5", "for", '"', "it", '".']
    groups = C.units(words, C.treebank_tokens(NLTKWordTokenizer(), text))
    assert groups == [(2, ["Mr."]), (1, ["Smith"]), (2, ["did", "n't"]), (1, ["pay"]),
                      (1, ["$"]), (3, ["3.5"]), (1, ["for"]), (1, ["``"]), (1, ["it"]),
                      (1, ["''", "."])]


def _encoder(scheme):
    if scheme == "gpt2":
        return make_encoder(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                            vocab_bpe=str(GPT2_BPE / "vocab.bpe"), segmentation="chunker",
                            nltk_data=str(NLTK_DATA))
    return make_encoder(bpe="wordpiece", wordpiece=str(minilm_dir()), segmentation="chunker",
                        nltk_data=str(NLTK_DATA))


@pytest.mark.parametrize("scheme", ["gpt2", "bert"])
def test_spans_cover_exactly_the_encoders_words_on_glue_rows(model, scheme):
    enc = _encoder(scheme)
    chunker = enc.segmenter.cut
    multi = total = 0
    for text in _glue_sentences():
        text = text.strip()
        tokens, starts, keys = enc.tokenizer.pieces(text)
        lengths = enc.segmenter(keys, text)
        assert sum(lengths) == len(keys) and min(lengths) >= 1, text
        # The token spans start at word starts and cover every token, in order.
        _, spans = enc.encode(text)
        bounds = [0]
        for n in lengths:
            bounds.append(bounds[-1] + n)
        word_starts = starts + [len(tokens)]
        assert spans == [(word_starts[a], word_starts[b]) for a, b in zip(bounds, bounds[1:])]
        multi += sum(n > 1 for n in lengths)
        total += len(lengths)
    assert chunker.mismatches == 0  # every sentence was tagged in its own case
    assert multi / total > 0.2  # chunks, not one word each


def test_chunker_spans_are_the_chunks_of_a_known_sentence(model):
    enc = _encoder("gpt2")
    assert enc.encode_words("The quick brown fox jumped over the lazy dog.") == [
        ["the", "quick", "brown", "fox"], ["jumped"], ["over"], ["the", "lazy", "dog"], ["."]]


def test_the_nltk_folder_is_an_option_of_chunker_only(model):
    with pytest.raises(ValueError, match="segmentation 'none' reads no nltk_data"):
        Segmenter(None, segmentation="none", nltk_data=str(NLTK_DATA))
    seg = Segmenter(None, segmentation="chunker", nltk_data=str(NLTK_DATA))
    assert isinstance(seg.cut, C.ChunkSegmenter) and seg.ngrams is None
    assert sum(seg(["the", "old", "man"], "The old man")) == 3


def test_missing_data_names_the_file_and_where_to_put_it(tmp_path):
    with pytest.raises(C.ChunkerDataError) as err:
        C.find_data(tmp_path)
    message = str(err.value)
    assert str(tmp_path / C.TAGGER_FILES["weights"]) in message
    assert "--nltk-data" in message and "NLTK_DATA" in message
    # The tagger alone is not enough: CoNLL-2000 train is named next.
    (tmp_path / C.TAGGER_DIR).mkdir(parents=True)
    for rel in C.TAGGER_FILES.values():
        os.symlink(NLTK_DATA / rel, tmp_path / rel)
    with pytest.raises(C.ChunkerDataError, match=str(tmp_path / C.TRAIN_FILE)):
        C.find_data(tmp_path)


def test_without_nltk_the_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "nltk", None)  # import nltk raises ImportError
    with pytest.raises(C.ChunkerError, match=r"span_plugin\[chunker\]"):
        C.require_nltk()


def test_inference_rebuilds_the_recorded_chunker(model):
    record = {"encoder": {"bpe": "gpt2", "files": {}, "ngrams": None,
                          "segmentation": "chunker", "seed": 0, "chunker": C.chunker_record(model)}}
    spec = encoder_spec(record, {}, "ckpt.pt")
    assert (spec.segmentation, spec.nltk_data, spec.ngrams) == ("chunker", str(model.root), None)
    record["encoder"]["chunker"] = dict(C.chunker_record(model), model_sha256="0" * 64)
    with pytest.raises(SettingsMismatch, match="is not the one ckpt.pt was trained with"):
        encoder_spec(record, {}, "ckpt.pt")


def _small_glue(root, rows=60):
    """A GLUE folder with the first rows of real CoLA (train and dev; test with its header)."""
    (root / "CoLA").mkdir(parents=True)
    for split, n in (("train", rows), ("dev", rows // 2), ("test", rows // 2 + 1)):
        lines = (GLUE / "CoLA" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
        (root / "CoLA" / f"{split}.tsv").write_text("\n".join(lines[:n]) + "\n", encoding="utf-8")
    return root


@pytest.mark.slow
def test_span_preprocess_glue_with_chunker(model, tmp_path):
    glue, out = _small_glue(tmp_path / "glue"), tmp_path / "CoLA-bin"
    run_cli("span-preprocess", "glue", "--task", "CoLA", "--glue-dir", glue, "--out", out,
            "--srcdict", GPT2_BPE / "dict.txt", "--gpt2-encoder-json", GPT2_BPE / "encoder.json",
            "--gpt2-vocab-bpe", GPT2_BPE / "vocab.bpe", "--segmentation", "chunker",
            "--nltk-data", NLTK_DATA, "--workers", "2")
    proc = run_cli("span-preprocess", "check", out)
    assert "segmentation: chunker" in proc.stdout and "CoNLL-2000 test F1 0.9" in proc.stdout
    record = provenance.read_record(out)["encoder"]
    assert record["ngrams"] is None and record["segmentation"] == "chunker"
    chunker = record["chunker"]
    assert chunker["model_sha256"] == model.fingerprint
    assert chunker["tagger"]["weights"]["sha256"] == provenance.sha256(
        NLTK_DATA / C.TAGGER_FILES["weights"])
    assert chunker["test_scores"]["f1"] == pytest.approx(model.scores["f1"])
    # The span files hold the in-process encoder's spans of the same rows.
    enc = _encoder("gpt2")
    rows = (glue / "CoLA" / "train.tsv").read_text(encoding="utf-8").splitlines()
    spans = span_files.read_spans(span_files.span_prefix(str(out / "input0" / "train")))
    assert len(spans) == len(rows)
    for i, row in enumerate(rows):
        expected = [x for span in enc.encode(row.split("\t")[3])[1] for x in span]
        assert spans[i].tolist() == expected, row


def test_cli_errors_name_what_is_missing(tmp_path):
    common = ["encode", "--gpt2-encoder-json", GPT2_BPE / "encoder.json",
              "--gpt2-vocab-bpe", GPT2_BPE / "vocab.bpe", "a sentence"]
    proc = run_cli("span-preprocess", *common, "--segmentation", "chunker", "--nltk-data",
                   tmp_path, check=False)
    assert proc.returncode == 2
    assert str(tmp_path / C.TAGGER_FILES["weights"]) in proc.stdout
    proc = run_cli("span-preprocess", *common, "--nltk-data", NLTK_DATA, check=False)
    assert proc.returncode != 0 and "only by --segmentation chunker" in proc.stdout


def test_words_scheme_helpers_agree_with_the_encoders_words():
    """The words the chunker finds again in the text are the tokenizers' own words."""
    text = "Héllo wörld, don't 東京 U.S. e-mail"
    assert [w for w, _, _ in C._gpt2_words(text)] == W.split_words(text)
    assert W.bert_keys([w for w, _, _ in C._bert_words(text)]) == W.bert_words(text)


def test_words_not_the_encoders_are_tagged_as_its_keys(model, caplog):
    """Should the text's words ever differ from the encoder's, the keys are tagged: the
    spans still cover exactly the encoder's words, and the case is counted."""
    segment = _encoder("gpt2").segmenter.cut
    keys = ["the", "old", "man", "left"]
    lengths = segment(keys, "the old man left early")  # five words in the text, four keys
    assert sum(lengths) == 4 and segment.mismatches == 1
    assert "not the encoder's 4" in caplog.text
