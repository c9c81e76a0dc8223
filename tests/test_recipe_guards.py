"""Recipes: every one answers --help with its variables and exits 0 without writing
anything; one recipe per OUT_DIR (a second one exits 2 naming the first's PID and
command, the lock of a killed recipe is taken over); an OUT_DIR that is or holds an
input is refused before any work (recipes/lib.sh over span_plugin/files/outputs.py)."""

import os
import shutil
import signal
import subprocess

import pytest

from conftest import BIN, GLUE, GPT2_BPE, ROOT, run_cli

RECIPES = sorted(p for p in (ROOT / "recipes").rglob("*.sh")
                 if p.name not in ("lib.sh", "common.sh"))


def env(tmp_path, **extra):
    """A recipe's environment: the project's tools first, HOME (and so SPAN_CACHE) a
    fresh folder, tiny models from random weights."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(home),
            "FROM_SCRATCH": "1", "GLUE_DIR": str(GLUE), "BPE_DIR": str(GPT2_BPE),
            **{k: str(v) for k, v in extra.items()}}


def all_files(folder):
    """Every path under ``folder``, links not followed."""
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, dirs, files in os.walk(folder) for name in dirs + files)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_recipe_answers_help_without_side_effects(tmp_path, flag):
    assert len(RECIPES) >= 15
    for recipe in RECIPES:
        proc = subprocess.run(["bash", str(recipe), flag], cwd=tmp_path, env=env(tmp_path),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        rel = recipe.relative_to(ROOT)
        assert proc.returncode == 0, f"{rel}: {proc.stderr}"
        # its own header and the variables of the files it sources
        assert "OUT_DIR" in proc.stdout and "fairseq-train" in proc.stdout, rel
        first = recipe.read_text().splitlines()[1].lstrip("# ")
        assert proc.stdout.startswith(first), rel
        assert all_files(tmp_path) == ["home"], f"{rel} wrote {all_files(tmp_path)}"
    glue = subprocess.run(["bash", str(ROOT / "recipes/glue/MRPC.sh"), flag], cwd=tmp_path,
                          env=env(tmp_path), capture_output=True, text=True).stdout
    assert "GLUE_DIR" in glue and "ROBERTA_PATH" in glue and "SEGMENTATION" in glue
    table = subprocess.run(["bash", str(ROOT / "recipes/table.sh"), flag], cwd=tmp_path,
                           env=env(tmp_path), capture_output=True, text=True).stdout
    assert "LABEL_COLUMN" in table and "SPAN_ENCODER" in table  # common.sh's inputs too


def hold_like_a_recipe(tmp_path, out):
    """A shell that takes OUT_DIR's lock as a recipe does (recipes/lib.sh hold_output),
    then waits."""
    script = (f"RECIPE_NAME=recipes/glue/MRPC.sh; source {ROOT}/recipes/lib.sh; "
              f"hold_output {out} OUT_DIR; echo held; exec sleep 120")
    proc = subprocess.Popen(["bash", "-c", script, "MRPC.sh", "--cpu"], cwd=tmp_path,
                            env=env(tmp_path), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_second_recipe_into_one_out_dir_names_the_first(tmp_path):
    out = tmp_path / "runs" / "MRPC"
    first = hold_like_a_recipe(tmp_path, out)
    try:
        proc = run_cli("bash", ROOT / "recipes/glue/MRPC.sh", "--cpu", cwd=tmp_path,
                       env=env(tmp_path, OUT_DIR=out, DATA_DIR=tmp_path / "data"), check=False)
        assert proc.returncode == 2, proc.stdout
        assert (f"recipes/glue/MRPC.sh: error: {out} is being written by process {first.pid} "
                f"(recipes/glue/MRPC.sh --cpu), which holds {out}.lock") in proc.stdout
        assert not (tmp_path / "data").exists() and not out.exists()
    finally:
        first.send_signal(signal.SIGKILL)  # as a killed recipe: no clean-up runs
        first.wait()
    assert (tmp_path / "runs" / "MRPC.lock").exists()
    # The lock went with the process: the next recipe takes it (and removes it at exit).
    again = subprocess.run(
        ["bash", "-c", f"RECIPE_NAME=recipes/glue/MRPC.sh; source {ROOT}/recipes/lib.sh; "
         f"hold_output {out} OUT_DIR && cat {out}.lock"],
        cwd=tmp_path, env=env(tmp_path), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split(" ", 1)[1] == "recipes/glue/MRPC.sh\n"
    assert not (tmp_path / "runs" / "MRPC.lock").exists()


@pytest.mark.parametrize("recipe,settings,named", [
    ("glue/MRPC.sh", {"OUT_DIR": "work", "DATA_DIR": "work/data-bin"},
     "OUT_DIR work holds the input DATA_DIR work/data-bin"),
    ("glue/MRPC.sh", {"OUT_DIR": "glue"}, "OUT_DIR glue holds the input GLUE_DIR glue/MRPC"),
    ("ner/conll2003.sh", {"OUT_DIR": "conll", "CONLL_DIR": "conll"},
     "OUT_DIR conll is the input CONLL_DIR conll"),
])
def test_out_dir_holding_an_input_is_refused_before_any_work(tmp_path, recipe, settings, named):
    (tmp_path / "glue").symlink_to(GLUE)  # a read-only input: nothing may land there
    (tmp_path / "conll").mkdir()
    (tmp_path / "conll" / "train.txt").write_text("EU NNP B-NP B-ORG\n")
    settings = env(tmp_path, **{"GLUE_DIR": "glue", **settings})
    before = all_files(tmp_path)
    proc = run_cli("bash", ROOT / "recipes" / recipe, "--cpu", cwd=tmp_path, env=settings,
                   check=False)
    assert proc.returncode == 2 and named in proc.stdout, proc.stdout
    assert all_files(tmp_path) == before


@pytest.mark.slow
def test_relaunch_onto_a_rebuilt_folder_stops_before_training(tmp_path):
    """A recipe run of one update on 60 WNLI rows (32 of label 0), then its data folder
    rebuilt from rows where label 1 is the more frequent (so its id changes) and the
    recipe relaunched: it stops before the first update naming both label orders, its
    checkpoint untouched."""
    rows = open(GLUE / "WNLI" / "train.tsv", encoding="utf-8").read().splitlines(True)
    glue = tmp_path / "glue"
    (glue / "WNLI").mkdir(parents=True)
    (glue / "WNLI" / "train.tsv").write_text("".join(rows[:61]))
    (glue / "WNLI" / "dev.tsv").write_text(
        "".join(open(GLUE / "WNLI" / "dev.tsv", encoding="utf-8").readlines()[:21]))
    settings = env(tmp_path, GLUE_DIR=glue, TEST_PREDICTIONS=0)
    tiny = ["--cpu", "--encoder-layers", "1", "--encoder-embed-dim", "16",
            "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2"]
    run_cli("bash", ROOT / "recipes/glue/WNLI.sh", *tiny, "--max-update", "1", cwd=tmp_path,
            env=settings)
    last = tmp_path / "runs" / "WNLI" / "checkpoints" / "checkpoint_last.pt"
    before = last.read_bytes()
    ones = [r for r in rows[1:61] if r.endswith("\t1\n")]
    zeros = [r for r in rows[1:61] if r.endswith("\t0\n")]
    (glue / "WNLI" / "train.tsv").write_text(rows[0] + "".join(ones + zeros[:20]))
    shutil.rmtree(tmp_path / "data-bin" / "WNLI")  # rebuilt by the relaunch
    proc = run_cli("bash", ROOT / "recipes/glue/WNLI.sh", *tiny, "--max-update", "2",
                   cwd=tmp_path, env=settings, check=False)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert ("runs/WNLI/checkpoints/checkpoint_last.pt was trained on other data than "
            f"{tmp_path / 'data-bin' / 'WNLI'} holds now: its labels.names is ['0', '1'], the "
            "folder's is ['1', '0']") in proc.stdout
    assert "Traceback" not in proc.stdout and last.read_bytes() == before
    assert not (tmp_path / "runs" / "WNLI.lock").exists()
