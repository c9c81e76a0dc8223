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
    from span_plugin.hub import SpanHubInterface

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
    from span_plugin.hub import SpanHubInterface

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
    from span_plugin.hub import SpanHubInterface
    from span_plugin.formats.text_inputs import question_pairs

    hub = SpanHubInterface.from_pretrained(CHECKPOINT, data=FIXTURE / "data",
                                           ngrams=FIXTURE / "ngrams.v0_2.txt.gz")
    with pytest.raises(ValueError, match=r"^example 1 holds a lone surrogate U\+DC80 at "
                                         r"character 4, which is not text"):
        hub.predict([("A man.", "A dog."), "bad \udc80 text"])
    with pytest.raises(ValueError, match=r"^example 0, text 1 holds a lone surrogate U\+D800"):
        hub.predict([("A man.", "x\ud800")])
    with pytest.raises(ValueError, match=r"^pair 2: the context holds a lone surrogate"):
        question_pairs([("Who?", "Me."), ("Who?", "Me."), ("Who?", "\udfff")])


def test_the_hub_opens_only_plausible_files(tmp_path):
    """A file given or recorded for the encoder is hashed only when it is a regular file
    of a tokenizer's size: a 2 GiB sparse file is refused by its size (not read for
    seconds), a device by its kind."""
    import time

    import torch

    from span_plugin.convert.safe_load import load_checkpoint
    from span_plugin.hub import SpanHubInterface
    from span_plugin.runtime.data_record import STATE_KEY

    sparse = tmp_path / "encoder.json"
    with open(sparse, "wb") as f:
        f.truncate(2 << 30)
    started = time.monotonic()
    with pytest.raises(ValueError, match=rf"ngrams={sparse}: 2,147,483,648 bytes, more than any "):
        SpanHubInterface.from_pretrained(CHECKPOINT, data=FIXTURE / "data", ngrams=sparse)
    with pytest.raises(ValueError, match=r"gpt2_encoder_json=/dev/zero: not a regular file"):
        SpanHubInterface.from_pretrained(CHECKPOINT, data=FIXTURE / "data",
                                         gpt2_encoder_json="/dev/zero")
    state = load_checkpoint(CHECKPOINT)  # its record names the sparse file
    state["task_state"][STATE_KEY]["encoder"]["files"]["encoder_json"]["path"] = str(sparse)
    torch.save(state, tmp_path / "model.pt")
    with pytest.raises(ValueError, match=rf"encoder.json={sparse}: 2,147,483,648 bytes"):
        SpanHubInterface.from_pretrained(tmp_path / "model.pt", data=FIXTURE / "data",
                                         ngrams=FIXTURE / "ngrams.v0_2.txt.gz")
    data = tmp_path / "data"  # the folder's dictionary: the sparse file
    shutil.copytree(FIXTURE / "data", data)
    with open(data / "input0" / "dict.txt", "wb") as f:
        f.truncate(2 << 30)
    with pytest.raises(ValueError, match=r"input0/dict.txt=.*: 2,147,483,648 bytes, more than"):
        SpanHubInterface.from_pretrained(CHECKPOINT, data=data,
                                         ngrams=FIXTURE / "ngrams.v0_2.txt.gz")
    assert time.monotonic() - started < 30


def test_a_sentencepiece_model_that_is_text_is_named(tmp_path, capsys):
    text = tmp_path / "vocab.txt"
    text.write_text("[PAD]\n[UNK]\nhello\n")
    for bpe in ("sentencepiece", "sentencepiece-line"):
        code, err = run_preprocess(["encode", "A man.", "--bpe", bpe, "--sentencepiece-model",
                                    text, "--segmentation", "none", "--srcdict",
                                    FIXTURE / "data" / "input0" / "dict.txt"],
                                   capsys)
        assert code == 2, err
        assert f"{text}: not a sentencepiece model" in err and "Traceback" not in err, err


def test_readers_bound_a_line(tmp_path, capsys):
    """``--ngrams /dev/zero`` and a 2 GiB line without a line end: a clear error naming
    the file and line, with little memory (the line is read no further than the bound)."""
    import tracemalloc

    table = tmp_path / "rows.tsv"
    table.write_text("sentence\tlabel\nA man.\t1\n")
    huge = tmp_path / "huge.tsv"
    with open(huge, "wb") as f:
        f.write(b"sentence\tlabel\n")
        f.truncate(2 << 30)  # sparse: no line end after the header
    tracemalloc.start()
    try:
        for train, extra, said in (
                (table, ["--ngrams", "/dev/zero"],  # not a file at all: said before reading
                 "/dev/zero: a character device, not a regular file"),
                (huge, [], f"{huge}:2: a line longer than 67,108,864 bytes (no line end within it)")):
            code, err = run_preprocess(["table", "--train", train, "--text-columns", "sentence",
                                        "--label-column", "label", "--out", tmp_path / "out",
                                        *extra, *ENC], capsys)
            assert code == 2, err
            assert said in err, err
        code, err = run_preprocess(["ngrams", "--text", table, huge, "--out", tmp_path / "ng.txt",
                                    "--workers", "1"], capsys)  # a corpus of that line
        assert code == 2 and f"{huge}:2: a line longer than" in err, err
        assert tracemalloc.get_traced_memory()[1] < 1 << 30
    finally:
        tracemalloc.stop()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("block", [7, 1 << 24])
def test_the_line_bound_finds_the_first_long_line(block, tmp_path, monkeypatch):
    """With the bound lowered to 10 bytes (and reading blocks of 7 bytes or whole), the
    first line over it is named by its number; lines up to it read as they are."""
    from span_plugin.formats import lines

    monkeypatch.setattr(lines, "MAX_LINE", 10)
    monkeypatch.setattr(lines, "BLOCK", block)
    path = tmp_path / "rows.txt"
    good = ["a", "", "0123456789", "bb" * 4, "c"]
    path.write_text("\n".join(good) + "\n", encoding="utf-8")
    assert lines.read_file_lines(path) == good
    path.write_text("\n".join(good + ["0123456789x", "d"]) + "\n", encoding="utf-8")
    with pytest.raises(lines.BadInputError, match=rf"^{path}:6: a line longer than 10 bytes"):
        lines.read_file_lines(path)


def test_the_line_bound_agrees_with_a_plain_reading(tmp_path, monkeypatch):
    """Seeded random files of lines 0-13 bytes long, bound 10, blocks of 1-23 bytes:
    an error exactly when a line is longer, naming the first such line."""
    import random

    from span_plugin.formats import lines

    rng = random.Random(5)
    monkeypatch.setattr(lines, "MAX_LINE", 10)
    path = tmp_path / "rows.txt"
    for _ in range(300):
        monkeypatch.setattr(lines, "BLOCK", rng.randint(1, 23))
        text = ["x" * rng.choice([0, 1, 5, 9, 10, 10, 11, 13]) for _ in range(rng.randint(1, 8))]
        content = "\n".join(text) + rng.choice(["", "\n"])
        path.write_text(content, encoding="utf-8")
        text = content.split("\n")
        if text[-1] == "":  # the line end of the last line starts no line
            text.pop()
        long = next((i for i, t in enumerate(text, 1) if len(t) > 10), None)
        if long is None:
            assert lines.read_file_lines(path) == text
        else:
            with pytest.raises(lines.BadInputError, match=rf"^{path}:{long}: a line longer"):
                lines.read_file_lines(path)
