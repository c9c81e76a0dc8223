"""span-predict on large files (issue 69 part 2): rows sorted by length into batches and
written in the input's order, read and written a chunk at a time, a progress bar on a
terminal only. A tiny MRPC model, trained here for 2 updates on real rows and exported
with span-export hf, predicts the folder's real dev and test pairs; a tiny span-labeling
model and the suite's QA model check that their outputs sort batches without changing
what they write.
"""

import fcntl
import os
import pty
import struct
import subprocess
import termios
import warnings

import pytest

from conftest import (BIN, GLUE, TINY_ROBERTA, USER_DIR, fairseq_train, small_conll_folder,
                      tiny_train_args)
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_file_lines, stream_file_lines
from span_plugin.formats.text_inputs import InputCutWarning, one_cut_warning, warn_cut
from test_task_data import glue_folder
from test_task_train import span_args


@pytest.fixture(scope="module")
def mrpc(tmp_path_factory):
    """``(checkpoint, exported folder, task folder)`` of a tiny MRPC span model."""
    from span_plugin.export.model_export import export_model

    root = tmp_path_factory.mktemp("predict_large")
    data = glue_folder("MRPC")
    fairseq_train([*span_args(data, root / "ckpt", max_update=2), "--disable-validation"])
    checkpoint = root / "ckpt" / "checkpoint_last.pt"
    export_model(checkpoint, root / "hf")
    return checkpoint, root / "hf", data


def _predict(*argv):
    from span_plugin.cli.predict import main

    assert main([str(a) for a in argv]) == 0


@pytest.mark.slow
def test_sorted_batches_write_what_file_order_writes(mrpc, tmp_path):
    """The checkpoint and its exported folder write the same bytes with batches sorted by
    length as in file order (batch 4, so sorting changes every batch), for the folder's
    splits and for a GLUE TSV."""
    checkpoint, folder, data = mrpc
    written = {}
    for source in (("--checkpoint", checkpoint), ("--model", folder, "--data", data)):
        for order in ("length", "file"):
            out = tmp_path / f"{source[0][2:]}-{order}"
            _predict(*source, "--split", "valid", "test", "--batch-size", "4", "--batch-order",
                     order, "--output", out / "valid.tsv", out / "test.tsv")
            _predict(*source, "--glue-dir", GLUE, "--task", "MRPC", "--split", "dev",
                     "--batch-size", "4", "--batch-order", order, "--output", out / "dev.tsv")
            written[out.name] = {f: (out / f).read_bytes() for f in ("valid.tsv", "test.tsv",
                                                                     "dev.tsv")}
    assert len({tuple(sorted(w.items())) for w in written.values()}) == 1, \
        {k: {f: len(b) for f, b in w.items()} for k, w in written.items()}
    files = written["checkpoint-length"]
    assert len(files["test.tsv"].decode().splitlines()) == 65  # header + 64 rows
    assert len(files["dev.tsv"].decode().splitlines()) == 409


@pytest.mark.slow
def test_sorted_batches_hold_less_padding(mrpc):
    """Sorted batches of the dev rows pad fewer tokens than batches in file order, and
    give the same logits, row for row."""
    from span_plugin.portable.glue_files import read_test_rows
    from span_plugin.portable import load_model

    model = load_model(mrpc[1])
    rows = read_test_rows(str(GLUE), "MRPC", "dev")
    widths = {}
    forward = model.forward_batch

    def counting(tokens, *args, **kwargs):
        widths[order].append((len(tokens), max(len(t) for t in tokens),
                              sum(len(t) for t in tokens)))
        return forward(tokens, *args, **kwargs)

    model.forward_batch = counting
    logits = {}
    for order in ("length", "file"):
        widths[order] = []
        logits[order] = model.predict_logits(rows, batch_size=8, order=order)
    padding = {k: sum(n * w - real for n, w, real in v) for k, v in widths.items()}
    assert padding["length"] < padding["file"] / 3, padding
    assert (logits["length"] - logits["file"]).abs().max() < 1e-5


