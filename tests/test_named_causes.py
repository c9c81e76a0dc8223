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


def run_preprocess(argv, capsys):
    code = preprocess([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_lone_cr_line_ends_are_named(tmp_path, capsys):
    """Real MRPC rows saved with classic Mac OS line ends: the GLUE and table readers name
    the line ends (they said "no rows" and "no label column" before)."""
    rows = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines()[:12]
    glue = tmp_path / "glue" / "MRPC"
    glue.mkdir(parents=True)
    for split in ("train", "dev"):
        (glue / f"{split}.tsv").write_bytes("\r".join(rows).encode() + b"\r")
    table = tmp_path / "rows.tsv"
    table.write_bytes("\r".join(["sentence\tlabel"] + [f"{r.split(chr(9))[3]}\t{r[0]}"
                                                      for r in rows[1:]]).encode() + b"\r")
    for argv, path in (
            (["glue", "--task", "MRPC", "--glue-dir", tmp_path / "glue"], glue / "train.tsv"),
            (["table", "--train", table, "--text-columns", "sentence", "--label-column",
              "label"], table)):
        code, err = run_preprocess([*argv, "--out", tmp_path / "out", *ENC], capsys)
        assert code == 2, err
        assert f"{path}:1: lines end in a lone carriage return" in err, err
        assert "12 of them, 0 LF line ends" in err and "Traceback" not in err, err
        assert not (tmp_path / "out").exists()


def test_a_malformed_encoder_json_is_named(tmp_path, capsys):
    bad = tmp_path / "encoder.json"
    bad.write_text('{"hello": 1,\n')
    table = tmp_path / "rows.tsv"
    table.write_text("sentence\tlabel\nA man.\t1\n")
    argv = [*ENC]
    argv[1] = bad
    code, err = run_preprocess(["table", "--train", table, "--text-columns", "sentence",
                                "--label-column", "label", "--out", tmp_path / "out", *argv], capsys)
    assert code == 2 and f"{bad}: not valid JSON (" in err and "--gpt2-encoder-json" in err, err


def test_a_lone_surrogate_in_hub_text_names_the_example():
    from span_plugin.inference.hub import SpanHubInterface
    from span_plugin.inference.inputs import question_pairs

    hub = SpanHubInterface.from_pretrained(CHECKPOINT, data=FIXTURE / "data",
                                           ngrams=FIXTURE / "ngrams.v0_2.txt.gz")
    with pytest.raises(ValueError, match=r"^example 1 holds a lone surrogate U\+DC80 at "
                                         r"character 4, which is not text"):
        hub.predict([("A man.", "A dog."), "bad \udc80 text"])
    with pytest.raises(ValueError, match=r"^example 0, text 1 holds a lone surrogate U\+D800"):
        hub.predict([("A man.", "x\ud800")])
    with pytest.raises(ValueError, match=r"^pair 2: the context holds a lone surrogate"):
        question_pairs([("Who?", "Me."), ("Who?", "Me."), ("Who?", "\udfff")])
