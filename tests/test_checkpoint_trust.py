"""No code runs from a checkpoint.

- The source holds no loader that can run code from a file (``weights_only=False``,
  pickle, ``np.load(allow_pickle=True)``, unsafe YAML, eval/exec).
- A checkpoint with a planted payload (an object whose ``__reduce__`` writes a marker
  file) is refused by every entry point that reads one: the marker never appears, and
  each says that the file holds an object outside the allow-list (never to resume).
- Three problems, three messages naming the file: not a checkpoint (empty, text, random
  bytes, a folder), damaged (a real checkpoint cut to its first 20,000 bytes), unsafe.
- Recipes: model-size flags that contradict the pretrained checkpoint are refused, and
  the learning-rate schedule follows EPOCHS and the batch size.
"""

import ast
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

from conftest import GLUE, GPT2_BPE, ROOT, minilm_dir, run_cli, run_main

from span_plugin.convert.safe_load import (
    DamagedCheckpointError, NotACheckpointError, UnsafeCheckpointError, load_checkpoint)

FIXTURE = ROOT / "tests" / "fixtures" / "checkpoint_v0_2"
REAL = FIXTURE / "span_classification.pt"  # a real fairseq checkpoint, 345 KB
RECIPES = ROOT / "recipes"
# Its sizes (span-convert flags): 1 layer, width 16.
REAL_SIZES = ["--encoder-layers", "1", "--encoder-embed-dim", "16",
              "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2"]
TINY = ["--encoder-layers", "2", "--encoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2"]
REFUSED = "outside the allow-list"
# The global the payload pickles: io.open on Python 3.11, _io.open from 3.12 on.
PAYLOAD_GLOBAL = f"GLOBAL {open.__module__}.{open.__qualname__}"


class Payload:
    """Creates ``marker`` when unpickled (``open(marker, "w")`` is what unpickling calls)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(path, marker):
    """A copy of the real checkpoint with the payload in its extra_state."""
    state = load_checkpoint(REAL)
    state["extra_state"]["planted"] = Payload(marker)
    torch.save(state, path)
    return path


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Every place a checkpoint is read from, holding the payload: {name: path}, and
    the marker (which must never exist)."""
    root = tmp_path_factory.mktemp("planted")
    marker = root / "code_ran"
    evil = plant(root / "evil.pt", marker)
    model_dir = root / "model_dir"  # a span-convert folder whose model.pt holds it
    model_dir.mkdir()
    shutil.copy(evil, model_dir / "model.pt")
    shutil.copy(GPT2_BPE / "dict.txt", model_dir / "dict.txt")
    shutil.copy(minilm_dir() / "vocab.txt", model_dir / "vocab.txt")
    save_dir = root / "checkpoints"  # a run to resume
    save_dir.mkdir()
    shutil.copy(evil, save_dir / "checkpoint_last.pt")
    hf_dir = root / "hf"  # a Hugging Face BERT folder whose pytorch_model.bin holds it
    hf_dir.mkdir()
    for name in ("config.json", "vocab.txt"):
        shutil.copy(minilm_dir() / name, hf_dir / name)
    torch.save({"bert.embeddings.word_embeddings.weight": torch.zeros(2, 2),
                "planted": Payload(marker)}, hf_dir / "pytorch_model.bin")
    yield {"evil": evil, "model_dir": model_dir, "save_dir": save_dir, "hf_dir": hf_dir,
           "root": root, "marker": marker}
    assert not marker.exists(), "a planted payload ran"


def assert_refused(text, path, marker):
    """``text`` says that ``path`` holds an object outside the allow-list, names the
    global, tells nobody to resume, and nothing ran."""
    assert not marker.exists(), "the planted payload ran"
    lines = [line for line in text.splitlines() if REFUSED in line]
    assert lines, text[-3000:]
    assert str(path) in lines[0] and PAYLOAD_GLOBAL in lines[0], lines[0]
    assert "resume" not in lines[0] and "damaged" not in lines[0], lines[0]
    assert "Traceback" not in text, text[-3000:]


def test_the_payload_is_live(tmp_path):
    """The control: loading the planted file as torch did before 2.6 runs the payload."""
    marker = tmp_path / "ran"
    path = plant(tmp_path / "evil.pt", marker)
    torch.load(path, weights_only=False)  # the unsafe load the package never does
    assert marker.exists()


