"""The GLUE recipes as users run them: recipes/glue/<TASK>.sh and its hydra twin."""

import json
import re
import shutil

import pytest
from omegaconf import OmegaConf

from conftest import GLUE, GPT2_BPE, ROOT, USER_DIR, run_cli, run_main
from glue_fixtures import FIXTURE_TASKS

RECIPES = ROOT / "recipes" / "glue"
HYDRA = ROOT / "recipes" / "hydra"
TASKS = ["CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI", "SNLI"]
WITH_DATA = [t for t in TASKS if (GLUE / t / "train.tsv").is_file()]
# Every recipe runs: on the real files in ../shared, else on a folder shaped like the
# task's published files (tests/glue_fixtures.py).
ON_FIXTURES = [t for t in FIXTURE_TASKS if t not in WITH_DATA]
# The published columns by name (not by the code's column numbers): inputs, gold label.
COLUMNS = {
    "RTE": (("sentence1", "sentence2"), "label"), "QNLI": (("question", "sentence"), "label"),
    "MNLI": (("sentence1", "sentence2"), "gold_label"), "SNLI": (("sentence1", "sentence2"), "gold_label"),
    "QQP": (("question1", "question2"), "is_duplicate"),
}
# Every hydra config is compared with its recipe's settings (the first test below); these
# are also run against the recipe's own run: one sentence, a pair with F1, regression, and
# MNLI's two validation sets (each run is ~15 s of the suite).
HYDRA_RUNS = ("CoLA", "MRPC", "STS-B", "MNLI")
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
    # Tiny models from random weights, unless a model is given (the recipes' default is
    # the packaged all-MiniLM-L6-v2: tests/test_default_model.py).
    scratch = {} if {"ROBERTA_PATH", "MODEL_DIR"} & extra.keys() else {"FROM_SCRATCH": "1"}
    return {"GLUE_DIR": str(GLUE), "BPE_DIR": str(GPT2_BPE), "WORKERS": "2", **scratch,
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
    assert cfg.criterion.get("positive_label") == sh.get("POSITIVE_LABEL")


_SMOKE = {}


def smoke_run(task, tmp_path_factory):
    """The recipe's smoke run of ``task`` (4 CPU updates of a tiny model), once per
    session: (working folder, glue_data folder, log)."""
    if task not in _SMOKE:
        glue = _real_head(tmp_path_factory) if task in WITH_DATA else _fixture_root(tmp_path_factory)
        cwd = tmp_path_factory.mktemp(f"recipe_{task}")
        log = run_cli("bash", RECIPES / f"{task}.sh", "--cpu", "--max-update", "4", *TINY,
                      cwd=cwd, env=recipe_env(cwd, GLUE_DIR=glue)).stdout
        _SMOKE[task] = (cwd, glue, log)
    return _SMOKE[task]


def _real_head(tmp_path_factory, rows=160):
    """The first rows of every real TSV in ../shared (header kept; CoLA train/dev have
    none): the recipes' smoke runs need no more, and the whole files are prepared and
    counted by tests/test_preprocess_glue.py."""
    if "real" not in _SMOKE:
        root = tmp_path_factory.mktemp("real_head")
        for task in WITH_DATA:
            (root / task).mkdir()
            for tsv in (GLUE / task).glob("*.tsv"):
                header = 0 if task == "CoLA" and tsv.stem != "test" else 1
                with open(tsv, "rb") as f:
                    head = [line for _, line in zip(range(header + rows), f)]
                (root / task / tsv.name).write_bytes(b"".join(head))
        _SMOKE["real"] = root
    return _SMOKE["real"]


def _fixture_root(tmp_path_factory):
    from glue_fixtures import write_all

    if "fixtures" not in _SMOKE:
        _SMOKE["fixtures"] = write_all(tmp_path_factory.mktemp("fixture_glue"))
    return _SMOKE["fixtures"]


def tsv_rows(path):
    """Data rows of a GLUE TSV as {column: value} (rows with the header's field count)."""
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:]
            if len(line.split("\t")) == len(header)]


