"""An input is never destroyed, and one writer at a time (span_plugin.files.outputs):
builders and span-convert refuse an output that is or holds one of their inputs before
writing anything; a second writer of an output exits 2 naming the first one's PID and
command; the lock of a killed writer is taken over. Inputs are real GLUE rows."""

import os
import signal
import subprocess
import sys

import pytest

from conftest import GLUE
from test_conll_messy import DICT, ENC  # GPT-2 BPE, no segmentation
from span_plugin.cli import convert as convert_cli
from span_plugin.cli import preprocess as preprocess_cli
from span_plugin.files import outputs
from span_plugin.files.outputs import OutputError, lock_path, locked, writing


def head(path, n):
    with open(path, encoding="utf-8") as f:
        return "".join(next(f) for _ in range(n))


def table_args(out, train, *extra):
    return ["table", "--out", str(out), "--train", str(train), "--text-columns", "sentence",
            "--label-column", "label", *map(str, ENC), *map(str, extra)]


@pytest.fixture
def sst2(tmp_path):
    path = tmp_path / "sst2_train.tsv"
    path.write_text(head(GLUE / "SST-2" / "train.tsv", 25))
    return path


def test_train_file_inside_out_is_refused_before_anything_is_written(tmp_path, sst2, capsys):
    folder = tmp_path / "F"
    folder.mkdir()
    mine = folder / "my_train.tsv"
    mine.write_bytes(sst2.read_bytes())
    assert preprocess_cli.main(table_args(folder, mine)) == 2
    err = capsys.readouterr().err
    assert f"--out {folder} holds the input --train {mine}" in err
    assert mine.read_bytes() == sst2.read_bytes() and os.listdir(folder) == ["my_train.tsv"]
    assert sorted(os.listdir(tmp_path)) == ["F", "sst2_train.tsv"]  # no partial, no lock


def test_out_equal_to_an_input_through_a_link_or_a_dictionary_inside_it(tmp_path, sst2, capsys):
    # --out a symbolic link to the folder holding --train: the same folder.
    (tmp_path / "real").mkdir()
    train = tmp_path / "real" / "train.tsv"
    train.write_bytes(sst2.read_bytes())
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert preprocess_cli.main(table_args(tmp_path / "link", train)) == 2
    assert "holds the input --train" in capsys.readouterr().err and train.exists()
    # a --srcdict inside --out would go with the folder too
    (tmp_path / "enc").mkdir()
    srcdict = tmp_path / "enc" / "dict.txt"
    srcdict.write_bytes(open(DICT, "rb").read())
    assert preprocess_cli.main(table_args(tmp_path / "enc", sst2, "--srcdict", str(srcdict))) == 2
    assert f"holds the input --srcdict {srcdict}" in capsys.readouterr().err
    assert srcdict.read_bytes() == open(DICT, "rb").read()


def test_glue_out_equal_to_the_task_folder_is_refused(tmp_path, capsys):
    glue = tmp_path / "glue"
    (glue / "WNLI").mkdir(parents=True)
    for split, n in (("train", 20), ("dev", 8)):
        (glue / "WNLI" / f"{split}.tsv").write_text(head(GLUE / "WNLI" / f"{split}.tsv", n))
    before = {p: (glue / "WNLI" / p).read_bytes() for p in os.listdir(glue / "WNLI")}
    code = preprocess_cli.main(["glue", "--task", "WNLI", "--glue-dir", str(glue), "--out",
                                str(glue / "WNLI"), *map(str, ENC)])
    assert code == 2
    assert f"--out {glue / 'WNLI'} is the input --glue-dir {glue / 'WNLI'}" in capsys.readouterr().err
    assert {p: (glue / "WNLI" / p).read_bytes() for p in os.listdir(glue / "WNLI")} == before