# ---------------------------------------------------------------------------------
# (a) No unsafe loader in the source

SCANNED = ("span_plugin", "recipes", "experiments", "benchmarks", "tests")
UNSAFE = [
    (r"weights_only\s*=\s*False", "torch.load(weights_only=False) runs code from the file"),
    (r"\b(c?[Pp]ickle|dill|joblib|marshal|shelve)\.(load|loads|open|Unpickler)\b",
     "unpickling runs code from the file"),
    (r"\bread_pickle\s*\(", "pandas.read_pickle unpickles"),
    (r"allow_pickle\s*=\s*True", "np.load(allow_pickle=True) unpickles"),
    (r"\byaml\.(unsafe_load|full_load|load_all)\b", "YAML loaders that build objects"),
    (r"\byaml\.load\((?![^)]*Safe)", "yaml.load without a SafeLoader builds objects"),
    (r"(?<![\w.])(?<!def )(eval|exec)\s*\(", "eval/exec"),  # a call; not a method named so
]


def _sources():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in (".py", ".sh") and path.resolve() != Path(__file__).resolve():
                yield path


def test_no_loader_runs_code_from_a_file():
    found = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        for pattern, why in UNSAFE:
            for m in re.finditer(pattern, text):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {why}")
        # Outside the tests every torch.load says weights_only=True (torch's default
        # can be switched off by TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD).
        if path.parts[len(ROOT.parts)] == "tests":
            continue
        if path.suffix == ".py":
            for node in ast.walk(ast.parse(text)):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "load" and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "torch"
                        and not any(k.arg == "weights_only" and isinstance(k.value, ast.Constant)
                                    and k.value.value is True for k in node.keywords)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: torch.load "
                                 f"without weights_only=True")
        elif "torch.load(" in text:  # Python inside a shell recipe: use the package's loaders
            found.append(f"{path.relative_to(ROOT)}: torch.load in a shell script")
    assert not found, "\n".join(found)


def test_the_scan_finds_what_it_looks_for():
    bad = ["torch.load(f, weights_only=False)", "pickle.load(f)", "pickle.loads(b)",
           "np.load(p, allow_pickle=True)", "yaml.load(text)", "yaml.unsafe_load(t)",
           "eval(line)", "exec(code)"]
    for text in bad:
        assert any(re.search(p, text) for p, _ in UNSAFE), text
    good = ["model.eval()", "yaml.load(text, Loader=yaml.SafeLoader)", "np.load(p)",
            "torch.load(f, weights_only=True)", "yaml.safe_load(t)"]
    for text in good:
        assert not any(re.search(p, text) for p, _ in UNSAFE), text


# ---------------------------------------------------------------------------------
# (b) The planted payload, through every entry point


@pytest.mark.smoke
def test_library_loaders_refuse_the_payload(planted):
    from fairseq import checkpoint_utils

    from span_plugin.convert.hf_source import open_tensors
    from span_plugin.convert.flags import checkpoint_train_flags
    from span_plugin.portable.glue_files import write_validation_predictions
    from span_plugin.hub import SpanHubInterface
    from span_plugin.runtime.checkpoints import load_mapped, load_state, prepare_resume
    from span_plugin.runtime.transfer import write_stripped

    evil, root, marker = planted["evil"], planted["root"], planted["marker"]
    calls = {
        "load_state": lambda: load_state(evil),
        "load_mapped": lambda: load_mapped(evil),
        "fairseq load_checkpoint_to_cpu": lambda: checkpoint_utils.load_checkpoint_to_cpu(str(evil)),
        "fairseq load_model_ensemble": lambda: checkpoint_utils.load_model_ensemble([str(evil)]),
        "hub": lambda: SpanHubInterface.from_pretrained(evil, data=FIXTURE / "data"),
        "--from-validation": lambda: write_validation_predictions(
            evil, FIXTURE / "data", root / "valid.tsv"),
        "span-convert flags": lambda: checkpoint_train_flags(evil),
        "open_tensors": lambda: open_tensors(planted["hf_dir"] / "pytorch_model.bin"),
        "transfer strip": lambda: write_stripped(evil, root / "stripped.pt"),
        "resume": lambda: prepare_resume(planted["save_dir"], log=lambda m: None),
    }
    for name, call in calls.items():
        with pytest.raises(UnsafeCheckpointError) as info:
            call()
        expected = (planted["hf_dir"] / "pytorch_model.bin" if name == "open_tensors"
                    else planted["save_dir"] / "checkpoint_last.pt" if name == "resume" else evil)
        assert_refused(str(info.value), expected, marker)
    # resume neither moved the file aside nor put another in its place
    assert sorted(os.listdir(planted["save_dir"])) == ["checkpoint_last.pt"]
    assert not (root / "stripped.pt").exists() and not (root / "valid.tsv").exists()


