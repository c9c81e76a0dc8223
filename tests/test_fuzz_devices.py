"""Paths that are not files (issue 66, part 6): every reader of a user's path, given a
character device (/dev/zero), a FIFO, a socket or a folder, says what it is in one line
naming the path, exit 2, without opening it for a blocking read; ``span-preprocess
check`` refuses a folder holding one (and bounds what it reads of a regular file); text
holding NUL characters is not text (a QA answer is never made of NULs). Each case runs
under an alarm, so that a regression fails instead of hanging."""

import contextlib
import json
import os
import shutil
import signal
import socket
import tracemalloc

import pytest

from conftest import DATA, GLUE, GPT2_BPE, small_conll_folder

from span_plugin.cli.preprocess import main as preprocess

ENC = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
       GPT2_BPE / "vocab.bpe", "--srcdict", GPT2_BPE / "dict.txt", "--workers", "1"]
SECONDS = 20  # no case comes near it; a read that blocks or never ends does


@contextlib.contextmanager
def within(seconds=SECONDS):
    """Fail (not hang) when the block runs longer than ``seconds``: a blocked open() of a
    FIFO or an endless read of /dev/zero is interrupted by the alarm."""
    def expired(signum, frame):
        raise AssertionError(f"still running after {seconds} s: it blocked or read for ever")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


KIND_WORDS = {"zero": "a character device", "fifo": "a FIFO (named pipe)", "socket": "a socket",
              "folder": "a folder"}