class _Counted:
    """The rows of a list, counting how many were taken."""

    def __init__(self, rows):
        self.rows, self.taken = rows, 0

    def __iter__(self):
        for row in self.rows:
            self.taken += 1
            yield row


@pytest.mark.slow
def test_rows_are_read_a_chunk_ahead_and_written_in_order(mrpc, tmp_path):
    """The writer reads no row past the chunk it predicts, and chunks of 7 rows write
    the bytes one chunk of all rows writes."""
    from span_plugin.portable.glue_files import read_test_rows, stream_predictions
    from span_plugin.portable import load_model

    model = load_model(mrpc[1])
    rows = read_test_rows(str(GLUE), "MRPC", "dev")
    counted = _Counted(rows)
    predict = model.predict
    done = []

    def watched(chunk, **kwargs):
        done.append(len(chunk))
        assert counted.taken == sum(done)  # no row read past the chunk being predicted
        return predict(chunk, **kwargs)

    model.predict = watched
    assert stream_predictions(model, counted, tmp_path / "small.tsv", "dev.tsv",
                              chunk_rows=7) == 408
    assert done == [7] * 58 + [2]
    model.predict = predict
    stream_predictions(model, rows, tmp_path / "whole.tsv", "dev.tsv", chunk_rows=10_000)
    assert (tmp_path / "small.tsv").read_bytes() == (tmp_path / "whole.tsv").read_bytes()


def test_folder_rows_stream_as_they_read_and_a_missing_partner_is_named(tmp_path):
    """The raw pair files of a real MRPC folder stream as read_folder_rows reads them
    (blocks of 256 bytes: many reads); a second input one line short is the error naming
    the line without a partner, raised when the short file ends."""
    import shutil

    from span_plugin.portable.glue_files import read_folder_rows, stream_folder_rows

    data = tmp_path / "MRPC"
    shutil.copytree(glue_folder("MRPC") / "raw", data / "raw")
    assert list(stream_folder_rows(str(data), "test", block=256)) == \
        read_folder_rows(str(data), "test")
    path = data / "raw" / "test.input1"
    assert list(stream_file_lines(path, 256)) == read_file_lines(path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:-1]), encoding="utf-8")
    rows = stream_folder_rows(str(data), "test", block=256)
    for _ in range(63):
        next(rows)
    with pytest.raises(BadInputError, match=r"test.input1: 63 lines but .*test.input0 has "
                                            r"64; line 64 has no partner"):
        next(rows)


def test_chunks_cut_count_in_one_warning():
    """Inside one_cut_warning, cuts reported chunk by chunk are one warning of the
    totals, as one call over every row would give."""
    with pytest.warns(InputCutWarning) as seen:
        with one_cut_warning():
            warn_cut([3, 12], 10, "how")
            warn_cut([10, 10, 15], 10, "how")
    assert [str(w.message) for w in seen] == [
        "2 of 5 inputs are longer than the model's 10 positions: 7 tokens cut (how)"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with one_cut_warning():
            warn_cut([3, 10], 10, "how")


def _span_predict(argv, terminal):
    """stderr of span-predict in a child, on a pseudo-terminal or a pipe."""
    command = [str(BIN / "span-predict"), *map(str, argv)]
    if not terminal:
        return subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=600, check=True).stderr
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a sized terminal
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=follower)
    os.close(follower)
    out = b""
    while True:
        try:
            block = os.read(leader, 4096)
        except OSError:  # the child closed its side
            break
        if not block:
            break
        out += block
    assert proc.wait(timeout=600) == 0, out[-2000:]
    os.close(leader)
    return out.decode("utf-8", "replace")


