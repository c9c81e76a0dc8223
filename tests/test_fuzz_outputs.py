"""Seeded cases of what the new writers do to their inputs and to each other (issue 66,
parts 1 and 3, and part 5's messages about outputs), through the real entry points
(``span-export hf``/``onnx``, ``span-predict --model``, ``span-convert``,
``span-preprocess``, fairseq-train), on a tiny model trained here on real SST-2 rows
whose every input (data folder, tokenizer files, n-gram dictionary, source tables) is
a copy of its own, so that nothing shared is at stake:

- output over an input: ``--out`` (with ``--force``) is, holds, or lies inside an input
  of the command: the checkpoint (also through a hard link), the data folder its record
  names or ``--data`` gives, the tokenizer files (recorded or given), the n-gram
  dictionary (recorded or ``--ngrams``), the recorded source tables; by its own path, a
  parent, a symbolic link, another spelling. Exit 2, one line naming the output and the
  input, nothing changed;
- the current folder: ``''``, ``.``, ``./``, ``x/..``, the absolute path, ``../NAME``
  and a parent of it, for every kind of writer: exit 2, nothing changed;
- ``--force`` replaces only an earlier export of the same kind: a folder of the user's,
  an export with a file of the user's added, the other kind's export: exit 2, nothing
  changed; an earlier export of the same kind: replaced, exit 0;
- links: ``--out`` a symbolic link is written where it points, the link kept;
- locks per thing: a writer through a link, or another spelling, of an output another
  process holds (a builder, fairseq-train) exits 2 naming it; fairseq-train into a
  symbolic link of a held ``--save-dir`` too, the live run's checkpoint untouched;
- a full disk: taking a lock needs no space (its PID line is best-effort), a command
  whose only failing write is the lock's works, one whose output cannot be written
  ends in one line naming the output and ``No space left on device``, nothing left; on
  a real tmpfs (where a mount namespace can be made) ``span-export hf`` and ``onnx``;
- messages: ``span-predict --model DIR`` with an output inside ``DIR`` is refused as
  that, before anything is created.

``FUZZ_TABLE=PATH`` appends the table of outcomes by class to PATH.
"""

import errno
import os
import random
import re
import shutil
import subprocess
import sys

import pytest

from fuzz_outcomes import TRACEBACK, Outcomes, head, snapshot
from conftest import BIN, GLUE, GPT2_BPE
from test_fuzz_readers import train_tiny
from span_plugin.cli import convert as convert_cli
from span_plugin.cli import predict as predict_cli
from span_plugin.cli import preprocess as preprocess_cli
from span_plugin.cli.export import main as export_main
from span_plugin.files.outputs import lock_path

pytestmark = pytest.mark.slow

SEED = 66
OUTCOMES = Outcomes(lost="inputs")
record = OUTCOMES.record
ENOSPC = os.strerror(errno.ENOSPC)


def one_line(output):
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return len(lines) == 1 and TRACEBACK not in output


