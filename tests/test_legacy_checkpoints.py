"""A checkpoint written before the package layout v2 (span_plugin 0.2.0, commit 5f4115b)
still loads and predicts exactly what it predicted then.

tests/fixtures/checkpoint_v0_2 holds a tiny ``roberta_span`` MRPC checkpoint (1 layer,
width 16, a 1,159-symbol dictionary cut from GPT-2's), its data folder's dictionaries and
record, and the old hub's logits on 22 sentence pairs (expected.json). It was made with
the old code from a git worktree of that commit: 40 MRPC train rows through ``python -m
span_plugin.preprocess.cli glue`` and 6 updates of ``fairseq-train``.
"""

import json
import os

import pytest
import torch

from conftest import GPT2_BPE
from span_plugin.hub import SpanHubInterface

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoint_v0_2")
BPE = str(GPT2_BPE)


@pytest.fixture(scope="module")
def expected():
    with open(os.path.join(FIXTURE, "expected.json"), encoding="utf-8") as f:
        return json.load(f)


def test_old_checkpoint_predicts_as_before(expected):
    hub = SpanHubInterface.from_pretrained(
        os.path.join(FIXTURE, "span_classification.pt"), data=os.path.join(FIXTURE, "data"),
        gpt2_encoder_json=os.path.join(BPE, "encoder.json"),
        gpt2_vocab_bpe=os.path.join(BPE, "vocab.bpe"))
    pairs = [tuple(p) for p in expected["pairs"]]
    logits = hub.predict_logits(pairs)
    torch.testing.assert_close(logits, torch.tensor(expected["logits"]), rtol=0, atol=1e-5)
    assert [p["label"] for p in hub.predict(pairs)] == expected["labels"]
