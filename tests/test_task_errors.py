"""Bad input for task span_classification: missing, misaligned and corrupted span
files, spans past their sentence, empty inputs, every span cut away by truncation."""

import os
import shutil

import pytest
import torch
from fairseq.data import data_utils

from conftest import run_main
from test_model_span import build
from test_task_data import read_rows, write_folder
from test_task_train import span_args

from span_plugin.preprocess.binary.span_files import SpanAlignmentError, SpanIndexWriter


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    rows = {"train": read_rows("MRPC", "train.tsv", 8), "valid": read_rows("MRPC", "dev.tsv", 6)}
    # An empty second sentence and an empty pair in valid.
    rows["valid"][1] = ([rows["valid"][1][0][0], ""], rows["valid"][1][1])
    rows["valid"][2] = (["", ""], rows["valid"][2][1])
    return write_folder(tmp_path_factory.mktemp("errors") / "MRPC", rows, regression=False)


def _copy(folder, tmp_path):
    out = tmp_path / "data"
    shutil.copytree(folder, out)
    return out


def _rewrite_spans(prefix, items):
    for ext in ("bin", "idx"):
        os.remove(f"{prefix}.{ext}")
    with SpanIndexWriter(str(prefix)) as w:
        for spans in items:
            w.add(spans)


def test_missing_span_file_says_how_to_build_it(folder, tmp_path):
    data = _copy(folder, tmp_path)
    os.remove(data / "input1" / "valid.spans.idx")
    _, task, _ = build(data)
    with pytest.raises(FileNotFoundError, match=r"input1/valid\.spans.*span-preprocess glue"):
        task.load_dataset("valid")


def test_misaligned_item_count_names_the_file(folder, tmp_path):
    data = _copy(folder, tmp_path)
    _rewrite_spans(data / "input0" / "valid.spans", [[(0, 1)]] * 5)  # valid has 6 lines
    _, task, _ = build(data)
    with pytest.raises(SpanAlignmentError, match=r"input0/valid\.spans\.bin: 5 span items .* 6 sentences"):
        task.load_dataset("valid")


def test_span_past_sentence_names_file_and_item(folder, tmp_path):
    data = _copy(folder, tmp_path)
    _, task, _ = build(data)
    toks = data_utils.load_indexed_dataset(str(data / "input1" / "valid"), task.source_dictionary)
    lengths = [int(n) - 1 for n in toks.sizes]
    items = [[(0, n)] if n else [] for n in lengths]
    items[3] = [(0, lengths[3] + 1)]
    _rewrite_spans(data / "input1" / "valid.spans", items)
    with pytest.raises(SpanAlignmentError, match=r"input1/valid\.spans\.bin: item 3 has span"):
        task.load_dataset("valid")


def test_corrupted_span_file(folder, tmp_path):
    data = _copy(folder, tmp_path)
    path = data / "input0" / "train.spans.bin"
    size = path.stat().st_size
    with open(path, "r+b") as h:
        h.truncate(size - 8)
    _, task, _ = build(data)
    with pytest.raises(SpanAlignmentError, match=r"input0/train\.spans\.bin: .*truncated or corrupt"):
        task.load_dataset("train")


@pytest.mark.slow
def test_fairseq_train_reports_misalignment(folder, tmp_path):
    data = _copy(folder, tmp_path)
    _rewrite_spans(data / "input0" / "train.spans", [[(0, 1)]] * 3)
    proc = run_main("fairseq-train", *span_args(data, tmp_path / "ckpt"), check=False)
    assert proc.returncode != 0
    assert "train.spans.bin: 3 span items but the token file has 8 sentences" in proc.stdout


def test_empty_inputs_load_and_predict(folder):
    _, task, model = build(folder)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    by_id = {int(ds[i]["id"]): ds[i] for i in range(len(ds))}
    # <s> A </s> </s> </s>: B is empty, its spans too
    one_empty = by_id[1]
    assert one_empty["net_input.spans"][:, 1].max() < one_empty["net_input.src_tokens"].numel() - 2
    both_empty = by_id[2]
    assert both_empty["net_input.src_tokens"].tolist() == [0, 2, 2, 2]
    assert both_empty["net_input.spans"].shape == (0, 2)
    model.eval()
    batch = ds.collater([by_id[1], by_id[2], by_id[0]])
    logits, _ = model(**batch["net_input"], classification_head_name="sentence_classification_head")
    assert torch.isfinite(logits).all()


def test_every_span_truncated_away(folder):
    """With room for <s> only, no span survives: the example keeps s = 0."""
    _, task, model = build(folder, "--max-positions", "1")
    task.load_dataset("valid")
    ds = task.dataset("valid")
    items = [ds[i] for i in range(len(ds))]
    assert all(item["net_input.spans"].shape == (0, 2) for item in items)
    batch = ds.collater(items)
    assert batch["net_input"]["spans"].tolist() == [[[0, 0]]] * len(items)
    model.eval()
    logits, _ = model(**batch["net_input"], classification_head_name="sentence_classification_head")
    assert torch.isfinite(logits).all()


def test_random_crop_is_accepted_and_keeps_spans_inside(folder):
    _, task, _ = build(folder, "--shorten-method", "random_crop", "--max-positions", "12")
    task.load_dataset("train")
    ds = task.dataset("train")
    for i in range(len(ds)):
        item = ds[i]
        n = item["net_input.src_tokens"].numel()
        spans = item["net_input.spans"]
        assert n <= 12
        assert (spans[:, 0] < spans[:, 1]).all() and (spans[:, 1] <= n).all()


def test_label_count_mismatch_names_the_files(folder, tmp_path):
    from fairseq.data import Dictionary, indexed_dataset

    data = _copy(folder, tmp_path)
    prefix = str(data / "label" / "valid")
    labels = indexed_dataset.MMapIndexedDataset(prefix)
    kept = [labels[i] for i in range(len(labels) - 1)]  # valid has 6 sentences
    vocab = len(Dictionary.load(str(data / "label" / "dict.txt")))
    builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=vocab)
    for item in kept:
        builder.add_item(item)
    builder.finalize(prefix + ".idx")
    _, task, _ = build(data)
    with pytest.raises(ValueError, match=r"label/valid: 5 labels but .*input0/valid has 6 sentences"):
        task.load_dataset("valid")