# ---- the model and its inputs ----------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """``w``: a tiny span_classification model trained here on real SST-2 rows, from
    inputs of its own (w/bpe, w/ngrams, w/src -> w/data), its run (w/run/checkpoints),
    inputs given again elsewhere (w/data2, w/tok2, w/ngrams2), an earlier span-export hf
    folder (w/exported) and the user's notes (w/home); ``pristine``: a copy of all of it
    outside ``w`` to put back after a case that changed something."""
    from span_plugin.preprocess.segmentation.ngrams import default_ngrams_path

    w = tmp_path_factory.mktemp("fuzz_outputs") / "w"
    for sub in ("bpe", "tok2", "ngrams", "ngrams2", "src", "home", "links"):
        (w / sub).mkdir(parents=True)
    for name in ("encoder.json", "vocab.bpe", "dict.txt"):
        shutil.copy(GPT2_BPE / name, w / "bpe" / name)
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(GPT2_BPE / name, w / "tok2" / name)
    for sub in ("ngrams", "ngrams2"):
        shutil.copy(default_ngrams_path("gpt2"), w / sub / "ngrams.txt.gz")
    (w / "src" / "train.tsv").write_text(head(GLUE / "SST-2" / "train.tsv", 41))
    (w / "src" / "valid.tsv").write_text(head(GLUE / "SST-2" / "dev.tsv", 11))
    (w / "home" / "notes.txt").write_text("the user's notes\n")
    assert preprocess_cli.main([
        "table", "--out", str(w / "data"), "--train", str(w / "src" / "train.tsv"),
        "--valid", str(w / "src" / "valid.tsv"), "--text-columns", "sentence",
        "--label-column", "label", "--gpt2-encoder-json", str(w / "bpe" / "encoder.json"),
        "--gpt2-vocab-bpe", str(w / "bpe" / "vocab.bpe"), "--srcdict",
        str(w / "bpe" / "dict.txt"), "--segmentation", "greedy", "--ngrams",
        str(w / "ngrams" / "ngrams.txt.gz"), "--workers", "1"]) == 0
    train_tiny(w / "data", w / "run" / "checkpoints")
    shutil.copytree(w / "data", w / "data2")
    assert export_main(["hf", str(ckpt(w)), "--out", str(w / "exported")]) == 0
    pristine = tmp_path_factory.mktemp("fuzz_outputs_pristine") / "w"
    shutil.copytree(w, pristine, symlinks=True)
    return w, pristine


def ckpt(w):
    return w / "run" / "checkpoints" / "checkpoint_last.pt"


def restore(w, pristine):
    """``w`` as the fixture made it (a case that changed it is a problem already counted)."""
    os.chdir(w.parent)
    shutil.rmtree(w, ignore_errors=True)
    shutil.copytree(pristine, w, symlinks=True)


@pytest.fixture
def fresh(world, monkeypatch):
    """The world, put back as it was after the test; the test's cwd restored."""
    w, pristine = world
    monkeypatch.chdir(w.parent)
    yield w
    if snapshot(w) != snapshot(pristine):
        restore(w, pristine)


