"""A checkpoint written before the package layout v2 (span_plugin 0.2.0, commit 5f4115b)
still loads and predicts exactly what it predicted then.

tests/fixtures/checkpoint_v0_2 holds a tiny ``roberta_span`` MRPC checkpoint (1 layer,
width 16, a 1,159-symbol dictionary cut from GPT-2's), its data folder's dictionaries and
record, and the old hub's logits on 22 sentence pairs (expected.json). It was made with
the old code from a git worktree of that commit: 40 MRPC train rows through ``python -m
span_plugin.preprocess.cli glue`` and 6 updates of ``fairseq-train``. They were segmented
with the dictionary packaged up to 0.2 (counted on WikiText-2 and GLUE training text),
kept here as ngrams.v0_2.txt.gz: since the packaged one changed, it is given again.
"""

import json
import os

import pytest
import torch

from conftest import GPT2_BPE
from span_plugin.hub import SpanHubInterface

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoint_v0_2")
BPE = str(GPT2_BPE)
OLD_NGRAMS = os.path.join(FIXTURE, "ngrams.v0_2.txt.gz")


@pytest.fixture(scope="module")
def expected():
    with open(os.path.join(FIXTURE, "expected.json"), encoding="utf-8") as f:
        return json.load(f)


def test_old_checkpoint_predicts_as_before(expected):
    hub = SpanHubInterface.from_pretrained(
        os.path.join(FIXTURE, "span_classification.pt"), data=os.path.join(FIXTURE, "data"),
        gpt2_encoder_json=os.path.join(BPE, "encoder.json"),
        gpt2_vocab_bpe=os.path.join(BPE, "vocab.bpe"), ngrams=OLD_NGRAMS)
    pairs = [tuple(p) for p in expected["pairs"]]
    logits = hub.predict_logits(pairs)
    torch.testing.assert_close(logits, torch.tensor(expected["logits"]), rtol=0, atol=1e-5)
    assert [p["label"] for p in hub.predict(pairs)] == expected["labels"]


def test_old_checkpoint_without_its_dictionary_names_it():
    """The packaged dictionary is no longer the one this checkpoint was segmented with:
    loading it without ngrams= stops and says what to pass (nothing segments silently
    with another dictionary)."""
    from span_plugin.preprocess.records.encoder_settings import SettingsMismatch

    with pytest.raises(SettingsMismatch, match=r"changed since .* pass ngrams=PATH .*0\.2"):
        SpanHubInterface.from_pretrained(
            os.path.join(FIXTURE, "span_classification.pt"), data=os.path.join(FIXTURE, "data"),
            gpt2_encoder_json=os.path.join(BPE, "encoder.json"),
            gpt2_vocab_bpe=os.path.join(BPE, "vocab.bpe"))


@pytest.fixture(scope="module")
def expected_ner_pairs():
    with open(os.path.join(FIXTURE, "expected_ner_pairs.json"), encoding="utf-8") as f:
        return json.load(f)


def _hub(name, data):
    return SpanHubInterface.from_pretrained(
        os.path.join(FIXTURE, f"{name}.pt"), data=os.path.join(FIXTURE, data),
        gpt2_encoder_json=os.path.join(BPE, "encoder.json"),
        gpt2_vocab_bpe=os.path.join(BPE, "vocab.bpe"), ngrams=OLD_NGRAMS)


def test_old_span_labeling_checkpoint_keeps_its_trained_head(expected_ner_pairs):
    """(made by make_ner_pairs.py) The 0.2.0 hub dropped this checkpoint's trained head at
    load; today's keeps it, and the head's logits equal the old encoding and layout with
    the checkpoint's own weights."""
    from span_plugin.portable.batches import pad_rows

    expected = expected_ner_pairs["span_labeling"]
    hub = _hub("span_labeling", "data_ner")
    for words, logits, valid in zip(expected["sentences"], expected["logits"], expected["valid"]):
        tokens, spans, word_spans = hub._encode_words(words)
        got, got_valid = hub.forward_batch([tokens], spans=pad_rows([spans], 2),
                                           words=pad_rows([word_spans], 2))
        torch.testing.assert_close(got[0].detach(), torch.tensor(logits), rtol=0, atol=1e-5)
        assert got_valid[0].tolist() == valid
    assert hub.predict_words(expected["sentences"]) == [
        [tuple(e) for e in ents] for ents in expected["entities"]]


def test_old_span_pair_checkpoint_keeps_its_trained_heads(expected_ner_pairs):
    hub = _hub("span_pair_classification", "data_pairs")
    for row in expected_ner_pairs["span_pair_classification"]:
        got = hub.predict_pairs(row["sentence1"], row["sentence2"], row["phrases"])
        want = row["prediction"]
        assert [p["label"] for p in got["phrases"]] == [p["label"] for p in want["phrases"]]
        for g, w in zip(got["phrases"], want["phrases"]):
            assert g["scores"] == pytest.approx(w["scores"], abs=1e-5)
        assert got["sentence"]["label"] == want["sentence"]["label"]
        assert got["sentence"]["scores"] == pytest.approx(want["sentence"]["scores"], abs=1e-5)


QA_FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoint_qa_token")


def test_qa_checkpoint_from_before_answer_boundaries_decodes_as_it_did():
    """(made by checkpoint_qa_token/make_qa.py with commit 4d92457) A span_qa checkpoint
    made before --answer-boundaries existed decodes over every token span, as it did
    then (fairseq would give its config today's default, word); asked for word
    boundaries, it answers otherwise where its old answers cut a word."""
    from span_plugin.modules.qa_decoding import cuts_word

    with open(os.path.join(QA_FIXTURE, "expected.json"), encoding="utf-8") as f:
        expected = json.load(f)
    hub = SpanHubInterface.from_pretrained(
        os.path.join(QA_FIXTURE, "span_qa.pt"), data=os.path.join(QA_FIXTURE, "data"),
        gpt2_encoder_json=os.path.join(BPE, "encoder.json"),
        gpt2_vocab_bpe=os.path.join(BPE, "vocab.bpe"), ngrams=OLD_NGRAMS)
    assert hub.answer_boundaries == "token"
    pairs = [tuple(p) for p in expected["pairs"]]
    got = hub.predict_answers(pairs, n_best=5)
    for answer, want in zip(got, expected["answers"]):
        assert (answer["text"], answer["start"], answer["end"]) == (
            want["text"], want["start"], want["end"])
        assert answer["score"] == pytest.approx(want["score"], abs=1e-4)
        assert [[b["start"], b["end"]] for b in answer["nbest"]] == want["nbest"]
    cut = [k for k, ((_, c), a) in enumerate(zip(pairs, got)) if any(cuts_word(c, a["start"], a["end"]))]
    assert cut  # the fixture has answers that word boundaries change
    words = hub.predict_answers(pairs, n_best=5, answer_boundaries="word")
    for (_, context), answer in zip(pairs, words):
        assert cuts_word(context, answer["start"], answer["end"]) == (False, False)
    assert all(words[k]["text"] != got[k]["text"] for k in cut)
