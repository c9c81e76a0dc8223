"""The lean install (issue 68, part 1): ``pip install span_plugin`` installs what
prediction from exported folders, preprocessing and conversion import, not the training
stack. The wheel is built from this checkout (``pip wheel``, the ``python -m build``
backend's own build), installed into a fresh venv that holds no fairseq, and there it
preprocesses real MRPC rows, converts a BERT folder and predicts from an exported folder,
each output equal to the training install's; what needs fairseq says in one line what
to install.

The venv is made without network: its dependencies are exactly those the wheel's
metadata declares (``Requires-Dist``, followed transitively), taken from this
environment's installed copies (linked into one folder on the venv's path), and pip
installs the wheel against them with ``--no-index``: a missing declaration fails the
install or an import; an extra one would make fairseq (or another package left out)
visible, which the test checks it is not. docs/INSTALL.md has the measured install
from PyPI.
"""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from conftest import GLUE, GPT2_BPE, ROOT, fairseq_train
from test_task_data import ROWS, glue_folder, mini_glue, spec_args
from test_task_train import span_args

pytestmark = [pytest.mark.smoke, pytest.mark.slow]

# The training stack, which the lean install must not bring: distributions, and the
# modules they install.
TRAINING_DISTS = ("ve-fairseq", "fairseq-fixed", "fairseq", "fastBPE", "hydra-core", "omegaconf",
                  "tensorboard", "matplotlib", "torchaudio", "scikit-learn", "scipy")
TRAINING_MODULES = ("fairseq", "fairseq_cli", "fastBPE", "hydra", "omegaconf", "tensorboard",
                    "matplotlib", "torchaudio", "sklearn", "scipy")


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def build_wheel(out):
    """The wheel of this checkout's setup.py and package, built from a copy (no build
    folders left in the checkout) without network: setuptools from this environment."""
    src = out / "src"
    src.mkdir(parents=True)
    shutil.copy(ROOT / "setup.py", src)
    shutil.copytree(ROOT / "span_plugin", src / "span_plugin",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-q", "-w", out, src], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True, text=True)
    (wheel,) = out.glob("span_plugin-*.whl")
    return wheel


def declared(wheel, extra=""):
    """The requirements the wheel's METADATA declares for ``extra`` ("" for a plain
    install) on this interpreter."""
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        text = z.read(name).decode("utf-8")
    reqs = [Requirement(line.split(":", 1)[1].strip())
            for line in text.splitlines() if line.startswith("Requires-Dist:")]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": extra})]


def closure(requirements):
    """``{name: distribution}``: the installed distributions of ``requirements`` (their
    markers already evaluated) and of theirs, transitively, each with the extras asked of
    it (torch's CUDA build asks for ``cuda-toolkit[...]``)."""
    found, seen, todo = {}, set(), list(requirements)
    while todo:
        req = todo.pop()
        key = (_canonical(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{req} (declared by the wheel or a dependency) is not installed in "
                        f"{sys.prefix}: the lean venv is made from its installed copies")
        found[_canonical(req.name)] = dist
        for line in dist.requires or ():
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({"extra": extra})
                                         for extra in ("", *req.extras)):
                todo.append(dep)
    return found


def link_distributions(dists, folder):
    """Link every top-level file and folder of ``dists`` (their RECORD) into ``folder``."""
    folder.mkdir()
    for name, dist in dists.items():
        if dist.files is None:
            pytest.fail(f"{name} {dist.version} has no RECORD: its files are unknown")
        for top in {Path(str(f)).parts[0] for f in dist.files} - {".."}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)