@pytest.mark.slow
@pytest.mark.parametrize("task", WITH_DATA + ON_FIXTURES)
def test_recipe_smoke_run_and_its_hydra_twin(task, tmp_path_factory):
    """Prepare the folder (real files from ../shared, or a fixture of the task's
    published layout), a few CPU updates of a tiny model, validation and results in the
    task's GLUE metric, dev and test predictions; the hydra config gives the same
    validation (HYDRA_RUNS)."""
    cwd, glue, log = smoke_run(task, tmp_path_factory)
    data = cwd / "data-bin" / task
    out = cwd / "runs" / task
    assert (data / "input0" / "train.spans.idx").is_file()
    assert (out / "checkpoints" / "checkpoint_best.pt").is_file()
    assert list((out / "tensorboard").rglob("events.out.tfevents.*"))
    metric = shell_settings(task)["METRIC"]
    shell_valid = valid_line(log)
    assert f"| {metric} " in shell_valid, shell_valid
    # No stack notices (fairseq's tensorboardX line, hydra's deprecations, torch's
    # pin_memory and autocast warnings, DEBUG lines): only the run's own log.
    assert not re.findall(r".*(?:Please install tensorboardX|Warning:|DEBUG:).*", log)

    # The dev result of the best checkpoint, in the task's metric, over every dev row.
    results = json.loads((out / "results.json").read_text())
    assert results["task"] == task and results["metric"] == metric
    names = ["dev_matched", "dev_mismatched"] if task == "MNLI" else ["dev"]
    assert sorted(results["dev"]) == names
    logged = float(re.search(rf"\| {metric} (-?[\d.]+)", shell_valid).group(1))
    assert results["dev"][names[0]][metric] == pytest.approx(logged, abs=0.01)
    assert all(metric in results["dev"][n] for n in names)
    record = json.loads((data / "provenance.json").read_text())
    if task in ("MRPC", "QQP"):
        assert record["labels"]["positive"] == "1" and "accuracy" in results["dev"]["dev"]

    # Dev predictions, one per dev row kept, and GLUE test predictions in the
    # submission format, one per test row, in order.
    mnli = task == "MNLI"
    dev_files = {"valid": "MNLI-m", "valid1": "MNLI-mm"} if mnli else {"valid": task}
    for split, name in dev_files.items():
        lines = (out / "dev_predictions" / f"{name}.tsv").read_text().splitlines()
        assert len(lines) == 1 + record["rows"][split]
    tests = [("test_matched", "MNLI-m"), ("test_mismatched", "MNLI-mm")] if mnli else [("test", task)]
    for tsv, name in tests:
        submission = (out / "glue_test" / f"{name}.tsv").read_text().splitlines()
        assert submission[0] == "index\tprediction"
        rows = tsv_rows(glue / task / f"{tsv}.tsv")
        if task == "SNLI":  # a labelled test set: rows without a gold label are left out
            rows = [r for r in rows if r["gold_label"] != "-"]
        assert [line.split("\t")[0] for line in submission[1:]] == [str(i) for i in range(len(rows))]
        if task != "SNLI":  # GLUE's index column counts the test rows
            assert [r["id" if task == "QQP" else "index"] for r in rows] == [str(i) for i in range(len(rows))]

    if task in COLUMNS:
        # The folder holds the published columns: inputs and gold labels by name.
        (a, b), label = COLUMNS[task]
        for tsv, split in (("train", "train"), ("dev_matched" if mnli else "dev", "valid")):
            rows = [r for r in tsv_rows(glue / task / f"{tsv}.tsv") if r[label] != "-"]
            raw = {k: (data / "raw" / f"{split}.{k}").read_text().splitlines()
                   for k in ("input0", "input1", "label")}
            assert raw == {"input0": [r[a] for r in rows], "input1": [r[b] for r in rows],
                           "label": [r[label] for r in rows]}, (task, split)
        dropped = (data / "dropped_rows.tsv").read_text().splitlines()[1:]
        if task == "QQP":  # the malformed rows: a tab in a field, a line break in one
            assert len(dropped) == 6 and all("fields, expected 6" in d for d in dropped)
        if task == "SNLI":
            assert dropped and all(d.endswith("label '-'") for d in dropped)

    if task not in HYDRA_RUNS:
        return
    log = run_main(
        "fairseq-hydra-train", "--config-dir", HYDRA, "--config-name", hydra_name(task),
        f"common.user_dir={USER_DIR}", "common.cpu=true", "common.fp16=false",
        "optimization.max_update=4", "checkpoint.save_dir=runs/hydra/checkpoints", *TINY_HYDRA,
        "dataset.num_workers=0", cwd=cwd,
    ).stdout
    assert valid_line(log) == shell_valid
    assert (cwd / "runs" / "hydra" / "checkpoints" / "checkpoint_best.pt").is_file()


@pytest.mark.slow
def test_relaunched_recipe_resumes_from_the_newest_intact_checkpoint(tmp_path_factory, tmp_path):
    """checkpoint_last.pt cut short (as a run killed during fairseq's non-atomic copy
    leaves it): the relaunch moves it aside and resumes from checkpoint_best.pt."""
    cwd, glue, _ = smoke_run("RTE", tmp_path_factory)
    shutil.copytree(cwd / "data-bin", tmp_path / "data-bin")
    shutil.copytree(cwd / "runs" / "RTE" / "checkpoints", tmp_path / "runs" / "RTE" / "checkpoints")
    last = tmp_path / "runs" / "RTE" / "checkpoints" / "checkpoint_last.pt"
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size // 2)
    log = run_cli("bash", RECIPES / "RTE.sh", "--cpu", "--max-update", "6", *TINY, cwd=tmp_path,
                  env=recipe_env(tmp_path, GLUE_DIR=glue, TEST_PREDICTIONS=0)).stdout
    assert "checkpoint_last.pt is damaged" in log, log[-3000:]
    assert re.search(r"resuming from \S+checkpoint_best.pt \(4 updates\)", log), log[-3000:]
    assert re.search(r"Loaded checkpoint \S+checkpoint_last.pt \(epoch \d+ @ 4 updates\)", log)
    assert "record: made by span_plugin" in log  # the folder existed: checked, record shown
    assert "RuntimeWarning" not in log
    assert re.findall(r"num_updates (\d+)", log)[-1] == "6"
    assert (last.parent / "checkpoint_last.pt.damaged").is_file()


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
    # The folder's record knows the file changed after span-preprocess made it.
    proc = run_recipe("WNLI", tmp_path, DATA_DIR=data)
    assert proc.returncode == 2
    assert f"{labels}: its content (sha256 " in proc.stdout and "provenance.json records" in proc.stdout
    # Without a record (a build that did not finish, or a folder made before records
    # existed), span-preprocess check refuses the folder before anything is trained.
    (data / "provenance.json").unlink()
    proc = run_recipe("WNLI", tmp_path, DATA_DIR=data)
    assert proc.returncode == 2
    assert "no provenance.json: a build that did not finish" in proc.stdout, proc.stdout
    assert not (tmp_path / "runs").exists()