CLIS = {
    "span-predict": lambda p: ["span-predict", "--checkpoint", p["evil"], "--input",
                               p["root"] / "x.tsv", "--output", p["root"] / "out.tsv"],
    "checkpoints resume": lambda p: [sys.executable, "-m", "span_plugin.runtime.checkpoints",
                                     "resume", p["save_dir"]],
    "checkpoints same-dictionary": lambda p: [sys.executable, "-m",
                                              "span_plugin.runtime.checkpoints",
                                              "same-dictionary", p["evil"], GPT2_BPE / "dict.txt"],
    "transfer strip": lambda p: [sys.executable, "-m", "span_plugin.runtime.transfer", "strip",
                                 p["evil"], p["root"] / "stripped.pt"],
    "span-convert flags": lambda p: ["span-convert", "flags", p["evil"]],
    "span-convert bert": lambda p: ["span-convert", "bert", "--hf-dir", p["hf_dir"],
                                    "--out", p["root"] / "converted"],
}


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_commands_refuse_the_payload(cli, planted):
    command = CLIS[cli](planted)
    proc = run_cli(command[0], *command[1:], check=False)
    assert proc.returncode == 2, proc.stdout[-3000:]
    expected = {"checkpoints resume": planted["save_dir"] / "checkpoint_last.pt",
                "span-convert bert": planted["hf_dir"] / "pytorch_model.bin"}.get(cli, planted["evil"])
    assert_refused(proc.stdout, expected, planted["marker"])
    assert not (planted["root"] / "converted").exists()


# Each recipe, with what it needs to reach its model: the model is read first.
RECIPE_ENV = {
    "glue/MRPC.sh": {},
    "table.sh": {"TASK": "mine", "TRAIN": "rows.tsv", "VALID": "rows.tsv",
                 "TEXT_COLUMNS": "sentence", "LABEL_COLUMN": "label", "NUM_CLASSES": "2",
                 "METRIC": "accuracy"},
    "ner/conll2003.sh": {},
    "qa/squad.sh": {},
    "transfer/paraphrase.sh": {"PAIRS": "rows.tsv"},
    "pretrain/spanbert.sh": {"TRAIN_TEXT": "rows.tsv", "VALID_TEXT": "rows.tsv"},
}
FAST_RECIPES = ("glue/MRPC.sh",)


def run_recipe(recipe, cwd, *args, **env):
    (cwd / "rows.tsv").write_text("sentence\tlabel\nA man.\t1\n")
    return run_cli("bash", RECIPES / recipe, "--cpu", *args, cwd=cwd, check=False, env={
        "GLUE_DIR": str(GLUE), "BPE_DIR": str(GPT2_BPE), "WORKERS": "1", "FROM_SCRATCH": "",
        "ROBERTA_PATH": "", "MODEL_DIR": "", **RECIPE_ENV[recipe], **env})


@pytest.mark.parametrize("recipe,variable", [
    pytest.param(r, v, marks=() if r in FAST_RECIPES else pytest.mark.slow)
    for r in RECIPE_ENV for v in ("ROBERTA_PATH", "MODEL_DIR")])
def test_recipes_refuse_the_payload(recipe, variable, planted, tmp_path):
    given = planted["evil"] if variable == "ROBERTA_PATH" else planted["model_dir"]
    proc = run_recipe(recipe, tmp_path, **{variable: str(given)})
    assert proc.returncode == 2, proc.stdout[-3000:]
    path = planted["evil"] if variable == "ROBERTA_PATH" else planted["model_dir"] / "model.pt"
    assert_refused(proc.stdout, path, planted["marker"])
    assert not (tmp_path / "data-bin").exists() and not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------------
# (c) Three problems, three messages


