"""One record of how a folder was made (DATA/provenance.json): the task checks the
folder against it and stores it in every checkpoint (both heads); the hub and
span-predict take their encoder settings from the checkpoint alone, and a changed file
or setting is refused naming both sides."""

import json
import shutil

import pytest
import torch

from conftest import GPT2_BPE, TINY_ROBERTA, USER_DIR, minilm_dir, run_cli, run_main
from test_task_data import mini_glue, spec_args
from test_task_train import span_args

from span_plugin.preprocess.records import provenance
from span_plugin.preprocess.records.encoder_settings import SettingsMismatch, encoder_spec
from span_plugin.hub import SpanHubInterface
from span_plugin.preprocess.segmentation.encoding import EncoderSpec
from span_plugin.preprocess.segmentation.ngrams import default_ngrams_path
from span_plugin.runtime.data_record import STATE_KEY

BPE = {"gpt2_encoder_json": GPT2_BPE / "encoder.json", "gpt2_vocab_bpe": GPT2_BPE / "vocab.bpe"}
PAIRS = [("The cat sat on the mat.", "A cat was sitting on the mat."),
         ("New York is a big city.", "Stocks fell in New York trading.")]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """MRPC rows prepared with a dictionary of our own (a copy of the packaged one's
    first 20,000 entries), and a span checkpoint and a plain one trained on it."""
    root = tmp_path_factory.mktemp("provenance")
    ngrams = root / "my.ngrams.txt"
    import gzip

    with gzip.open(default_ngrams_path(), "rt", encoding="utf-8") as f:
        ngrams.write_text("".join(line for _, line in zip(range(20001), f)), encoding="utf-8")
    data = root / "MRPC-bin"
    run_cli("span-preprocess", "glue", "--task", "MRPC", "--glue-dir", mini_glue(), "--out", data,
            *spec_args(), "--ngrams", ngrams)
    span = root / "span"
    run_main("fairseq-train", *span_args(data, span, max_update=1, metric="f1"))
    plain = root / "plain"
    run_main("fairseq-train", data, "--user-dir", USER_DIR, "--task", "sentence_prediction",
             "--criterion", "span_classification", "--arch", "roberta_base", *TINY_ROBERTA,
             "--num-classes", "2", "--init-token", "0", "--separator-token", "2",
             "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--max-update", "1",
             "--save-dir", plain, "--cpu", "--no-epoch-checkpoints", "--num-workers", "0",
             "--disable-validation")
    return root, data, ngrams, span / "checkpoint_last.pt", plain / "checkpoint_last.pt"


def test_both_heads_store_the_folders_record_in_their_checkpoints(made):
    root, data, ngrams, span, plain = made
    record = json.loads((data / "provenance.json").read_text())
    assert record["encoder"]["ngrams"]["path"] == str(ngrams)
    assert record["encoder"]["ngrams"]["sha256"] == provenance.sha256(ngrams)
    assert record["labels"]["positive"] == "1" and record["inputs"] == 2
    for ckpt in (span, plain):
        stored = torch.load(ckpt, map_location="cpu")["task_state"][STATE_KEY]
        assert {k: v for k, v in stored.items() if k != "data_dir"} == record
        assert stored["data_dir"] == str(data)


def test_hub_needs_only_the_checkpoint(made, tmp_path):
    root, data, ngrams, span, plain = made
    for ckpt in (span, plain):
        hub = SpanHubInterface.from_pretrained(ckpt)
        assert hub.encoder.segmenter.ngrams.path == str(ngrams)
        given = SpanHubInterface.from_pretrained(ckpt, data=data, ngrams=ngrams, **BPE)
        assert torch.equal(hub.predict_logits(PAIRS), given.predict_logits(PAIRS))
    # A file given again may lie anywhere: its content is what counts.
    copy = tmp_path / "elsewhere.txt"
    shutil.copy(ngrams, copy)
    assert SpanHubInterface.from_pretrained(span, ngrams=copy).predict(PAIRS)
    # A pair model given single sentences is an error, not a guess.
    with pytest.raises(ValueError, match=r"trained on sentence pairs .*got single sentences"):
        hub.predict(["one sentence"])