@pytest.fixture(scope="module")
def not_files(tmp_path_factory):
    """{kind: path}: /dev/zero, a FIFO, a bound Unix socket, a folder."""
    root = tmp_path_factory.mktemp("not_files")
    os.mkfifo(root / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock"))
    (root / "dir").mkdir()
    yield {"zero": "/dev/zero", "fifo": str(root / "fifo"), "socket": str(root / "sock"),
           "folder": str(root / "dir")}
    sock.close()


def run_preprocess(argv, capsys):
    """span-preprocess in this process: (exit status, what it printed)."""
    with within():
        code = preprocess([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def preprocess_cases(path, out):
    """(name, argv) of every span-preprocess reader of a user's file, on ``path``."""
    glue = out / "glue"
    (glue / "RTE").mkdir(parents=True)
    os.symlink(path, glue / "RTE" / "train.tsv")
    table = ["--text-columns", "a", "--label-column", "b"]
    rows = out / "rows.tsv"
    rows.write_text("a\tb\nA man.\t1\n")
    cases = [
        ("table", ["table", "--train", path, *table, "--out", out / "t", *ENC]),
        ("glue", ["glue", "--task", "RTE", "--glue-dir", glue, "--out", out / "g", *ENC]),
        ("conll", ["conll", "--train", path, "--out", out / "c", *ENC]),
        ("pairs", ["pairs", "--train", path, "--out", out / "p", *ENC]),
        ("align-pairs", ["align-pairs", "--input", path, "--out", out / "a.jsonl"]),
        ("qa", ["qa", "--train", path, "--out", out / "q", *ENC]),
        ("qa-split", ["qa-split", path, "--first", "1", "--out-first", out / "1.json",
                      "--out-rest", out / "2.json"]),
        ("qa-sample", ["qa-sample", path, "--questions", "3", "--out", out / "s.json"]),
        ("ngrams --text", ["ngrams", "--text", path, "--out", out / "n.txt", "--workers", "1"]),
        ("ngrams --wikitext", ["ngrams", "--wikitext", path, "--out", out / "w.txt",
                               "--workers", "1"]),
        ("binarize", ["binarize", path, out / "b" / "train", *ENC]),
        ("pretrain", ["pretrain", "--train", path, "--out", out / "pt", *ENC]),
        ("stats", ["stats", "--text", path]),
        ("encode --ngrams", ["encode", "A man.", "--ngrams", path, *ENC]),
        ("table --srcdict", ["table", "--train", rows, *table, "--out", out / "d", *ENC[:4],
                             "--srcdict", path, "--workers", "1"]),
        ("--gpt2-encoder-json", ["encode", "A man.", "--gpt2-encoder-json", path, *ENC[2:]]),
        ("--gpt2-vocab-bpe", ["encode", "A man.", *ENC[:2], "--gpt2-vocab-bpe", path, *ENC[4:]]),
        ("--sentencepiece-model", ["encode", "A man.", "--bpe", "sentencepiece",
                                   "--sentencepiece-model", path]),
        ("ngrams --from-dictionary", ["ngrams", "--from-dictionary", path, "--top-k", "3",
                                      "--out", out / "f.txt"]),
        ("align-pairs --exclude-sentences-of", ["align-pairs", "--input", GLUE / "MRPC" / "dev.tsv",
                                                "--exclude-sentences-of", path, "--out",
                                                out / "x.jsonl"]),
    ]
    if not os.path.isdir(path):  # a folder is where these look for their files
        cases += [("--wordpiece", ["encode", "A man.", "--bpe", "wordpiece", "--wordpiece", path]),
                  ("ngrams --task-rows", ["ngrams", "--text", rows, "--task-rows", path,
                                          "--out", out / "r.txt", "--workers", "1"])]
    return cases


@pytest.mark.parametrize("kind", list(KIND_WORDS))
def test_every_preprocess_reader_names_what_the_path_is(kind, not_files, tmp_path, capsys):
    path = not_files[kind]
    failures = []
    for name, argv in preprocess_cases(path, tmp_path):
        code, out = run_preprocess(argv, capsys)
        lines = [x for x in out.splitlines() if "error:" in x]
        named = str(tmp_path / "glue" / "RTE" / "train.tsv") if name == "glue" else path
        if not (code == 2 and len(lines) == 1 and named in lines[0]
                and f": {KIND_WORDS[kind]}, not a regular file" in lines[0]):
            failures.append((name, code, out[-400:]))
    assert not failures, failures


@pytest.mark.parametrize("kind", list(KIND_WORDS))
def test_the_prediction_readers_name_what_the_path_is(kind, not_files, tmp_path):
    """What span-predict reads besides the model: --input (SQuAD/MRQA, span pairs), a
    GLUE TSV of --glue-dir, a folder's raw rows, a tagging folder's items, its record,
    its label names."""
    from span_plugin.files.errors import NotAFileError
    from span_plugin.formats.lines import read_file_lines
    from span_plugin.formats.squad import read_qa
    from span_plugin.portable.conll_files import read_items
    from span_plugin.portable.glue_files import (read_folder_rows, read_label_names,
                                                  read_test_rows)
    from span_plugin.preprocess.records.provenance import read_record

    path = not_files[kind]
    (tmp_path / "RTE").mkdir()
    os.symlink(path, tmp_path / "RTE" / "test.tsv")
    folder = tmp_path / "folder"
    for sub in ("raw", "label"):
        (folder / sub).mkdir(parents=True)
    for name in ("raw/test.input0", "raw/test.label", "raw/test.source", "label/dict.txt",
                 "provenance.json"):
        os.symlink(path, folder / name)
    readers = [lambda: read_qa(path, require_answers=False, official=True),
               lambda: read_file_lines(path),  # span pairs' --input
               lambda: read_test_rows(tmp_path, "RTE", "test"),
               lambda: read_folder_rows(folder, "test"),
               lambda: read_items(folder, "test"),
               lambda: read_record(folder),
               lambda: read_label_names(folder)]
    for read in readers:
        with within(), pytest.raises(NotAFileError) as err:
            read()
        assert f": {KIND_WORDS[kind]}, not a regular file" in str(err.value)


@pytest.mark.parametrize("kind", list(KIND_WORDS))
def test_a_checkpoint_path_that_is_not_a_file(kind, not_files):
    """span-predict/span-export/span-convert's checkpoint check: named, never opened."""
    from span_plugin.convert.safe_load import NotACheckpointError, check_file

    with within(), pytest.raises(NotACheckpointError) as err:
        check_file(not_files[kind])
    assert f"{not_files[kind]} is not a checkpoint: it is {KIND_WORDS[kind]};" in str(err.value)


@pytest.fixture(scope="module")
def tagging_folder(tmp_path_factory):
    return small_conll_folder(tmp_path_factory.mktemp("devices_conll"))


@pytest.mark.parametrize("kind", list(KIND_WORDS))
@pytest.mark.parametrize("member", ["raw/valid.label", "label/tags.txt", "provenance.json",
                                    "input0/valid.idx"])
def test_check_refuses_a_folder_holding_a_path_that_is_not_a_file(kind, member, not_files,
                                                                   tagging_folder, tmp_path,
                                                                   capsys):
    folder = tmp_path / "bin"
    shutil.copytree(tagging_folder, folder)
    (folder / member).unlink()
    os.symlink(not_files[kind], folder / member)
    code, out = run_preprocess(["check", folder], capsys)
    assert code == 1, out
    said = (f"Is a directory: '{folder / member}'" if kind == "folder" and member.endswith(".idx")
            else f"{folder / member}: {KIND_WORDS[kind]}, not a regular file")
    assert out.startswith("span-preprocess check: FAILED: ") and said in out, out


def test_check_bounds_what_it_reads(tagging_folder, tmp_path, capsys):
    """A label file of 2 GiB without a line end (sparse): named by file and line, read no
    further than the line bound, in little memory."""
    folder = tmp_path / "bin"
    shutil.copytree(tagging_folder, folder)
    with open(folder / "raw" / "valid.label", "r+b") as f:
        f.seek(0, os.SEEK_END)
        f.truncate(2 << 30)
    tracemalloc.start()
    try:
        code, out = run_preprocess(["check", folder], capsys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 1, out
    assert f"{folder / 'raw' / 'valid.label'}:9: a line longer than" in out, out
    assert peak < 1 << 30


def test_text_with_nul_characters_is_not_text(tmp_path, capsys):
    """A SQuAD context, question or answer holding NULs is refused by file, question and
    character (span-preprocess qa, span-predict --input); so is a hub input."""
    from span_plugin.formats.squad import read_qa
    from span_plugin.formats.text_inputs import question_pairs

    source = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    paragraph = source["data"][0]["paragraphs"][0]
    qa = paragraph["qas"][0]
    nuls = "\0" * 21
    cases = {"context": (dict(paragraph, context=paragraph["context"] + nuls, qas=[qa]),
                         "the paragraph 'context'", len(paragraph["context"])),
             "question": (dict(paragraph, qas=[dict(qa, question=nuls + qa["question"])]),
                          "the question 'question'", 0)}
    for name, (par, what, at) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
                                                                "paragraphs": [par]}]}))
        with pytest.raises(ValueError, match=f"{what} holds a NUL character .U.0000. at "
                                             f"character {at}, which is not text"):
            read_qa(path, require_answers=False, official=True)
        code, out = run_preprocess(["qa", "--train", path, "--out", tmp_path / name,
                                    "--on-bad", "error", *ENC], capsys)
        assert code == 2 and f"{path}: article 1 (t), paragraph 1" in out \
            and "NUL character" in out, out
    with pytest.raises(ValueError, match="pair 0: the context holds a NUL character"):
        question_pairs([("Who?", "Ann" + nuls)])