def _broken(kind, folder):
    """A file (or folder) of the given kind of problem, in ``folder``."""
    path = folder / f"{kind}.pt"
    if kind == "folder":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("epoch 3 | loss 0.25 | this is a training log\n")
    elif kind == "random bytes":
        path.write_bytes(bytes((i * 97 + 13) % 256 for i in range(5000)))
    elif kind == "cut short":
        path.write_bytes(REAL.read_bytes()[:20000])
    elif kind == "unsafe":
        plant(path, folder / "code_ran")
    return path


PROBLEMS = {"folder": "is not a checkpoint: it is a folder",
            "empty": "is not a checkpoint: it is empty",
            "text": "is not a checkpoint: it is text",
            "random bytes": "is not a checkpoint: it starts with bytes",
            "cut short": "is damaged (the end of its zip archive is missing)",
            "unsafe": REFUSED}
ERRORS = {"cut short": DamagedCheckpointError, "unsafe": UnsafeCheckpointError}


@pytest.mark.parametrize("kind", sorted(PROBLEMS))
def test_each_problem_has_its_own_message(kind, tmp_path):
    from fairseq import checkpoint_utils

    from span_plugin.convert.flags import checkpoint_train_flags
    from span_plugin.hub import SpanHubInterface
    from span_plugin.runtime.checkpoints import load_state

    path = _broken(kind, tmp_path)
    for call in (load_state, lambda p: checkpoint_utils.load_checkpoint_to_cpu(str(p)),
                 SpanHubInterface.from_pretrained, checkpoint_train_flags):
        if kind == "folder" and call is checkpoint_train_flags:
            continue  # a folder there is a span-convert folder: its model.pt is missing
        with pytest.raises(ERRORS.get(kind, NotACheckpointError)) as info:
            call(path)
        assert str(path) in str(info.value) and PROBLEMS[kind] in str(info.value)
    assert not (tmp_path / "code_ran").exists()


def test_a_damaged_training_checkpoint_says_how_to_resume(tmp_path):
    from span_plugin.runtime.checkpoints import load_state

    path = _broken("cut short", tmp_path)
    with pytest.raises(DamagedCheckpointError, match="runtime.checkpoints resume"):
        load_state(path)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(PROBLEMS))
def test_span_predict_gives_each_message_without_a_traceback(kind, tmp_path):
    path = _broken(kind, tmp_path)
    proc = run_main("span-predict", "--checkpoint", path, "--input", tmp_path / "x.tsv",
                    "--output", tmp_path / "out.tsv", check=False)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout and PROBLEMS[kind] in proc.stdout, proc.stdout[-3000:]
    assert "span-predict: error: " in proc.stdout and str(path) in proc.stdout
    assert not (tmp_path / "code_ran").exists()


def test_resume_sets_aside_what_is_no_checkpoint(tmp_path):
    """A checkpoint_last.pt that is text is moved aside like a damaged one, and the
    newest intact checkpoint takes its place."""
    from span_plugin.runtime.checkpoints import prepare_resume

    shutil.copy(REAL, tmp_path / "checkpoint_best.pt")
    (tmp_path / "checkpoint_last.pt").write_text("not a checkpoint\n")
    logged = []
    assert prepare_resume(tmp_path, log=logged.append) == str(tmp_path / "checkpoint_last.pt")
    assert (tmp_path / "checkpoint_last.pt.damaged").is_file()
    assert any("is not a checkpoint: it is text" in m for m in logged), logged
    assert load_checkpoint(tmp_path / "checkpoint_last.pt")["model"]


# ---------------------------------------------------------------------------------
# Recipes: model-size flags against a pretrained checkpoint, the schedule


def test_recipe_refuses_size_flags_that_contradict_the_checkpoint(tmp_path):
    proc = run_recipe("glue/MRPC.sh", tmp_path, *TINY, ROBERTA_PATH=str(REAL))
    assert proc.returncode == 2, proc.stdout[-3000:]
    line = next(l for l in proc.stdout.splitlines() if "conflict with" in l)
    assert ("the model-size flags --encoder-layers 2 --encoder-embed-dim 32 "
            "--encoder-ffn-embed-dim 64 conflict with the pretrained checkpoint "
            f"{REAL}, which has --encoder-layers 1 --encoder-embed-dim 16 "
            "--encoder-ffn-embed-dim 32") in line, line
    assert "FROM_SCRATCH=1" in line and "random weights" in line
    assert "Traceback" not in proc.stdout and not (tmp_path / "data-bin").exists()


