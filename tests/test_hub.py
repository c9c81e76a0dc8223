"""Inference: SpanHubInterface on raw text and the span-predict submission command."""

import pytest
import torch

from conftest import GPT2_BPE, TINY_ROBERTA, USER_DIR, run_cli, run_main
from test_task_data import glue_folder, mini_glue
from test_task_train import span_args

from span_plugin.hub import SpanHubInterface

BPE = {"gpt2_encoder_json": GPT2_BPE / "encoder.json", "gpt2_vocab_bpe": GPT2_BPE / "vocab.bpe"}


@pytest.fixture(scope="module")
def mrpc_ckpt(tmp_path_factory):
    save = tmp_path_factory.mktemp("hub_mrpc")
    run_main("fairseq-train", *span_args(glue_folder("MRPC"), save, max_update=2, metric="f1"))
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def hub(mrpc_ckpt):
    return SpanHubInterface.from_pretrained(mrpc_ckpt, data=glue_folder("MRPC"), **BPE)


@pytest.mark.smoke
def test_encode_matches_the_prepared_folder(hub):
    """On-the-fly BPE + segmentation give the same tokens and spans as the folder
    span-preprocess built (and the task's layout)."""
    folder = glue_folder("MRPC")
    hub.task.load_dataset("valid")
    ds = hub.task.dataset("valid")
    a = (folder / "raw" / "valid.input0").read_text(encoding="utf-8").splitlines()
    b = (folder / "raw" / "valid.input1").read_text(encoding="utf-8").splitlines()
    encoded = hub.encode(list(zip(a, b))[:16])
    items = {int(ds[i]["id"]): ds[i] for i in range(len(ds))}
    for i, (tokens, spans) in enumerate(encoded):
        assert tokens.tolist() == items[i]["net_input.src_tokens"].tolist()
        assert spans.tolist() == items[i]["net_input.spans"].tolist()


def test_predict_pairs_batched(hub):
    pairs = [
        ("The cat sat on the mat.", "A cat was sitting on the mat."),
        ("New York is a big city.", "Stocks fell sharply on Monday in New York trading ."),
        ("Short.", ""),
    ]
    out = hub.predict(pairs, batch_size=2)
    assert [set(p) for p in out] == [{"label", "probs"}] * 3
    for p in out:
        assert p["label"] in {"0", "1"}
        assert sum(p["probs"].values()) == pytest.approx(1.0, abs=1e-5)
    one_by_one = torch.cat([hub.predict_logits([x], batch_size=1) for x in pairs])
    assert torch.allclose(one_by_one, hub.predict_logits(pairs, batch_size=3), atol=1e-5)
    with pytest.raises(ValueError, match="mix of single sentences and pairs"):
        hub.predict(["one", ("two", "three")])


@pytest.mark.slow
def test_regression_hub_scores(tmp_path):
    run_main("fairseq-train", *span_args(glue_folder("STS-B"), tmp_path, "--regression-target",
                                         num_classes=1, max_update=1, metric="spearman"))
    hub = SpanHubInterface.from_pretrained(tmp_path / "checkpoint_last.pt", **BPE)
    out = hub.predict([("A man plays a flute.", "A man is playing a flute.")])
    assert set(out[0]) == {"score"} and isinstance(out[0]["score"], float)


@pytest.mark.slow
@pytest.mark.smoke
def test_predict_command_writes_glue_submission(mrpc_ckpt, tmp_path):
    out = tmp_path / "MRPC.tsv"
    run_cli(
        "span-predict", "--checkpoint", mrpc_ckpt, "--data", glue_folder("MRPC"),
        "--glue-dir", mini_glue(), "--task", "MRPC", "--output", out,
        "--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe", GPT2_BPE / "vocab.bpe",
    )
    lines = out.read_text().splitlines()
    test_rows = (mini_glue() / "MRPC" / "test.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    assert lines[0] == "index\tprediction"
    assert len(lines) == 1 + len(test_rows)
    for i, line in enumerate(lines[1:]):
        index, label = line.split("\t")
        assert int(index) == i and label in {"0", "1"}


@pytest.mark.slow
def test_plain_roberta_checkpoint_predicts_without_spans(tmp_path):
    """The baseline (fairseq's roberta, task sentence_prediction) goes through the same
    hub: same tokens, no spans, and the logits its own forward gives on the folder."""
    data = glue_folder("SST-2")
    run_main(
        "fairseq-train", data, "--user-dir", USER_DIR, "--task", "sentence_prediction",
        "--criterion", "sentence_prediction", "--arch", "roberta_base", *TINY_ROBERTA,
        "--num-classes", "2", "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8",
        "--max-update", "1", "--save-dir", tmp_path, "--cpu", "--no-epoch-checkpoints",
        "--num-workers", "0", "--disable-validation", "--init-token", "0",
    )
    hub = SpanHubInterface.from_pretrained(tmp_path / "checkpoint_last.pt", data=data, **BPE)
    assert not hub.reads_spans
    sentences = (data / "raw" / "valid.input0").read_text(encoding="utf-8").splitlines()[:4]
    hub.task.load_dataset("valid")
    ds = hub.task.dataset("valid")
    items = {int(ds[i]["id"]): ds[i] for i in range(len(ds))}
    logits = hub.predict_logits(sentences, batch_size=3)
    for i in range(4):
        tokens = items[i]["net_input.src_tokens"]
        assert hub.encode([sentences[i]])[0][0].tolist() == tokens.tolist()
        direct, _ = hub.model(tokens[None], classification_head_name=hub.head)
        assert torch.allclose(logits[i], direct[0], atol=1e-5)

    # A checkpoint of a task the hub cannot serve is refused by name.
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    state["cfg"]["task"]["_name"] = "masked_lm"
    torch.save(state, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="task 'masked_lm' and model 'roberta_base'"):
        SpanHubInterface.from_pretrained(tmp_path / "other.pt", **BPE)