def test_a_changed_dictionary_or_setting_is_refused(made, tmp_path):
    root, data, ngrams, span, plain = made
    lines = ngrams.read_text(encoding="utf-8").splitlines(keepends=True)
    changed = tmp_path / "changed.txt"
    changed.write_text("".join(lines[:-1]), encoding="utf-8")
    recorded = provenance.short(provenance.sha256(ngrams))
    with pytest.raises(SettingsMismatch, match=rf"ngrams={changed} \(sha256 \w+\) is not the file "
                                               rf"{span} was trained with: {ngrams} \(sha256 {recorded}\)"):
        SpanHubInterface.from_pretrained(span, ngrams=changed)
    with pytest.raises(SettingsMismatch, match=r"segmentation='random', but .* segmentation='greedy'"):
        SpanHubInterface.from_pretrained(span, segmentation="random")
    with pytest.raises(SettingsMismatch, match=r"gpt2_encoder_json=.*dict.txt \(sha256 \w+\) is not the file"):
        SpanHubInterface.from_pretrained(span, gpt2_encoder_json=GPT2_BPE / "dict.txt")
    # span-predict says the same in one line, exit status 2.
    proc = run_main("span-predict", "--checkpoint", span, "--split", "valid", "--output",
                    tmp_path / "x.tsv", "--ngrams", changed, check=False)
    assert proc.returncode == 2 and "span-predict: error: ngrams=" in proc.stdout, proc.stdout
    # The recorded file itself edited after training: refused, and how to go on is said.
    moved = root / "moved"
    shutil.copytree(data, moved / "MRPC-bin")
    saved = ngrams.read_bytes()
    try:
        ngrams.write_bytes(saved[:-20])
        with pytest.raises(SettingsMismatch, match=rf"{ngrams} changed since {span} was trained"):
            SpanHubInterface.from_pretrained(span)
    finally:
        ngrams.write_bytes(saved)
    # A data folder whose dictionary is not the recorded one.
    d = moved / "MRPC-bin" / "input0" / "dict.txt"
    d.write_text(d.read_text() + "madeupword0009 0\n")
    with pytest.raises(provenance.ProvenanceError, match=rf"{d}: its content .* is not what the data record in {span}"):
        SpanHubInterface.from_pretrained(span, data=moved / "MRPC-bin")


@pytest.mark.slow
def test_training_checks_the_folder_and_warns_without_a_record(made, tmp_path):
    root, data, ngrams, span, plain = made
    folder = tmp_path / "MRPC-bin"
    shutil.copytree(data, folder)
    valid = folder / "input1" / "valid.spans.bin"
    raw = bytearray(valid.read_bytes())
    raw[8] ^= 1  # still well-formed spans, but not the file span-preprocess made
    valid.write_bytes(bytes(raw))
    proc = run_main("fairseq-train", *span_args(folder, tmp_path / "ckpt", max_update=1, metric="f1"), check=False)
    assert proc.returncode != 0
    assert f"{valid}: its content (sha256 " in proc.stdout and "provenance.json records" in proc.stdout, proc.stdout[-3000:]

    # A folder made before records: it trains, with a warning; its checkpoint then needs
    # the encoder settings given.
    shutil.copy(data / "input1" / "valid.spans.bin", valid)
    (folder / "provenance.json").unlink()
    log = run_main("fairseq-train", *span_args(folder, tmp_path / "old", max_update=1, metric="f1",),
                   "--positive-label", "1").stdout
    assert "has no provenance.json (made before span_plugin 0.2" in log
    old = tmp_path / "old" / "checkpoint_last.pt"
    with pytest.raises(ValueError, match="holds no data record: give the encoder files"):
        SpanHubInterface.from_pretrained(old)
    hub = SpanHubInterface.from_pretrained(old, ngrams=ngrams, **BPE)
    assert hub.record is None and len(hub.predict(PAIRS)) == 2


def test_wordpiece_record_holds_the_tokenizer_and_refuses_another(tmp_path):
    hf = minilm_dir()
    spec = EncoderSpec(bpe="wordpiece", wordpiece=str(hf))
    enc = provenance.encoder_record(spec, hf / "vocab.txt")
    assert enc["files"]["wordpiece"] == provenance.file_entry(hf / "tokenizer.json")
    assert enc["ngrams"]["words"] == "bert" and enc["ngrams"]["packaged"] == "ngrams.default.bert.txt.gz"
    record = {"encoder": enc}
    assert encoder_spec(record, {}, "ckpt.pt").wordpiece == str(hf / "tokenizer.json")
    assert encoder_spec(record, {"wordpiece": str(hf)}, "ckpt.pt").bpe == "wordpiece"
    # The same vocabulary as a bare vocab.txt is another file: refused, naming both.
    with pytest.raises(SettingsMismatch, match=rf"wordpiece={hf / 'vocab.txt'} .* is not the file ckpt.pt "
                                               rf"was trained with: {hf / 'tokenizer.json'}"):
        encoder_spec(record, {"wordpiece": str(hf / "vocab.txt")}, "ckpt.pt")
    with pytest.raises(SettingsMismatch, match="given, but ckpt.pt was trained with the wordpiece encoder"):
        encoder_spec(record, {"gpt2_encoder_json": str(GPT2_BPE / "encoder.json")}, "ckpt.pt")