def test_ngrams_out_equal_to_its_text_is_refused(tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text(head(GLUE / "SST-2" / "train.tsv", 30))
    code = preprocess_cli.main(["ngrams", "--text", str(text), "--out", str(text)])
    assert code == 2 and f"--out {text} is the input --text {text}" in capsys.readouterr().err
    assert text.read_text() == head(GLUE / "SST-2" / "train.tsv", 30)


def test_convert_out_equal_to_the_hf_folder_is_refused(tmp_path, capsys):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    for cmd in ("bert", "roberta"):
        assert convert_cli.main([cmd, "--hf-dir", str(hf), "--out", str(hf), "--force"]) == 2
        assert f"--out {hf} is the input --hf-dir {hf}" in capsys.readouterr().err
    assert os.listdir(hf) == ["vocab.txt"]


def _holder(path, command):
    """A process holding the lock of ``path`` as a writer does, until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from span_plugin.files.outputs import locked\n"
         f"with locked({str(path)!r}, {command!r}):\n"
         "    print('held', flush=True)\n    time.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_second_writer_names_the_first_and_a_killed_writers_lock_is_taken(tmp_path, sst2, capsys):
    out = tmp_path / "out"
    first = _holder(out, "span-preprocess table --out out ...")
    try:
        assert preprocess_cli.main(table_args(out, sst2)) == 2
        err = capsys.readouterr().err
        assert (f"{out} is being written by process {first.pid} (span-preprocess table "
                f"--out out ...), which holds {out}.lock") in err
        assert not out.exists()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # killed: its lock file stays, with its PID, but the lock went with it
    assert os.path.exists(lock_path(out))
    assert preprocess_cli.main(table_args(out, sst2)) == 0
    assert (out / "provenance.json").exists() and not os.path.exists(lock_path(out))


def _killed_writer_with_a_child(path, child_seconds):
    """A writer holding the lock of ``path`` that started a child (which inherits the
    lock) and was then killed alone; returns (the writer's PID, the child)."""
    writer = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, subprocess, sys, time\n"
         "from span_plugin.files.outputs import lock_path\n"
         f"fd = os.open(lock_path({str(path)!r}), os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "os.write(fd, f'{os.getpid()} recipe.sh\\n'.encode())\n"
         f"child = subprocess.Popen(['sleep', '{child_seconds}'], pass_fds=(fd,))\n"
         "print(child.pid, flush=True)\ntime.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True)
    child = int(writer.stdout.readline())
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    return writer.pid, child


def test_a_killed_writers_children_are_waited_for_and_named_when_they_stay(tmp_path, monkeypatch):
    # A recipe killed with its process group and relaunched at once: the children exit
    # a moment after the recipe, and the relaunch waits for them (CI met this race).
    out = tmp_path / "out"
    _killed_writer_with_a_child(out, 1.5)
    with locked(out):
        pass
    # A child that stays is named as what holds the lock, after a bounded wait.
    monkeypatch.setattr(outputs, "ENDED_HOLDER_WAIT", 0.5)
    pid, child = _killed_writer_with_a_child(out, 60)
    try:
        with pytest.raises(outputs.OutputBusyError, match=rf"process {pid} \(recipe.sh\) has ended, but a "
                                              rf"process it started still holds {out}.lock after 0.5 s"):
            with locked(out):
                pass
    finally:
        os.kill(child, signal.SIGKILL)


def test_locks_are_reentrant_in_a_process_and_cover_every_output(tmp_path):
    a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
    with writing({"--output": [a, b]}):
        with locked(a):  # the same process again (a command, then its builder)
            pass
        assert os.path.exists(lock_path(a)) and os.path.exists(lock_path(b))
        other = subprocess.run(
            [sys.executable, "-c", "from span_plugin.files.outputs import locked\n"
             f"with locked({str(b)!r}): pass"], capture_output=True, text=True)
        assert other.returncode != 0 and "OutputBusyError" in other.stderr
        assert f"is being written by process {os.getpid()}" in other.stderr
    assert not os.path.exists(lock_path(a)) and not os.path.exists(lock_path(b))
    with pytest.raises(OutputError, match="is the input --input"):
        with writing({"--output": a}, {"--input": a}):
            pass


def test_predict_refuses_an_output_over_its_input_or_checkpoint_and_a_held_output(tmp_path, capsys):
    from span_plugin.cli import predict as predict_cli

    pairs, checkpoint = tmp_path / "pairs.jsonl", tmp_path / "model.pt"
    pairs.write_text('{"sentence1": "a", "sentence2": "b", "phrases": []}\n')
    checkpoint.write_bytes(b"not read: refused before")
    for output, named in ((pairs, "is the input --input"), (checkpoint, "is the input --checkpoint"),
                          (tmp_path, "holds the input --checkpoint")):
        code = predict_cli.main(["--checkpoint", str(checkpoint), "--input", str(pairs),
                                 "--output", str(output)])
        assert code == 2 and f"--output {output} {named}" in capsys.readouterr().err
    assert pairs.read_text().startswith('{"sentence1"') and checkpoint.read_bytes().startswith(b"not")
    out = tmp_path / "predictions.jsonl"
    first = _holder(out, "span-predict --output predictions.jsonl")
    try:
        code = predict_cli.main(["--checkpoint", str(checkpoint), "--input", str(pairs),
                                 "--output", str(out)])
        assert code == 2
        assert f"{out} is being written by process {first.pid}" in capsys.readouterr().err
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert not out.exists()


def test_resume_and_strip_take_their_outputs_as_every_writer(tmp_path, capsys):
    from span_plugin.runtime import checkpoints, transfer

    save = tmp_path / "checkpoints"
    save.mkdir()
    (save / "checkpoint_last.pt.tmp").write_bytes(b"a save a live run is writing")
    first = _holder(save, "fairseq-train data --save-dir checkpoints")
    try:  # resume would set aside and remove files under the run that writes them
        assert checkpoints.main(["resume", str(save)]) == 2
        assert f"is being written by process {first.pid} (fairseq-train" in capsys.readouterr().err
        assert (save / "checkpoint_last.pt.tmp").exists()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"refused before it is read")
    assert transfer.main(["strip", str(ckpt), str(ckpt)]) == 2
    assert f"out {ckpt} is the input checkpoint {ckpt}" in capsys.readouterr().err
    assert ckpt.read_bytes() == b"refused before it is read"
