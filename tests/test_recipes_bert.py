"""The GLUE recipes with a converted BERT-family encoder (MODEL_DIR), both heads:
the span head (HEAD=span) and the plain head (HEAD=plain: BERT's classifier over its
pooler, in the plugin's model, which holds BERT's segment B and pooler), on real rows."""

import json
import re
import shutil

import pytest

from conftest import USER_DIR, run_cli, run_main
from test_recipes import HYDRA, RECIPES, valid_line
from test_task_data import glue_folder, mini_glue

from span_plugin.hub import SpanHubInterface


def run_recipe(task, cwd, model_dir, *extra, check=True, **env):
    env = {"GLUE_DIR": str(mini_glue()), "MODEL_DIR": str(model_dir), "WORKERS": "1",
           "TEST_PREDICTIONS": "0", **{k: str(v) for k, v in env.items()}}
    return run_cli("bash", RECIPES / f"{task}.sh", "--cpu", "--batch-size", "8",
                   "--num-workers", "0", "--log-interval", "1", *extra,
                   cwd=cwd, env=env, check=check)


def updates(log):
    return [int(n) for n in re.findall(r"num_updates[ =](\d+)", log)]


@pytest.fixture(scope="module")
def span_run(converted_minilm, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("mrpc_span")
    log = run_recipe("MRPC", cwd, converted_minilm, "--max-update", "2").stdout
    return cwd, log


@pytest.mark.slow
def test_span_head_fine_tunes_the_converted_encoder(span_run, converted_minilm):
    cwd, log = span_run
    # The pretrained weights were loaded, into a model of the checkpoint's own sizes.
    assert f"Loaded checkpoint {converted_minilm}/model.pt" in log
    assert "'encoder_layers': 6" in log or "encoder_layers=6" in log
    assert "encoder_embed_dim=384" in log or "'encoder_embed_dim': 384" in log
    # BERT's layout: <s> A </s> B </s> (no doubled separator), WordPiece vocabulary.
    assert "separator_token=None" in log or "'separator_token': None" in log
    assert "[input] dictionary: 30522 types" in log
    data = cwd / "data-bin" / "minilm" / "MRPC"
    assert (data / "input0" / "dict.txt").read_bytes() == (converted_minilm / "dict.txt").read_bytes()
    results = json.loads((cwd / "runs" / "minilm" / "MRPC" / "results.json").read_text())
    assert results["metric"] == "f1" and "f1" in results["dev"]["dev"]
    dev_rows = (mini_glue() / "MRPC" / "dev.tsv").read_text().splitlines()[1:]
    predictions = (cwd / "runs" / "minilm" / "MRPC" / "dev_predictions" / "MRPC.tsv").read_text().splitlines()
    assert len(predictions) == len(dev_rows) + 1

    # They are fairseq-train's own validation predictions, kept in checkpoint_best.pt
    # (span-predict --from-validation: no second pass) ...
    assert f"dev_predictions/MRPC.tsv: {len(dev_rows)} predictions" in log, log[-2000:]
    assert "split valid is predicted" not in log
    # ... and the hub reproduces them from the checkpoint and the raw text.
    hub = SpanHubInterface.from_pretrained(cwd / "runs" / "minilm" / "MRPC" / "checkpoints" / "checkpoint_best.pt",
                                           data=data, bpe="wordpiece", wordpiece=converted_minilm)
    assert hub.reads_spans
    pairs = [tuple(r.split("\t")[3:5]) for r in dev_rows]
    labels = [p["label"] for p in hub.predict(pairs)]
    assert labels == [line.split("\t")[1] for line in predictions[1:]]


@pytest.mark.slow
def test_relaunch_resumes_the_run_not_the_pretrained_model(span_run, converted_minilm):
    cwd, _ = span_run
    work = cwd.parent / "mrpc_resume"
    shutil.copytree(cwd, work)
    log = run_recipe("MRPC", work, converted_minilm, "--max-update", "3").stdout
    assert "checkpoint_last.pt (epoch" in log and "@ 2 updates)" in log
    assert f"loading pretrained model from {converted_minilm}" not in log
    assert max(updates(log)) == 3


@pytest.mark.slow
def test_plain_head_runs_berts_classifier_on_the_same_data(span_run, converted_minilm):
    cwd, span_log = span_run
    data = cwd / "data-bin" / "minilm" / "MRPC"
    # One variable changes the head; the run gets its own folder, the data is reused.
    log = run_recipe("MRPC", cwd, converted_minilm, "--max-update", "2", HEAD="plain").stdout
    assert "preparing" not in log
    assert "task='sentence_prediction'" in log or "'_name': 'sentence_prediction'" in log
    # fairseq's own roberta cannot hold BERT's segment B and pooler: the plugin's model
    # with the plain head, both switched on, as in the span run.
    assert "arch='roberta_span'" in log or "'arch': 'roberta_span'" in log
    assert "sentence_head='plain'" in log or "'sentence_head': 'plain'" in log
    for log_ in (log, span_log):
        assert "bert_token_types=True" in log_ or "'bert_token_types': True" in log_
        assert "bert_pooler=True" in log_ or "'bert_pooler': True" in log_
    assert f"Loaded checkpoint {converted_minilm}/model.pt" in log
    # Same data, same batches: the first update sees the same examples.
    first = lambda text: re.search(r"loaded (\d+) examples from: .*train", text).group(1)
    assert first(log) == first(span_log)
    out = cwd / "runs" / "minilm" / "MRPC-plain"
    results = json.loads((out / "results.json").read_text())
    assert "f1" in results["dev"]["dev"]
    hub = SpanHubInterface.from_pretrained(out / "checkpoints" / "checkpoint_best.pt",
                                           data=data, bpe="wordpiece", wordpiece=converted_minilm)
    assert not hub.reads_spans and len(hub.predict([("A man.", "A man is here.")])) == 1


@pytest.mark.slow
def test_hydra_twin_of_a_model_dir_run(span_run, converted_minilm):
    """The recipes/hydra config with span-convert's hydra-overrides of the model folder
    runs what MODEL_DIR=... recipes/glue/MRPC.sh ran: the same validation after the same
    updates on the same folder."""
    cwd, span_log = span_run
    overrides = run_main("span-convert", "hydra-overrides", converted_minilm).stdout.split()
    assert f"checkpoint.restore_file={converted_minilm}/model.pt" in overrides
    assert "++model.encoder_layers=6" in overrides and "task.separator_token=null" in overrides
    assert {"++model.bert_token_types=true", "++model.bert_pooler=true"} <= set(overrides)
    # --batch-size 8 made the recipe count its own schedule (recipes/glue/common.sh).
    updates, warmup = re.search(r"schedule: (\d+) updates .*?, (\d+) of warm-up", span_log).groups()
    log = run_main(
        "fairseq-hydra-train", "--config-dir", HYDRA, "--config-name", "mrpc", *overrides,
        f"task.data={cwd / 'data-bin' / 'minilm' / 'MRPC'}", f"common.user_dir={USER_DIR}",
        "common.cpu=true", "common.fp16=false", "common.log_interval=1",
        f"lr_scheduler.total_num_update={updates}", f"lr_scheduler.warmup_updates={warmup}",
        "dataset.batch_size=8", "dataset.num_workers=0", "optimization.max_update=2",
        f"checkpoint.save_dir={cwd / 'hydra' / 'checkpoints'}", cwd=cwd).stdout
    assert f"loaded checkpoint {converted_minilm}/model.pt" in log.lower()
    assert valid_line(log) == valid_line(span_log)


@pytest.mark.slow
def test_recipe_refuses_a_folder_of_another_vocabulary(converted_minilm, tmp_path):
    proc = run_recipe("MRPC", tmp_path, converted_minilm, "--max-update", "1",
                      DATA_DIR=glue_folder("MRPC"), check=False)
    assert proc.returncode == 2
    assert "was built with another vocabulary than the model's" in proc.stdout, proc.stdout
    assert not (tmp_path / "runs").exists()


def test_recipe_refuses_a_model_dir_that_is_not_converted(tmp_path):
    (tmp_path / "hf").mkdir()
    proc = run_recipe("MRPC", tmp_path, tmp_path / "hf", check=False)
    assert proc.returncode == 2
    assert "model.pt not found: MODEL_DIR is a folder made by 'span-convert bert'" in proc.stdout
