"""Errors that name the real cause: a checkpoint given a data folder of another label
set is told so (both tasks, label kinds and counts), not sent to rebuild a whole folder
or remove its record."""

import shutil

import pytest

from conftest import GLUE, GPT2_BPE, ROOT

from span_plugin.cli.preprocess import main as preprocess
from span_plugin.preprocess.records.provenance import ProvenanceError

FIXTURE = ROOT / "tests" / "fixtures" / "checkpoint_v0_2"
CHECKPOINT = FIXTURE / "span_classification.pt"  # MRPC: classes 1, 0
ENC = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
       GPT2_BPE / "vocab.bpe", "--srcdict", FIXTURE / "data" / "input0" / "dict.txt",
       "--workers", "1"]


def glue_folder(tmp_path, task, rows, first_label=None):
    """A real ``span-preprocess glue`` folder of ``task`` from its first ``rows`` rows
    (``first_label``: a row with that label moved first, which sets the label order)."""
    source = tmp_path / "glue" / task
    source.mkdir(parents=True)
    for split in ("train", "dev"):
        lines = (GLUE / task / f"{split}.tsv").read_text(encoding="utf-8-sig").splitlines(True)
        head, body = lines[0], lines[1:rows + 1]
        if first_label is not None:
            body.sort(key=lambda line: line.split("\t")[0] != first_label)
        (source / f"{split}.tsv").write_text(head + "".join(body), encoding="utf-8")
    out = tmp_path / task
    assert preprocess([str(a) for a in ("glue", "--task", task, "--glue-dir", tmp_path / "glue",
                                        "--out", out, *ENC)]) in (0, None)
    return out


@pytest.mark.parametrize("task,first_label,theirs", [
    ("STS-B", None, "task 'STS-B', regression (one value per row)"),
    ("MRPC", "0", "task 'MRPC', 2 classes (0, 1)"),
])
def test_a_folder_of_other_labels_is_named_with_both_label_sets(task, first_label, theirs, tmp_path):
    from span_plugin.inference.hub import SpanHubInterface

    folder = glue_folder(tmp_path, task, 12, first_label)
    with pytest.raises(ProvenanceError) as info:
        SpanHubInterface.from_pretrained(CHECKPOINT, data=folder)
    text = str(info.value)
    assert f"{folder} holds {theirs}" in text, text
    assert f"{CHECKPOINT} was trained on a folder of task 'MRPC', 2 classes (1, 0)" in text, text
    assert "rebuild" not in text and "remove" not in text, text


def test_without_its_record_the_folder_is_not_called_incomplete(tmp_path):
    """Its record removed (as the old advice said), the STS-B folder is still refused:
    it has no label/dict.txt, and the error says it is not the folder of the checkpoint."""
    from span_plugin.inference.hub import SpanHubInterface

    folder = glue_folder(tmp_path, "STS-B", 12)
    (folder / "provenance.json").unlink()
    with pytest.raises(ProvenanceError) as info:
        SpanHubInterface.from_pretrained(CHECKPOINT, data=folder)
    text = str(info.value)
    assert "label/dict.txt: missing" in text and "is not the folder it was trained on" in text, text
    assert "incomplete" not in text and "remove provenance.json" not in text, text
