"""``span-predict --from-validation``: the dev predictions fairseq-train's own validation
made, kept in the checkpoint by the span_classification criterion, written without a
second pass over the dev set; equal to the forward pass they replace, and refused (with
the reason, then predicted as usual) wherever they cannot stand in for it."""

import sys

import pytest
import torch

from conftest import GPT2_BPE, run_cli, run_main
from test_task_data import glue_folder
from test_task_train import span_args

from span_plugin.portable.glue_files import validation_predictions
from span_plugin.runtime.checkpoints import VALID_PREDICTIONS

ENCODER = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe", GPT2_BPE / "vocab.bpe"]


def predict_valid(checkpoint, out, *extra):
    proc = run_main("span-predict", "--checkpoint", checkpoint, "--split", "valid",
                   "--output", out, *ENCODER, *extra)
    return out.read_text().splitlines(), proc.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """checkpoint_last.pt of a tiny MRPC run (classification) and of STS-B (regression)."""
    out = {}
    for task, extra, classes, metric in (("MRPC", (), 2, "f1"),
                                         ("STS-B", ("--regression-target",), 1, "pearson")):
        save = tmp_path_factory.mktemp(task)
        run_main("fairseq-train", *span_args(glue_folder(task), save, *extra, num_classes=classes,
                                            max_update=2, metric=metric))
        out[task] = save / "checkpoint_last.pt"
    return out


@pytest.mark.slow
@pytest.mark.parametrize("task", ["MRPC", "STS-B"])
def test_stored_validation_equals_a_forward_pass(runs, task, tmp_path):
    stored, log = predict_valid(runs[task], tmp_path / "stored.tsv", "--from-validation")
    assert "is predicted" not in log, log
    forward, _ = predict_valid(runs[task], tmp_path / "forward.tsv")
    rows = len((glue_folder(task) / "raw" / "valid.input0").read_text().splitlines())
    assert stored[0] == forward[0] == "index\tprediction" and len(stored) == 1 + rows
    assert [line.split("\t")[0] for line in stored] == [line.split("\t")[0] for line in forward]
    got = [line.split("\t")[1] for line in stored[1:]]
    want = [line.split("\t")[1] for line in forward[1:]]
    if task == "MRPC":
        assert got == want
    else:  # STS-B: the model's output times the folder's scale (5), clipped to [0, 5]
        assert [float(g) for g in got] == pytest.approx([float(w) for w in want], abs=2e-3)
        assert all(0.0 <= float(g) <= 5.0 for g in got)


@pytest.mark.slow
def test_stored_validation_alone_never_imports_fairseq(runs, tmp_path):
    """The span-predict of a recipe's end (split valid from the stored pass) in a fresh
    interpreter: written without importing fairseq, equal to the forward pass; with a split
    that needs the model as well, fairseq is loaded for that one."""
    code = ("import sys; from span_plugin.cli.predict import main; status = main(sys.argv[1:]); "
            "print('fairseq imported:', 'fairseq' in sys.modules); sys.exit(status)")
    forward, _ = predict_valid(runs["MRPC"], tmp_path / "forward.tsv")
    common = ["--checkpoint", runs["MRPC"], *ENCODER, "--from-validation"]
    alone = run_cli(sys.executable, "-c", code, *common, "--split", "valid",
                    "--output", tmp_path / "stored.tsv").stdout
    assert "fairseq imported: False" in alone, alone
    assert (tmp_path / "stored.tsv").read_text().splitlines() == forward
    both = run_cli(sys.executable, "-c", code, *common, "--split", "valid", "test",
                   "--output", tmp_path / "dev.tsv", tmp_path / "test.tsv").stdout
    assert "fairseq imported: True" in both, both
    assert (tmp_path / "dev.tsv").read_text().splitlines() == forward
    rows = len((glue_folder("MRPC") / "raw" / "test.input0").read_text().splitlines())
    assert len((tmp_path / "test.tsv").read_text().splitlines()) == 1 + rows


def _altered(checkpoint, tmp_path, change):
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    change(state)
    path = tmp_path / "altered.pt"
    torch.save(state, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("change, why", [
    (lambda s: s["task_state"].pop(VALID_PREDICTIONS), "holds no validation predictions"),
    (lambda s: s["cfg"]["dataset"].update(valid_subset="valid,valid1"), "not the one subset 'valid'"),
    (lambda s: s["task_state"][VALID_PREDICTIONS]["ids"].pop(), "distinct of"),  # a shard
    (lambda s: s["extra_state"].update(val_loss=None), "saved without a validation"),
])
def test_what_cannot_stand_in_is_said_and_predicted(runs, tmp_path, change, why):
    forward, _ = predict_valid(runs["MRPC"], tmp_path / "forward.tsv")
    altered = _altered(runs["MRPC"], tmp_path, change)
    got, log = predict_valid(altered, tmp_path / "got.tsv", "--from-validation")
    assert "span-predict: split valid is predicted: " in log and why in log, log
    assert got == forward


def test_a_pass_that_saw_a_row_twice_or_another_folder_is_refused(tmp_path):
    folder = tmp_path / "data"
    (folder / "raw").mkdir(parents=True)
    (folder / "label").mkdir()
    (folder / "raw" / "valid.input0").write_text("a\nb\nc\n")
    (folder / "label" / "dict.txt").write_text("yes 5\nno 3\nmadeupword0000 0\n")
    cfg = {"task": {"data": str(folder)}, "dataset": {"valid_subset": "valid"}}

    def state(ids, values, val_loss=0.5, **task):
        return {"cfg": {"task": dict(cfg["task"], **task), "dataset": cfg["dataset"]},
                "task_state": {VALID_PREDICTIONS: {"ids": ids, "values": values}},
                "extra_state": {"val_loss": val_loss}}

    preds, _, why = validation_predictions(state([2, 0, 1], [1, 0, 0]))
    assert why is None and [p["label"] for p in preds] == ["yes", "yes", "no"]  # by id
    preds, _, why = validation_predictions(state([1, 0, 2], [0.5, 0.25, 1.0], regression_target=True))
    assert [p["score"] for p in preds] == [0.25, 0.5, 1.0]
    _, _, why = validation_predictions(state([0, 1, 1, 2], [0, 0, 0, 0]))  # two subsets' ids
    assert "3 distinct of 3 rows (4 in all)" in why
    _, _, why = validation_predictions(state([0, 1, 2], [0, 0, 0]), data=tmp_path)
    assert "is not the folder it was trained on" in why
    _, _, why = validation_predictions(state([0, 1, 2], [0, 0, 0], val_loss=None))
    assert "saved without a validation just before" in why  # its weights are newer
    _, _, why = validation_predictions(state([0, 1, 2], [0, 3, 0]))  # beyond the 3 symbols
    assert "a stored class is not one of the 3" in why
