"""The GLUE recipes as users run them: recipes/glue/<TASK>.sh and its hydra twin."""

import json
import re
import shutil

import pytest
from omegaconf import OmegaConf

from conftest import GLUE, GPT2_BPE, ROOT, USER_DIR, run_cli

RECIPES = ROOT / "recipes" / "glue"
HYDRA = ROOT / "recipes" / "hydra"
TASKS = ["CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI", "SNLI"]
WITH_DATA = [t for t in TASKS if (GLUE / t / "train.tsv").is_file()]
TINY = ["--encoder-layers", "2", "--encoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2"]
TINY_HYDRA = ["+model.encoder_layers=2", "+model.encoder_embed_dim=32",
              "+model.encoder_ffn_embed_dim=64", "+model.encoder_attention_heads=2"]


def hydra_name(task):
    return task.lower().replace("-", "_")


def shell_settings(task):
    """The variables recipes/glue/<TASK>.sh sets."""
    text = (RECIPES / f"{task}.sh").read_text()
    return dict(re.findall(r"^([A-Z_]+)=(\S+)$", text, flags=re.M))


def recipe_env(tmp_path, **extra):
    return {"GLUE_DIR": str(GLUE), "BPE_DIR": str(GPT2_BPE), "WORKERS": "2",
            **{k: str(v) for k, v in extra.items()}}


def valid_line(log):
    """The last validation line fairseq logged, without its speed figures."""
    lines = [l for l in log.splitlines() if "valid on 'valid' subset" in l]
    assert lines, log[-3000:]
    return re.sub(r"\| (wps|wpb|bsz) [\d.]+ ", "", lines[-1].split("subset", 1)[1])


@pytest.mark.parametrize("task", TASKS)
def test_every_task_has_a_shell_recipe_and_an_equal_hydra_config(task):
    sh = shell_settings(task)
    cfg = OmegaConf.load(HYDRA / f"{hydra_name(task)}.yaml")
    regression = sh.get("REGRESSION") == "1"
    assert sh["TASK"] == task
    assert cfg.task.data == f"data-bin/{task}"
    assert cfg.task.num_classes == int(sh["NUM_CLASSES"])
    assert cfg.task.regression_target == cfg.criterion.regression_target == regression
    assert cfg.optimization.lr == [float(sh["LR"])]
    assert cfg.dataset.batch_size == int(sh["BATCH_SIZE"])
    assert cfg.optimization.max_update == cfg.lr_scheduler.total_num_update == int(sh["TOTAL_UPDATES"])
    assert cfg.lr_scheduler.warmup_updates == int(sh["WARMUP_UPDATES"])
    assert cfg.checkpoint.best_checkpoint_metric == sh["METRIC"]
    assert cfg.checkpoint.maximize_best_checkpoint_metric is (sh["METRIC"] != "loss")
    assert (cfg.task.max_spans, cfg.task.max_span_tokens) == (64, 16)
    assert cfg.task.shorten_method == "truncate"