@pytest.mark.slow
def test_a_progress_bar_on_a_terminal_only(mrpc, tmp_path):
    """On a terminal, span-predict --model shows a bar counting rows and rows/s; into a
    pipe (a log), only the summary line."""
    folder, data = mrpc[1], mrpc[2]
    argv = ["--model", folder, "--data", data, "--split", "test", "--output"]
    shown = _span_predict([*argv, tmp_path / "tty.tsv"], terminal=True)
    assert "rows/s" in shown and "/64" in shown, shown
    logged = _span_predict([*argv, tmp_path / "log.tsv"], terminal=False)
    assert logged.strip().splitlines() == [f"{tmp_path / 'log.tsv'}: 64 predictions"], logged
    assert (tmp_path / "tty.tsv").read_bytes() == (tmp_path / "log.tsv").read_bytes()


def _outputs(argv, **outputs):
    """``{name: bytes}`` of the files ``outputs`` (``name=path``) that span-predict
    ``argv`` with ``--name path`` for each wrote."""
    _predict(*argv, *(a for name, path in outputs.items()
                      for a in ("--" + name.replace("_", "-"), path)))
    return {name.replace("_", "-"): path.read_bytes() for name, path in outputs.items()}


@pytest.mark.slow
def test_tagging_and_qa_outputs_sort_without_changing_them(qa_checkpoint, qa_folder, tmp_path):
    """A span-labeling checkpoint's entities and scores on a real CoNLL split, and the QA
    checkpoint's answers to real SQuAD questions, checkpoint and exported folder: batches
    of 2 (tagging) and 4 (QA) sorted by length write what batches in file order write
    (n-best scores within 1e-6). On a terminal the tagging output shows its progress."""
    import json

    from span_plugin.export.model_export import export_model

    (tmp_path / "conll").mkdir()
    data = small_conll_folder(tmp_path / "conll")
    fairseq_train([data, "--user-dir", USER_DIR, "--task", "span_labeling", "--criterion",
                   "span_labeling", "--arch", "roberta_tagging", *TINY_ROBERTA, "--init-token",
                   "0", "--max-span-words", "4", *tiny_train_args(tmp_path / "ner")])
    tagger = tmp_path / "ner" / "checkpoint_last.pt"
    export_model(tagger, tmp_path / "ner-hf")
    export_model(qa_checkpoint, tmp_path / "qa-hf")
    for source in (("--checkpoint", tagger), ("--model", tmp_path / "ner-hf")):
        found = {}
        for order in ("length", "file"):
            out = tmp_path / f"ner-{source[0][2:]}-{order}"
            found[order] = _outputs([*source, "--data", data, "--split", "valid",
                                     "--batch-size", "2", "--batch-order", order],
                                    spans_out=out / "valid.jsonl", results=out / "results.json")
        assert found["length"]["spans-out"] == found["file"]["spans-out"], source
        scores = [json.loads(f["results"])["dev"] for f in found.values()]
        assert scores[0] == scores[1] and scores[0]["valid"]["items"] == 8
    shown = _span_predict(["--model", tmp_path / "ner-hf", "--data", data, "--split", "valid",
                           "--spans-out", tmp_path / "tty.jsonl"], terminal=True)
    assert "rows/s" in shown and "/8" in shown, shown  # the items' progress, on a terminal
    for source in (("--checkpoint", qa_checkpoint), ("--model", tmp_path / "qa-hf")):
        found = {}
        for order in ("length", "file"):
            out = tmp_path / f"qa-{source[0][2:]}-{order}"
            found[order] = _outputs([*source, "--input", qa_folder / "valid.json",
                                     "--batch-size", "4", "--batch-order", order],
                                    output=out / "predictions.json", nbest=out / "nbest.json")
        assert found["length"]["output"] == found["file"]["output"], source
        nbest = [json.loads(f["nbest"]) for f in found.values()]
        assert nbest[0].keys() == nbest[1].keys() and len(nbest[0]) > 8
        for qid, answers in nbest[0].items():
            other = nbest[1][qid]
            assert [(a["text"], a["start"], a["end"]) for a in answers] == \
                [(a["text"], a["start"], a["end"]) for a in other], qid
            assert all(abs(a["score"] - b["score"]) < 1e-6 for a, b in zip(answers, other))
