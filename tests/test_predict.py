"""span-predict serves the task a checkpoint records: span pairs (JSON Lines in, JSON
Lines out), a clear error for a task no adapter serves or a flag of another task, and a
new adapter served by what it declares where it is registered."""

import json

import pytest
import torch
from conftest import run_main
from test_span_pair_train import pair_args

from span_plugin.cli import predict
from span_plugin.hub import SpanHubInterface
from span_plugin.portable.outputs import Flag, Output
from span_plugin.portable.pairs import PairPredictor
from span_plugin.portable.tasks import TASKS, ServedTask


@pytest.fixture(scope="module")
def pair_ckpt(pair_folders, tmp_path_factory):
    save = tmp_path_factory.mktemp("pair_ckpt")
    run_main("fairseq-train", *pair_args(pair_folders["labelled"], save, "--max-update", "1"))
    return save / "checkpoint_last.pt"


@pytest.mark.slow
def test_span_predict_writes_span_pair_predictions(pair_folders, pair_ckpt, tmp_path):
    rows_file = pair_folders["labelled"].parent / "valid.jsonl"
    out = tmp_path / "out" / "pairs.jsonl"
    run_main("span-predict", "--checkpoint", pair_ckpt, "--input", rows_file, "--output", out)
    rows = [json.loads(line) for line in rows_file.read_text(encoding="utf-8").splitlines()]
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [g["line"] for g in got] == list(range(1, len(rows) + 1))
    hub = SpanHubInterface.from_pretrained(pair_ckpt)
    for row, g in zip(rows, got):
        assert g["sentence"]["label"] in {"0", "1"}
        assert [(p["source"], p["target"]) for p in g["phrases"]] == \
            [(p["source"], p["target"]) for p in row["phrases"]]
        want = hub.predict_pairs(row["sentence1"], row["sentence2"], row["phrases"])
        assert [p["label"] for p in g["phrases"]] == [p["label"] for p in want["phrases"]]
        for p, w in zip(g["phrases"], want["phrases"]):
            assert p["scores"] == pytest.approx(w["scores"], abs=1e-6)
            assert p["label"] in hub.phrase_labels

    # A bad row is named by file and line; a flag of another task's output is refused.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"sentence1": "a b", "sentence2": "a b",
                               "phrases": [{"source": [0, 1]}]}) + "\n")
    proc = run_main("span-predict", "--checkpoint", pair_ckpt, "--input", bad, "--output",
                    tmp_path / "x.jsonl", check=False)
    assert proc.returncode == 2 and f"{bad}:1: phrase pair 0 has no 'target'" in proc.stdout, proc.stdout
    proc = run_main("span-predict", "--checkpoint", pair_ckpt, "--input", rows_file, "--output",
                    tmp_path / "x.jsonl", "--conll-out", tmp_path / "x.conll", check=False)
    assert proc.returncode == 2, proc.stdout
    assert ("--conll-out does not apply to a span_pair_classification checkpoint" in proc.stdout
            and "it takes --input, --output" in proc.stdout), proc.stdout


@pytest.mark.slow
def test_span_predict_refuses_a_task_without_adapter(pair_ckpt, tmp_path):
    state = torch.load(pair_ckpt, map_location="cpu", weights_only=True)
    state["cfg"]["task"]["_name"] = "masked_lm"
    torch.save(state, tmp_path / "other.pt")
    proc = run_main("span-predict", "--checkpoint", tmp_path / "other.pt", "--input", "x.jsonl",
                    "--output", tmp_path / "x.jsonl", check=False)
    assert proc.returncode == 2, proc.stdout
    assert "trained with task 'masked_lm' and model 'roberta_span_pair_base'" in proc.stdout
    for served in ("span_classification", "sentence_prediction", "span_tagging",
                   "span_labeling", "span_pair_classification"):
        assert served in proc.stdout, proc.stdout


class BestPhrasePredictor(PairPredictor):
    """A new predictor: each phrase pair's best label, one TSV row per pair."""

    def best_labels(self, row):
        got = self.predict_pairs(row["sentence1"], row["sentence2"], row["phrases"])
        return [p["label"] for p in got["phrases"]]


def write_best_labels(hub, args):
    """Its writer: reads --input and its own --labels-tsv."""
    rows = [json.loads(line) for line in open(args.input, encoding="utf-8")]
    with open(args.labels_tsv, "w", encoding="utf-8") as out:
        for n, row in enumerate(rows, 1):
            out.writelines(f"{n}\t{k}\t{label}\n" for k, label in enumerate(hub.best_labels(row)))


BEST_LABELS = Output(title="best phrase labels", usage="one TSV row per phrase pair",
                     common=("input",), flags=(Flag("--labels-tsv", help="the TSV file"),),
                     write=write_best_labels)


@pytest.mark.slow
def test_a_new_predictor_is_served_by_its_table_entry_alone(pair_folders, pair_ckpt, tmp_path,
                                                            monkeypatch, capsys):
    # The predictor, its entry in the task table and its writer: nothing of span-predict changes.
    served = TASKS["span_pair_classification"]
    monkeypatch.setitem(TASKS, "span_pair_classification",
                        ServedTask(BestPhrasePredictor, BEST_LABELS, served.head, served.reads))
    assert "best phrase labels" in predict.build_parser().format_help()
    rows_file = pair_folders["labelled"].parent / "valid.jsonl"
    out = tmp_path / "best.tsv"
    assert predict.main(["--checkpoint", str(pair_ckpt), "--input", str(rows_file),
                         "--labels-tsv", str(out)]) == 0
    rows = [json.loads(line) for line in rows_file.read_text(encoding="utf-8").splitlines()]
    hub = SpanHubInterface.from_pretrained(pair_ckpt)
    assert type(hub) is BestPhrasePredictor
    want = [f"{n}\t{k}\t{p['label']}" for n, row in enumerate(rows, 1) for k, p in enumerate(
        hub.predict_pairs(row["sentence1"], row["sentence2"], row["phrases"])["phrases"])]
    assert out.read_text(encoding="utf-8").splitlines() == want and len(want) > len(rows)
    # The options of the outputs it replaced are another task's now.
    capsys.readouterr()
    assert predict.main(["--checkpoint", str(pair_ckpt), "--input", str(rows_file),
                         "--output", str(tmp_path / "x.jsonl")]) == 2
    assert ("--output does not apply to a span_pair_classification checkpoint "
            f"({pair_ckpt}); it takes --input, --labels-tsv") in capsys.readouterr().err