def test_a_qa_folder_with_nul_text_is_refused_by_line(tmp_path):
    """raw/{split}.jsonl of a folder made before NULs were refused: span-predict --split
    names its line instead of answering with NULs."""
    from span_plugin.preprocess.folders.qa import read_records

    record = {"id": "q1", "question": "Who?", "context": "Ann" + "\0" * 21, "answers": [],
              "impossible": False}
    path = tmp_path / "valid.jsonl"
    path.write_text(json.dumps({**record, "context": "Ann Lee."}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(ValueError, match=f"{path}:2: the context holds a NUL character"):
        read_records(path)


@pytest.mark.slow
def test_span_predict_qa_never_answers_with_nuls(qa_checkpoint, tmp_path, capsys):
    """span-predict --input with a context of 21 NULs after its text: exit 2 naming the
    file and question; the hub refuses such a pair; no predictions file."""
    from span_plugin.cli.predict import main as predict
    from span_plugin.hub import SpanHubInterface

    source = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    paragraph = dict(source["data"][0]["paragraphs"][0])
    paragraph["qas"] = paragraph["qas"][:2]
    paragraph["context"] += "\0" * 21
    path = tmp_path / "nul.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
                                                            "paragraphs": [paragraph]}]}))
    out = tmp_path / "predictions.json"
    with within(120):
        code = predict(["--checkpoint", str(qa_checkpoint), "--input", str(path), "--output",
                        str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}: article 1 (t), paragraph 1" in err and "NUL character" in err, err
    assert not out.exists()
    hub = SpanHubInterface.from_pretrained(qa_checkpoint)
    with pytest.raises(ValueError, match="pair 0: the context holds a NUL character"):
        hub.predict_answers([("Who?", "Ann" + "\0" * 21)])