@pytest.mark.slow
@pytest.mark.parametrize("task", WITH_DATA)
def test_recipe_smoke_run_and_its_hydra_twin(task, tmp_path):
    """Prepare the folder from ../shared/data/glue, a few CPU updates of a tiny model,
    validation with the task's metric; the hydra config gives the same validation."""
    log = run_cli(
        "bash", RECIPES / f"{task}.sh", "--cpu", "--max-update", "4", *TINY,
        cwd=tmp_path, env=recipe_env(tmp_path),
    ).stdout
    data = tmp_path / "data-bin" / task
    assert (data / "input0" / "train.spans.idx").is_file()
    assert (tmp_path / "runs" / task / "checkpoints" / "checkpoint_best.pt").is_file()
    assert list((tmp_path / "runs" / task / "tensorboard").rglob("events.out.tfevents.*"))
    metric = shell_settings(task)["METRIC"]
    shell_valid = valid_line(log)
    assert f"| {metric} " in shell_valid, shell_valid

    # The dev result of the best checkpoint, in the task's metric, over every dev row.
    results = json.loads((tmp_path / "runs" / task / "results.json").read_text())
    assert results["task"] == task and results["metric"] == metric
    (dev,) = results["dev"].values()
    logged = float(re.search(rf"\| {metric} (-?[\d.]+)", shell_valid).group(1))
    assert dev[metric] == pytest.approx(logged, abs=0.01)
    # GLUE test predictions in the submission format: one per test row, in order.
    test_rows = (GLUE / task / "test.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    submission = (tmp_path / "runs" / task / "glue_test" / f"{task}.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction"
    assert [line.split("\t")[0] for line in submission[1:]] == [r.split("\t")[0] for r in test_rows]

    log = run_cli(
        "fairseq-hydra-train", "--config-dir", HYDRA, "--config-name", hydra_name(task),
        f"common.user_dir={USER_DIR}", "common.cpu=true", "common.fp16=false",
        "optimization.max_update=4", "checkpoint.save_dir=runs/hydra/checkpoints", *TINY_HYDRA,
        cwd=tmp_path,
    ).stdout
    assert valid_line(log) == shell_valid
    assert (tmp_path / "runs" / "hydra" / "checkpoints" / "checkpoint_best.pt").is_file()


def run_recipe(task, tmp_path, check=False, **env):
    return run_cli("bash", RECIPES / f"{task}.sh", "--cpu", "--max-update", "1", *TINY,
                   cwd=tmp_path, env=recipe_env(tmp_path, **env), check=check)


@pytest.fixture(scope="module")
def wnli_bin(tmp_path_factory):
    out = tmp_path_factory.mktemp("wnli") / "WNLI-bin"
    run_cli("span-preprocess", "glue", "--task", "WNLI", "--glue-dir", GLUE, "--out", out,
            "--gpt2-encoder-json", GPT2_BPE / "encoder.json",
            "--gpt2-vocab-bpe", GPT2_BPE / "vocab.bpe", "--srcdict", GPT2_BPE / "dict.txt")
    return out


def test_recipe_refuses_a_missing_glue_task_folder(tmp_path):
    proc = run_recipe("RTE", tmp_path, GLUE_DIR=tmp_path / "nowhere")
    assert proc.returncode == 2
    assert f"no {tmp_path}/nowhere/RTE folder: set GLUE_DIR" in proc.stdout, proc.stdout
    assert not (tmp_path / "runs").exists()


def test_recipe_refuses_a_checkpoint_that_does_not_exist(tmp_path):
    proc = run_recipe("WNLI", tmp_path, ROBERTA_PATH=tmp_path / "roberta.base" / "model.pt")
    assert proc.returncode == 2
    assert "roberta.base/model.pt does not exist" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_recipe_refuses_a_data_folder_without_span_files(wnli_bin, tmp_path):
    data = tmp_path / "WNLI-bin"
    shutil.copytree(wnli_bin, data)
    for f in (data / "input1").glob("valid.spans.*"):
        f.unlink()
    proc = run_recipe("WNLI", tmp_path, DATA_DIR=data)
    assert proc.returncode == 2
    assert "input1/valid.spans" in proc.stdout, proc.stdout
    assert "delete it to rebuild it" in proc.stdout
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_recipe_refuses_a_folder_with_another_number_of_classes(wnli_bin, tmp_path):
    data = tmp_path / "WNLI-bin"
    shutil.copytree(wnli_bin, data)
    labels = data / "label" / "dict.txt"
    labels.write_text("entailment 5\n" + labels.read_text())
    proc = run_recipe("WNLI", tmp_path, DATA_DIR=data)
    assert proc.returncode == 2
    assert "label/dict.txt has 3 labels but WNLI is trained with NUM_CLASSES=2" in proc.stdout, proc.stdout