def run_export(kind, argv, capsys):
    capsys.readouterr()
    code = export_main([kind, *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def run_main(main, argv, capsys):
    capsys.readouterr()
    code = main([*map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


# ---- outputs over inputs ---------------------------------------------------------------


def input_targets(w):
    """``[(name, input path named in the message, extra argv, is it a folder)]``: every
    input of span-export, recorded or given."""
    tok = ["--gpt2-encoder-json", w / "tok2" / "encoder.json",
           "--gpt2-vocab-bpe", w / "tok2" / "vocab.bpe"]
    return [
        ("the checkpoint", ckpt(w), [], False),
        ("the recorded data folder", w / "data", [], True),
        ("--data", w / "data2", ["--data", w / "data2"], True),
        ("the recorded tokenizer file", w / "bpe" / "encoder.json", [], False),
        ("the recorded dictionary", w / "bpe" / "dict.txt", [], False),
        ("a tokenizer flag", w / "tok2" / "vocab.bpe", tok, False),
        ("the recorded n-gram dictionary", w / "ngrams" / "ngrams.txt.gz", [], False),
        ("--ngrams", w / "ngrams2" / "ngrams.txt.gz", ["--ngrams", w / "ngrams2" / "ngrams.txt.gz"], False),
        ("the recorded source table", w / "src" / "train.tsv", [], False),
    ]


def over_an_input(rng, w, target, kind):
    """A seeded ``--out`` over ``target``: ``(out, the input path the message names,
    checkpoint argument, extra argv)``."""
    name, path, extra, folder = target
    if kind == "onnx" and name == "--ngrams":
        extra = []  # onnx takes no --ngrams: the recorded one is its input
        path = w / "ngrams" / "ngrams.txt.gz"
    checkpoint = ckpt(w)
    forms = ["parent", "parent link", "grandparent"] + (["itself", "link", "inside"] if folder else ["itself"])
    if name == "the checkpoint":
        forms += ["hard link"] * 2
    form = rng.choice(forms)
    links = w / "links"
    if form == "itself":
        return path, path, checkpoint, extra, form
    if form == "inside":  # a folder of the input's own
        return path / "input0", path, checkpoint, extra, form
    if form == "link":
        link = links / f"to-{path.name}"
        link.symlink_to(path)
        return link, path, checkpoint, extra, form
    if form == "parent":
        return path.parent, path, checkpoint, extra, form
    if form == "grandparent":
        return path.parent.parent, path, checkpoint, extra, form
    if form == "parent link":
        link = links / f"to-{path.parent.name}"
        link.symlink_to(path.parent)
        return link, path, checkpoint, extra, form
    # the checkpoint given by a hard link of it, --out the run's checkpoints/ (or run/)
    hard = links / "ck.pt"
    os.link(path, hard)
    out = rng.choice([path.parent, path.parent.parent])
    return out, hard, hard, extra, form


def test_outputs_over_inputs(fresh, world, capsys):
    w, pristine = world
    rng, failures = random.Random(SEED), []
    targets = input_targets(w)
    inputs = [str(t[1]) for t in targets] + [str(w / "links" / "ck.pt"), str(w / "tok2" / "encoder.json")]
    cases = [(kind, target) for target in targets for kind in ("hf", "onnx")]
    rng.shuffle(cases)
    for kind, target in cases:
        out, named, checkpoint, extra, form = over_an_input(rng, w, target, kind)
        before = snapshot(w, skip=("links",))
        code, output = run_export(kind, [checkpoint, "--out", out, "--force", *extra], capsys)
        changed = snapshot(w, skip=("links",)) != before
        case = f"span-export {kind} --out {out} --force ({form} of {target[0]} {named})"
        # the input named: this one, or another that the same folder holds
        said = str(named) in output or form in ("parent", "parent link", "grandparent", "hard link") \
            and " the input " in output and any(p in output for p in inputs)
        ok = code == 2 and one_line(output) and f"--out {out} " in output and said and not changed
        record("output over an input", failures, case, ok, "exit 2, both named, nothing changed",
               code, output, changed)
        restore(w, pristine)
    assert not failures, "\n\n".join(failures)


# ---- the current folder ----------------------------------------------------------------


def cwd_writers(w):
    """``{name: (main, argv given the output)}``: each kind of writer."""
    hf = w / "hf-in"
    return {
        "span-export hf": (export_main, lambda o: ["hf", ckpt(w), "--out", o, "--force"]),
        "span-export onnx": (export_main, lambda o: ["onnx", ckpt(w), "--out", o, "--force"]),
        "span-predict --model": (predict_cli.main, lambda o: [
            "--model", w / "exported", "--data", w / "data", "--split", "valid", "--output", o]),
        "span-convert bert": (convert_cli.main, lambda o: [
            "bert", "--hf-dir", hf, "--out", o, "--force"]),
        "span-preprocess table": (preprocess_cli.main, lambda o: [
            "table", "--out", o, "--train", w / "src" / "train.tsv", "--text-columns",
            "sentence", "--label-column", "label", "--gpt2-encoder-json",
            w / "bpe" / "encoder.json", "--gpt2-vocab-bpe", w / "bpe" / "vocab.bpe",
            "--srcdict", w / "bpe" / "dict.txt", "--segmentation", "none", "--workers", "1"]),
    }


def test_the_current_folder_is_never_an_output(fresh, world, capsys, monkeypatch):
    w, pristine = world
    rng, failures = random.Random(SEED + 1), []
    home = w / "home"
    spellings = ["", ".", "./", "nothing/..", str(home), f"../{home.name}", f"{home}/"]
    writers = cwd_writers(w)
    for name, (main, argv) in writers.items():
        for out in rng.sample(spellings, 3) + [".."]:
            (w / "hf-in").mkdir(exist_ok=True)
            (w / "hf-in" / "config.json").write_text('{"model_type": "bert"}\n')
            monkeypatch.chdir(home)
            before = snapshot(w)
            code, output = run_main(main, argv(out), capsys)
            changed = snapshot(w) != before
            monkeypatch.chdir(w.parent)
            flag = "--output" if "predict" in name else "--out"
            said = ("empty" in output if out == "" else
                    "current folder" in output or (out == ".." and "input" in output))
            ok = code == 2 and one_line(output) and flag in output and said and not changed
            record("the current folder", failures, f"{name} {flag} {out!r} (cwd {home})", ok,
                   "exit 2, named, nothing changed", code, output, changed)
            if changed or not home.is_dir():
                restore(w, pristine)
    assert not failures, "\n\n".join(failures)


def test_a_folder_written_whole_is_never_the_current_one(tmp_path, monkeypatch):
    """The last step of every folder writer (span-export, the span-preprocess builders)
    refuses the current folder and its parents itself, for callers of the library that
    no command line guards."""
    from span_plugin.files.atomic import staged_folder

    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("the user's notes\n")
    monkeypatch.chdir(home)
    for spelling in ("", ".", "./", "nothing/..", str(home), "..", str(tmp_path / "link")):
        if spelling.endswith("link") and not os.path.lexists(spelling):
            os.symlink(home, spelling)
        with pytest.raises(OSError, match="current folder") as err:
            with staged_folder(spelling):
                pass
        assert err.value.errno == errno.EINVAL
    assert sorted(os.listdir(tmp_path)) == ["home", "link"] and os.listdir(home) == ["notes.txt"]


# ---- --force replaces only an earlier export of the same kind --------------------------


def onnx_folder(out):
    """What span-export onnx leaves: its record (onnx.json's format and head_kind) beside
    the graph. Stands for an earlier onnx export (a real one: tests/test_export_onnx.py)."""
    out.mkdir()
    (out / "onnx.json").write_text('{"format": 1, "head_kind": "sentence"}\n')
    (out / "model.onnx").write_bytes(b"an earlier graph")
    return out


def test_force_replaces_only_an_earlier_export(fresh, world, capsys, tmp_path):
    w, _ = world
    failures = []
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's notes\n")
    hf_plus = tmp_path / "hf-plus"
    shutil.copytree(w / "exported", hf_plus)
    (hf_plus / "notes.txt").write_text("added by the user\n")
    hf_copy = tmp_path / "hf-copy"
    shutil.copytree(w / "exported", hf_copy)
    onnx_copy = onnx_folder(tmp_path / "onnx-copy")
    refused = [("hf", mine, "notes.txt"), ("onnx", mine, "notes.txt"),
               ("hf", hf_plus, "notes.txt"), ("onnx", hf_copy, "onnx.json"),
               ("hf", onnx_copy, "config.json")]
    for kind, out, said in refused:
        before = snapshot(out)
        code, output = run_export(kind, [ckpt(w), "--out", out, "--force"], capsys)
        changed = snapshot(out) != before
        ok = code == 2 and one_line(output) and str(out) in output and said in output and not changed
        record("--force: only an earlier export", failures, f"span-export {kind} --force over "
               f"{out.name}", ok, "not an earlier export of the kind: exit 2, nothing changed",
               code, output, changed)
    # (onnx over an earlier onnx export: tests/test_export_onnx.py, which exports one anyway)
    for kind, out in (("hf", hf_copy),):
        stale = out / ("model.safetensors" if kind == "hf" else "model.onnx")
        old = stale.stat().st_mtime_ns if stale.exists() else None  # (replaced by a case above)
        code, output = run_export(kind, [ckpt(w), "--out", out, "--force"], capsys)
        ok = (code == 0 and old is not None and stale.stat().st_mtime_ns != old
              and not list(tmp_path.glob("*.lock")))
        record("--force: only an earlier export", failures, f"span-export {kind} --force over "
               f"an earlier {kind} export", ok, "an earlier export of the kind: replaced, exit 0",
               code, output)
    assert not failures, "\n\n".join(failures)


# ---- links ------------------------------------------------------------------------------


def test_an_output_through_a_link_is_written_where_it_points(fresh, world, capsys, tmp_path):
    from span_plugin.formats.model_folder import verify_folder

    w, _ = world
    failures = []
    earlier = tmp_path / "earlier"
    shutil.copytree(w / "exported", earlier)
    cases = [("a link to an earlier export", earlier),
             ("a link to a folder not made yet", tmp_path / "later" / "model")]
    for k, (what, target) in enumerate(cases):
        link = tmp_path / f"link{k}"
        link.symlink_to(target)
        code, output = run_export("hf", [ckpt(w), "--out", link, "--force"], capsys)
        ok = code == 0 and link.is_symlink() and os.readlink(link) == str(target)
        try:
            ok = ok and verify_folder(target) is not None
        except Exception as err:  # noqa: BLE001 - a folder that is not whole
            ok, output = False, output + f"\n{err}"
        ok = ok and not [p for p in tmp_path.rglob("*") if re.search(r"\.(lock|partial-\d+|old-\d+)$", p.name)]
        record("links", failures, f"span-export hf --out {what}", ok,
               "written where it points, the link kept, exit 0", code, output)
    # span-predict --output through a link to a file of its own: the file is written
    pred = tmp_path / "pred.tsv"
    pred.write_text("an earlier prediction\n")
    link = tmp_path / "pred-link.tsv"
    link.symlink_to(pred)
    code, output = run_main(predict_cli.main, ["--model", w / "exported", "--data", w / "data",
                                               "--split", "valid", "--output", link], capsys)
    ok = (code == 0 and link.is_symlink() and pred.read_text() != "an earlier prediction\n"
          and pred.read_text().strip() != "")
    record("links", failures, "span-predict --output a link to a file", ok,
           "written where it points, the link kept, exit 0", code, output)
    assert not failures, "\n\n".join(failures)


# ---- messages about outputs -------------------------------------------------------------


def test_predict_output_inside_the_model_folder(fresh, world, capsys, tmp_path):
    w, _ = world
    rng, failures = random.Random(SEED + 2), []
    model = w / "exported"
    link = tmp_path / "model-link"
    link.symlink_to(model)
    spellings = [(["--output"], model / "pred.tsv"), (["--output"], model / "new" / "pred.tsv"),
                 (["--output"], link / "pred.tsv"), (["--output"], model / "config.json"),
                 (["--output", tmp_path / "ok.tsv", "--results"], model / "results.json")]
    for flags, out in rng.sample(spellings, len(spellings)):
        before = snapshot(model)
        code, output = run_main(predict_cli.main, ["--model", model, "--data", w / "data",
                                                   "--split", "valid", *flags, out], capsys)
        changed = snapshot(model) != before
        ok = (code == 2 and one_line(output) and str(out) in output and "inside" in output
              and "--model" in output and "not listed in files.json" not in output
              and not changed)
        record("messages", failures, f"span-predict --model DIR {flags[-1]} {out}", ok,
               "refused up front: inside the model folder", code, output, changed)
    assert not failures, "\n\n".join(failures)


# ---- locks per thing --------------------------------------------------------------------


def test_locks_are_per_thing_not_per_name(fresh, world, capsys, tmp_path):
    from test_fuzz_writers import holder
    from test_training_guard import train

    w, _ = world
    rng, failures = random.Random(SEED + 3), []
    real = tmp_path / "real"
    shutil.copytree(w / "exported", real)
    (tmp_path / "sub").mkdir()
    names = {"a symbolic link": tmp_path / "link", "another spelling": tmp_path / "sub" / ".." / "real",
             "a link to its folder": tmp_path / "dirlink" / "real"}
    names["a symbolic link"].symlink_to(real)
    (tmp_path / "dirlink").symlink_to(tmp_path)
    for what, name in names.items():
        kind = rng.choice(["python", "shell", "fairseq"])
        held, used = rng.choice([(real, name), (name, real)])
        first = holder(kind, held, "span-export hf first run", tmp_path)
        try:
            before = snapshot(real)
            code, output = run_export("hf", [ckpt(w), "--out", used, "--force"], capsys)
            changed = snapshot(real) != before
            ok = (code == 2 and one_line(output) and f"being written by process {first.pid}" in output
                  and not changed)
            record("locks per thing", failures, f"span-export hf --out {used} while a {kind} "
                   f"process holds {held} ({what})", ok, "exit 2, holder named, nothing changed",
                   code, output, changed)
        finally:
            first.kill()
            first.wait()
    # span-predict --output through a link while the file is held
    pred = tmp_path / "pred.tsv"
    pred.write_text("earlier\n")
    (tmp_path / "pred-link.tsv").symlink_to(pred)
    first = holder("python", pred, "span-predict first run", tmp_path)
    try:
        code, output = run_main(predict_cli.main, ["--model", w / "exported", "--data", w / "data",
                                                   "--split", "valid", "--output",
                                                   tmp_path / "pred-link.tsv"], capsys)
        ok = code == 2 and f"being written by process {first.pid}" in output and pred.read_text() == "earlier\n"
        record("locks per thing", failures, "span-predict --output a link to a held file", ok,
               "exit 2, holder named, nothing changed", code, output)
    finally:
        first.kill()
        first.wait()
    # fairseq-train into a symbolic link of a --save-dir a live run holds
    run = tmp_path / "run"
    shutil.copytree(w / "run" / "checkpoints", run)
    (tmp_path / "run-link").symlink_to(run)
    last = (run / "checkpoint_last.pt").read_bytes()
    first = holder("fairseq", run, "fairseq-train data --save-dir run", tmp_path)
    try:
        capsys.readouterr()
        code = train(w / "data", tmp_path / "run-link", max_update=2)
        output = "".join(capsys.readouterr())
        ok = (code == 2 and f"being written by process {first.pid}" in output
              and (run / "checkpoint_last.pt").read_bytes() == last)
        record("locks per thing", failures, "fairseq-train --save-dir a link to a held run", ok,
               "exit 2, holder named, nothing changed", code, output,
               (run / "checkpoint_last.pt").read_bytes() != last)
    finally:
        first.kill()
        first.wait()
    assert not failures, "\n\n".join(failures)


# ---- a full disk ------------------------------------------------------------------------


class FullDisk:
    """Within the block, every write under ``root`` fails with ENOSPC, as on a full disk:
    ``os.write``/``os.ftruncate`` on a file there, and writes through files opened there
    (``only``: a predicate of the file's path, to fail some files only)."""

    def __init__(self, root, only=None):
        self.root, self.only = os.path.realpath(root), only or (lambda path: True)

    def _full(self, path):
        path = os.path.realpath(os.fspath(path))
        return path.startswith(self.root + os.sep) and self.only(path)

    def _fd_full(self, fd):
        try:
            return self._full(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return False

    def __enter__(self):
        import builtins
        import io

        real_write, real_truncate, real_open = os.write, os.ftruncate, builtins.open
        disk = self

        def write(fd, data):
            if data and disk._fd_full(fd):
                raise OSError(errno.ENOSPC, ENOSPC)
            return real_write(fd, data)

        def ftruncate(fd, length):
            if length and disk._fd_full(fd):
                raise OSError(errno.ENOSPC, ENOSPC)
            return real_truncate(fd, length)

        class Full:
            def __init__(self, f):
                self._f = f

            def write(self, data):
                if data:
                    raise OSError(errno.ENOSPC, ENOSPC)
                return 0

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return self._f.__exit__(*exc)

            def __iter__(self):
                return iter(self._f)

            def __getattr__(self, name):
                return getattr(self._f, name)

        def fopen(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            if isinstance(file, (str, os.PathLike)) and any(m in mode for m in "wax+") \
                    and disk._full(file):
                return Full(f)
            return f

        self._patch = pytest.MonkeyPatch()
        self._patch.setattr(os, "write", write)
        self._patch.setattr(os, "ftruncate", ftruncate)
        self._patch.setattr(builtins, "open", fopen)
        self._patch.setattr(io, "open", fopen)
        return self

    def __exit__(self, *exc):
        self._patch.undo()


LEFT = re.compile(r"(\.lock|\.tmp|\.partial-\d+|\.old-\d+)$")


def left_behind(root):
    return sorted(str(p) for p in root.rglob("*") if LEFT.search(p.name))


def test_a_full_disk(fresh, world, capsys, tmp_path):
    from span_plugin.files.outputs import locked

    w, _ = world
    failures = []
    full = tmp_path / "full"
    full.mkdir()
    earlier = full / "pred.tsv"
    earlier.write_text("an earlier prediction\n")
    # taking a lock needs no space
    output = ""
    try:
        with FullDisk(full), locked(earlier):
            pass
        ok = not left_behind(full)
    except OSError as err:
        ok, output = False, f"{TRACEBACK}\n{type(err).__name__}: {err}"
    record("a full disk", failures, "locked() on a full disk", ok,
           "the lock taken, nothing left", 0 if ok else 1, output)
    # meanwhile a second writer is refused, the holder named as one that wrote no PID
    try:
        with FullDisk(full), locked(earlier):
            other = subprocess.run([sys.executable, "-c", "from span_plugin.files.outputs "
                                    f"import locked\nwith locked({str(earlier)!r}): pass"],
                                   capture_output=True, text=True, timeout=120)
        code, output = other.returncode, other.stderr
        ok = code != 0 and "is being written by another process (it wrote no PID" in output
    except OSError as err:
        code, output, ok = 1, f"{TRACEBACK}\n{type(err).__name__}: {err}", False
    record("a full disk", failures, "a second writer of an output locked on a full disk", ok,
           "refused, the holder named as one without a PID", code, output)
    argv = ["--model", w / "exported", "--data", w / "data", "--split", "valid", "--output", earlier]
    # only the lock's PID line fails: the rewrite of an earlier output works as it did
    with FullDisk(full, only=lambda path: path.endswith(".lock")):
        code, output = run_main(predict_cli.main, argv, capsys)
    ok = code == 0 and earlier.read_text() != "an earlier prediction\n" and not left_behind(full)
    record("a full disk", failures, "span-predict rewriting an earlier output, the lock's "
           "write failing", ok, "exit 0, the output written", code, output)
    # nothing can be written: one line naming the output, nothing left, the earlier output kept
    kept = earlier.read_text()
    with FullDisk(full):
        code, output = run_main(predict_cli.main, argv, capsys)
    ok = (code == 2 and one_line(output) and ENOSPC in output and f"{earlier}'" in output
          and earlier.read_text() == kept and not left_behind(full))
    record("a full disk", failures, "span-predict onto a full disk", ok,
           "exit 2, one line naming the output and ENOSPC, nothing left", code, output)
    # span-export onnx: the exporter wraps the failed write of model.onnx in its own error
    with FullDisk(full):
        code, output = run_export("onnx", [ckpt(w), "--out", full / "onnx"], capsys)
    ok = (code == 2 and one_line(output) and ENOSPC in output and f"{full / 'onnx'}'" in output
          and not (full / "onnx").exists() and not left_behind(full))
    record("a full disk", failures, "span-export onnx onto a full disk", ok,
           "exit 2, one line naming the output and ENOSPC, nothing left", code, output)
    assert not failures, "\n\n".join(failures)


def _namespaces():
    """Whether this machine lets a process mount a tmpfs in a mount namespace of its own."""
    try:
        return subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


TMPFS_SCRIPT = r"""
set -u
mount -t tmpfs -o size="$SIZE" tmpfs "$DISK" || exit 99
if [ "$FILL" = 1 ]; then dd if=/dev/zero of="$DISK/filler" bs=4k >/dev/null 2>&1; fi
"$@" > "$DISK.out" 2>&1
echo "exit $?" >> "$DISK.out"
find "$DISK" -mindepth 1 | sort >> "$DISK.out"
"""


def on_tmpfs(tmp_path, size, fill, argv):
    """``(exit status, output, paths left on the disk)``: ``argv`` run in a mount namespace
    of its own with a tmpfs of ``size`` at tmp_path/disk (filled first when ``fill``)."""
    disk = tmp_path / "disk"
    disk.mkdir(exist_ok=True)
    env = dict(os.environ, SIZE=size, DISK=str(disk), FILL="1" if fill else "0",
               PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["unshare", "-rm", "bash", "-c", TMPFS_SCRIPT, "tmpfs", *map(str, argv)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (tmp_path / "disk.out").read_text()
    body, _, rest = text.rpartition("\nexit ")
    code, *left = rest.splitlines()
    return int(code), body, [p for p in left if p != str(disk / "filler")]


@pytest.mark.skipif(not _namespaces(), reason="no mount namespace to make a tmpfs in")
def test_exports_onto_a_real_full_disk(fresh, world, tmp_path):
    """span-export hf onto a tmpfs too small for it (safetensors' own writer), and
    span-predict onto a full one (its lock, then its output): one line naming the output
    and ENOSPC, exit 2, nothing left."""
    w, _ = world
    failures = []
    disk = tmp_path / "disk"
    cases = [
        ("span-export hf onto a 1 MB disk", "1m", False, disk / "out",
         [BIN / "span-export", "hf", ckpt(w), "--out", disk / "out"]),
        ("span-predict onto a full disk", "256k", True, disk / "pred.tsv",
         [BIN / "span-predict", "--model", w / "exported", "--data", w / "data", "--split",
          "valid", "--output", disk / "pred.tsv"]),
    ]
    for what, size, fill, out, argv in cases:
        code, output, left = on_tmpfs(tmp_path, size, fill, argv)
        ok = (code == 2 and one_line(output) and ENOSPC in output and str(out) in output
              and not left)
        record("a full disk", failures, what, ok, "exit 2, one line naming the output and "
               "ENOSPC, nothing left", code, output + f"\nleft: {left}")
    assert not failures, "\n\n".join(failures)


def test_outcome_table():
    """Runs last in the module: the table of its cases (and FUZZ_TABLE=PATH)."""
    OUTCOMES.check_table()