def lean_venv(root, wheel):
    """A fresh venv (no system site-packages, no pip) in ``root/venv``, the wheel
    installed into it by pip against its declared dependencies only. Returns the venv's
    bin folder."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    link_distributions(closure(declared(wheel)), root / "deps")
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "lean_deps.pth").write_text(f"{root / 'deps'}\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python",
                           "install", "--no-index", "--disable-pip-version-check", wheel],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return venv / "bin"


def lean_run(bin_dir, name, *args, cwd, check=True):
    """A console script (or ``python``) of the lean venv, away from the checkout (its
    working directory ``cwd``, no PYTHONPATH): what it imports comes from the venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([str(bin_dir / name), *map(str, args)], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, f"{name} {args} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def lean(tmp_path_factory):
    """``(wheel, the lean venv's bin folder, a working folder)``."""
    root = tmp_path_factory.mktemp("lean")
    wheel = build_wheel(root / "dist")
    work = root / "work"
    work.mkdir()
    return wheel, lean_venv(root, wheel), work


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``(checkpoint, exported folder, task folder)``: a tiny MRPC span model, trained
    for 2 updates on real rows in the training install, exported with span-export hf."""
    from span_plugin.export.model_export import export_model

    root = tmp_path_factory.mktemp("lean_model")
    data = glue_folder("MRPC")
    fairseq_train([*span_args(data, root / "ckpt", max_update=2), "--disable-validation"])
    checkpoint = root / "ckpt" / "checkpoint_last.pt"
    export_model(checkpoint, root / "hf")
    return checkpoint, root / "hf", data


def test_the_wheel_declares_no_training_stack(lean):
    wheel, *_ = lean
    plain = {_canonical(r.name) for r in declared(wheel)}
    assert {"torch", "numpy", "safetensors", "tokenizers"} <= plain, plain
    installed = set(closure(declared(wheel)))  # with the dependencies' own
    assert not installed & {_canonical(d) for d in TRAINING_DISTS}, sorted(installed)
    train = {_canonical(r.name) for r in declared(wheel, "train")} - plain
    assert {"hydra-core", "tensorboard", "matplotlib"} <= train, train


def test_the_venv_has_the_package_and_no_fairseq(lean, exported):
    """The package comes from the venv, the training stack is not importable, every
    command module imports without fairseq, and the hub asked for a checkpoint says
    what to install."""
    _, bin_dir, work = lean
    checkpoint = exported[0]
    code = ("import importlib.util, sys, span_plugin\n"
            "print(span_plugin.__file__)\n"
            f"print([m for m in {TRAINING_MODULES!r} if importlib.util.find_spec(m)])\n"
            "import span_plugin.cli.predict, span_plugin.cli.preprocess, span_plugin.cli.convert\n"
            "import span_plugin.cli.export, span_plugin.portable, span_plugin.convert\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fairseq', 'torch')))\n"
            "from span_plugin.hub import SpanHubInterface\n"
            "try:\n"
            f"    SpanHubInterface.from_pretrained({str(checkpoint)!r})\n"
            "except ImportError as err:\n"
            "    print(f\"{type(err).__name__}: {err}\")\n")
    out = lean_run(bin_dir, "python", "-c", code, cwd=work).stdout.splitlines()
    where, visible, loaded, hub = out
    assert Path(where).is_relative_to(bin_dir.parent), where  # not the checkout
    assert visible == "[]", visible
    assert "fairseq" not in loaded, loaded
    # the fairseq hub on a checkpoint: an ImportError whose one line names the install
    assert hub.startswith("MissingPackageError: SpanHubInterface on a fairseq checkpoint "
                          "needs fairseq") and "bash install.sh" in hub, hub


def test_lean_preprocessing_equals_the_training_installs(lean):
    """span-preprocess glue in the lean venv writes the folder the training install
    writes from the same real MRPC rows, byte for byte (its record aside: it names the
    output folder)."""
    _, bin_dir, work = lean
    out = work / "MRPC-bin"
    lean_run(bin_dir, "span-preprocess", "glue", "--task", "MRPC", "--glue-dir", mini_glue(),
             "--out", out, *spec_args(), cwd=work)
    reference = glue_folder("MRPC")
    files = sorted(p.relative_to(reference) for p in reference.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    binary = [f for f in files if f.suffix in (".bin", ".idx")]
    assert binary, files
    for f in binary:
        assert (out / f).read_bytes() == (reference / f).read_bytes(), f


def test_lean_conversion_equals_the_training_installs(lean, tiny_bert_hf, converted_tiny_bert):
    """span-convert bert of a BERT folder in the lean venv: the same model.pt tensors and
    dict.txt as the training install's conversion; span-export hf of it names the extra
    that brings transformers."""
    import torch

    _, bin_dir, work = lean
    out = work / "tiny-bert"
    lean_run(bin_dir, "span-convert", "bert", "--hf-dir", tiny_bert_hf, "--out", out, cwd=work)
    assert (out / "dict.txt").read_bytes() == (converted_tiny_bert / "dict.txt").read_bytes()
    ours, theirs = (torch.load(d / "model.pt", weights_only=True)["model"]
                    for d in (out, converted_tiny_bert))
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    # span-export hf writes the tokenizer files with transformers' classes: its extra
    proc = lean_run(bin_dir, "span-export", "hf", out, "--out", work / "tiny-hf", cwd=work,
                    check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert "needs transformers" in lines[0] and "span_plugin[transformers]" in lines[0], lines


def test_lean_span_predict_model_writes_what_the_checkpoint_writes(lean, exported):
    """span-predict --model DIR in the lean venv: the task folder's valid and test splits
    (real MRPC dev and test rows), the same bytes as --checkpoint writes in the training
    install."""
    from span_plugin.cli.predict import main

    _, bin_dir, work = lean
    checkpoint, folder, data = exported
    splits = ["--data", data, "--split", "valid", "test", "--output"]
    lean_run(bin_dir, "span-predict", "--model", folder, *splits, work / "valid.tsv",
             work / "test.tsv", cwd=work)
    assert main(["--checkpoint", str(checkpoint), *map(str, splits), str(work / "ckpt-valid.tsv"),
                 str(work / "ckpt-test.tsv")]) == 0
    for split in ("valid", "test"):
        ours = (work / f"{split}.tsv").read_text(encoding="utf-8")
        assert ours == (work / f"ckpt-{split}.tsv").read_text(encoding="utf-8"), split
        assert len(ours.splitlines()) == 1 + ROWS["valid"], split  # a header, a line a row


def test_what_needs_fairseq_says_what_to_install(lean, exported):
    """Without fairseq, span-predict --checkpoint and span-export (onnx; hf of a
    fine-tuned checkpoint) each end on one line naming install.sh; --bpe fastbpe names
    how to build fastBPE."""
    _, bin_dir, work = lean
    checkpoint, _, data = exported
    runs = {
        "span-predict": ["--checkpoint", checkpoint, "--data", data, "--split", "valid",
                         "--output", work / "no.tsv"],
        "span-export hf": ["hf", checkpoint, "--out", work / "no-hf"],
        "span-export onnx": ["onnx", checkpoint, "--out", work / "no-onnx"],
    }
    for command, argv in runs.items():
        proc = lean_run(bin_dir, command.split()[0], *argv, cwd=work, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (command, proc.stderr[-3000:])
        assert lines[0].startswith(f"{command}: error: ") and "needs fairseq" in lines[0] \
            and "bash install.sh" in lines[0], lines
    codes = work / "codes"
    codes.write_text("t h\n", encoding="utf-8")
    proc = lean_run(bin_dir, "span-preprocess", "glue", "--task", "MRPC", "--glue-dir",
                    mini_glue(), "--out", work / "fastbpe-bin", "--bpe", "fastbpe",
                    "--bpe-codes", codes, "--srcdict", GPT2_BPE / "dict.txt", "--workers", "1",
                    cwd=work, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert "--bpe fastbpe needs fastBPE, which is not installed" in lines[0], lines
    assert not (work / "no-hf").exists() and not (work / "no-onnx").exists()
