"""fairseq-train through the plugin (span_plugin.runtime.training_guard): a relaunch
onto a folder rebuilt with another label order, dictionary or encoder settings exits 2
before the first update, naming both values and the fix, and leaves the checkpoint as
it was; a rebuild that changes nothing resumes; the --reset-* flags start over; a
second run into a --save-dir that a live run holds exits 2 naming it. Real SST-2 rows,
a tiny span model, fairseq's own entry point in-process."""

import os
import signal
import subprocess
import sys

import pytest

from conftest import GLUE
from test_fuzz_readers import train_tiny
from test_conll_messy import ENC  # GPT-2 BPE, no segmentation: fast folders
from span_plugin.cli import preprocess as preprocess_cli
from span_plugin.runtime.data_record import STATE_KEY, checkpoint_record
from span_plugin.runtime.checkpoints import load_mapped

ROWS = [line for _, line in zip(range(61), open(GLUE / "SST-2" / "train.tsv", encoding="utf-8"))]
HEADER, TRAIN = ROWS[0], ROWS[1:]  # 33 rows of label 0, 27 of label 1
VALID = [line for _, line in zip(range(11), open(GLUE / "SST-2" / "dev.tsv", encoding="utf-8"))]


def build(folder, rows, *extra):
    """``span-preprocess table`` of ``rows`` into ``folder`` (in-process)."""
    src = folder.parent / f"{folder.name}.src"
    src.mkdir(exist_ok=True)
    (src / "train.tsv").write_text(HEADER + "".join(rows), encoding="utf-8")
    (src / "valid.tsv").write_text("".join(VALID), encoding="utf-8")
    code = preprocess_cli.main(["table", "--out", str(folder), "--train", str(src / "train.tsv"),
                                "--valid", str(src / "valid.tsv"), "--text-columns", "sentence",
                                "--label-column", "label", *map(str, ENC), *extra])
    assert code == 0


def train(data, save, *extra, max_update=1):
    """fairseq-train (a 1-layer span model) in this process; its exit status."""
    try:
        train_tiny(data, save, *extra, max_update=max_update)
    except SystemExit as stop:
        return stop.code
    return 0


def num_updates(checkpoint):
    return load_mapped(checkpoint)["optimizer_history"][-1]["num_updates"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A folder of 60 SST-2 rows and a run of one update on it."""
    root = tmp_path_factory.mktemp("guard")
    build(root / "data", TRAIN)
    assert train(root / "data", root / "run") == 0
    return root


@pytest.fixture
def relaunch(trained, tmp_path):
    """A copy of the trained run and its folder, to rebuild and relaunch."""
    import shutil

    shutil.copytree(trained / "data", tmp_path / "data")
    shutil.copytree(trained / "run", tmp_path / "run")
    return tmp_path


# each rebuild: rows, extra span-preprocess flags, the difference named first
REBUILDS = {
    # 20 of the 33 rows of label 0: label 1 is the more frequent, so it comes first
    "label order": ([r for r in TRAIN if r.endswith("\t1\n")]
                    + [r for r in TRAIN if r.endswith("\t0\n")][:20], (),
                    "its labels.names is ['0', '1'], the folder's is ['1', '0']"),
    "encoder settings": (TRAIN, ("--segmentation", "greedy"),
                         "its encoder.ngrams is None, the folder's is sha256 "),
}


@pytest.mark.parametrize("change", sorted(REBUILDS))
def test_relaunch_onto_a_rebuilt_folder_stops_before_training(relaunch, change, capsys):
    rows, flags, named = REBUILDS[change]
    build(relaunch / "data", rows, *flags)
    last = relaunch / "run" / "checkpoint_last.pt"
    before = last.read_bytes()
    assert train(relaunch / "data", relaunch / "run", max_update=2) == 2
    err = capsys.readouterr().err
    assert f"{last} was trained on other data than {relaunch / 'data'} holds now: {named}" in err
    if change == "encoder settings":
        assert "(and 5 more: encoder.segmentation, files.input0/train.spans.bin" in err
    assert "--reset-optimizer --reset-meters --reset-dataloader" in err and "OUT_DIR" in err
    assert "Traceback" not in err and last.read_bytes() == before


def test_shuffled_dictionary_is_named_by_its_hashes(relaunch, capsys):
    lines = open(ENC[ENC.index("--srcdict") + 1], encoding="utf-8").read().splitlines(True)
    lines[100], lines[200] = lines[200], lines[100]
    shuffled = relaunch / "dict.txt"
    shuffled.write_text("".join(lines), encoding="utf-8")
    build(relaunch / "data", TRAIN, "--srcdict", str(shuffled))
    assert train(relaunch / "data", relaunch / "run", max_update=2) == 2
    err = capsys.readouterr().err
    assert "its encoder.srcdict is sha256 " in err and ", the folder's is sha256 " in err
    assert "files.input0/dict.txt" in err


def test_unchanged_rebuild_resumes_and_reset_flags_start_over(relaunch):
    build(relaunch / "data", TRAIN)  # the same rows and settings: the same files
    last = relaunch / "run" / "checkpoint_last.pt"
    assert train(relaunch / "data", relaunch / "run", max_update=2) == 0
    assert num_updates(last) == 2
    rows = REBUILDS["label order"][0]
    build(relaunch / "data", rows)
    assert train(relaunch / "data", relaunch / "run", "--reset-optimizer", "--reset-meters",
                 "--reset-dataloader", max_update=1) == 0
    # started over (update 1 again), and the checkpoint now records the new folder
    assert num_updates(last) == 1
    assert checkpoint_record(load_mapped(last))["labels"]["names"] == ["1", "0"]


def test_second_run_into_a_held_save_dir_names_the_first(trained, tmp_path, capsys):
    save = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom span_plugin.files.outputs import hold\n"
         f"hold({str(save)!r}, 'fairseq-train data --save-dir run')\n"
         "print('held', flush=True)\ntime.sleep(120)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert train(trained / "data", save) == 2
        err = capsys.readouterr().err
        assert (f"error: --save-dir {save}: {save} is being written by process {holder.pid} "
                f"(fairseq-train data --save-dir run)") in err
        assert not os.path.exists(save / "checkpoint_last.pt")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert train(trained / "data", save) == 0  # its lock went with it


def test_the_record_is_in_the_checkpoint(trained):
    record = load_mapped(trained / "run" / "checkpoint_last.pt")["task_state"][STATE_KEY]
    assert record["labels"]["names"] == ["0", "1"] and record["encoder"]["segmentation"] == "none"