def test_recipe_takes_size_flags_equal_to_the_checkpoint(tmp_path):
    """Flags that repeat the checkpoint's sizes pass (the recipe goes on to its data)."""
    proc = run_recipe("glue/MRPC.sh", tmp_path, *REAL_SIZES, ROBERTA_PATH=str(REAL),
                      GLUE_DIR=str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "no " + str(tmp_path / "nowhere") + "/MRPC folder" in proc.stdout
    assert "conflict with" not in proc.stdout


def test_recipe_names_the_packaged_default_model(tmp_path):
    """No model given: the default all-MiniLM-L6-v2 (here a stand-in in the cache) is
    pretrained too; the message points at FROM_SCRATCH=1."""
    cache = tmp_path / "cache" / "models" / "all-MiniLM-L6-v2"
    cache.mkdir(parents=True)
    shutil.copy(REAL, cache / "model.pt")
    shutil.copy(GPT2_BPE / "dict.txt", cache / "dict.txt")
    shutil.copy(minilm_dir() / "vocab.txt", cache / "vocab.txt")
    proc = run_recipe("glue/MRPC.sh", tmp_path, *TINY, SPAN_CACHE=str(tmp_path / "cache"))
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert f"conflict with the pretrained checkpoint {cache}/model.pt (the packaged " \
           "all-MiniLM-L6-v2, used when neither ROBERTA_PATH nor MODEL_DIR is given)" in proc.stdout
    assert "set FROM_SCRATCH=1" in proc.stdout


SCHEDULE = ('set -euo pipefail; RECIPE_NAME=test; source "{lib}"; EPOCHS=3; BATCH_SIZE=16; '
            'WARMUP=0.1; NUM_GPUS={gpus}; count_updates "{rows}" "$@"; '
            'echo "result $UPDATES $WARMUP_UPDATES"')


@pytest.mark.parametrize("gpus,args,updates", [
    (0, [], 3 * 7),                                 # 100 rows: 7 batches of 16, 3 epochs
    (0, ["--max-epoch", "2"], 2 * 7),               # extra arguments win, as in fairseq
    (0, ["--batch-size", "32"], 3 * 4),
    (0, ["--batch-size=8", "--update-freq", "2"], 3 * 7),
    (2, [], 3 * 4),                                 # two GPUs: 32 rows per update
])
def test_count_updates_follows_epochs_and_batch_size(gpus, args, updates, tmp_path):
    rows = tmp_path / "train.input0"
    rows.write_text("row\n" * 100)
    script = SCHEDULE.format(lib=RECIPES / "lib.sh", gpus=gpus, rows=rows)
    out = run_cli("bash", "-c", script, "count", *args).stdout
    assert f"result {updates} {round(0.1 * updates)}" in out, out
    assert f"schedule: {updates} updates" in out


@pytest.mark.slow
def test_glue_recipe_rescales_its_schedule_to_epochs(tmp_path):
    """EPOCHS=2 recipes/glue/MRPC.sh (the README's first run): the learning rate decays
    over the 2 epochs, not over fairseq's 10-epoch 2296 updates."""
    from test_task_data import glue_folder, mini_glue

    data = glue_folder("MRPC")
    rows = len((data / "raw" / "train.input0").read_text().splitlines())
    updates = -(-rows // 16) * 2
    warmup = round(137 * updates / 2296)
    proc = run_cli("bash", RECIPES / "glue" / "MRPC.sh", "--cpu", "--max-update", "1",
                   *TINY, "--num-workers", "0", cwd=tmp_path, env={
                       "GLUE_DIR": str(mini_glue()), "BPE_DIR": str(GPT2_BPE), "WORKERS": "1",
                       "FROM_SCRATCH": "1", "EPOCHS": "2", "DATA_DIR": str(data),
                       "TEST_PREDICTIONS": "0"})
    log = proc.stdout
    assert (f"schedule: {updates} updates (2 epochs of {rows} train rows, 16 rows per "
            f"update), {warmup} of warm-up (fairseq's 2296 updates and 137 of warm-up are "
            f"for 10 epochs of 16 rows per update)") in log, log[-3000:]
    assert re.search(rf"'total_num_update': '?{updates}\b", log), log[-3000:]
    assert re.search(rf"'warmup_updates': {warmup}\b", log)
