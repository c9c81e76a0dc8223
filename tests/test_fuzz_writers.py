"""Seeded cases of what a command writes, through the real entry points (in this process
or as console scripts; recipes through bash), three classes:

- output over an input: every writer (span-preprocess table, glue, conll, qa, pairs,
  binarize, ngrams, align-pairs, qa-split, qa-sample; span-convert bert and roberta;
  span-predict; a GLUE recipe) is given an output that is one of its inputs, the folder
  holding one, or a link to either. It must exit 2 naming both, without a traceback,
  and leave every file as it was (nothing created, nothing lost);
- concurrent writers: the output is held by another live process, as a builder, a
  recipe or fairseq-train holds it (``span_plugin.files.outputs``), over an earlier
  output. The writer must exit 2 naming the holder's PID and command, the earlier output
  byte for byte as it was; once the holder is killed (SIGKILL: its lock file stays),
  the same command succeeds. One case races two real builds;
- resume onto changed data: a run of one update on real SST-2 rows, its folder rebuilt
  with a seeded change, relaunched by fairseq's own resume of checkpoint_last.pt or with
  --restore-file. A change must exit 2 before the first update naming the first
  differing part of the record and both values, the checkpoint untouched; a rebuild
  that changes nothing must resume; the --reset-* flags must start over.

``FUZZ_TABLE=PATH`` appends the table of outcomes by class to PATH.
"""

import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from fuzz_outcomes import TRACEBACK, Outcomes, head, snapshot
from conftest import BIN, DATA, GLUE, GPT2_BPE, ROOT, run_cli
from test_training_guard import train  # fairseq-train in-process: its exit status
from span_plugin.cli import convert as convert_cli
from span_plugin.cli import predict as predict_cli
from span_plugin.cli import preprocess as preprocess_cli
from span_plugin.files.outputs import lock_path
from span_plugin.runtime.checkpoints import load_mapped
from span_plugin.runtime.data_record import checkpoint_record

SEED = 51
OUTCOMES = Outcomes(lost="files")
record = OUTCOMES.record


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Every writer's inputs, from real rows: SST-2 and MRPC tables, WNLI, CoNLL-2003,
    a SQuAD article, MRPC phrase pairs, a text file, GPT-2's BPE files (its first 3,000
    symbols as dict.txt), a Hugging Face folder's files, a file named as a checkpoint."""
    w = tmp_path_factory.mktemp("writers")
    (w / "sst2").mkdir()
    (w / "sst2" / "train.tsv").write_text(head(GLUE / "SST-2" / "train.tsv", 41))
    (w / "sst2" / "valid.tsv").write_text(head(GLUE / "SST-2" / "dev.tsv", 11))
    for task, n in (("WNLI", 30), ("MRPC", 40)):
        (w / "glue" / task).mkdir(parents=True)
        (w / "glue" / task / "train.tsv").write_text(head(GLUE / task / "train.tsv", n))
        (w / "glue" / task / "dev.tsv").write_text(head(GLUE / task / "dev.tsv", 12))
    (w / "conll").mkdir()
    for split in ("train", "valid"):
        (w / "conll" / f"{split}.txt").write_text(head(DATA / "conll2003" / f"{split}.txt", 120))
    squad = json.loads((DATA / "squad" / "dev-v1.1.json").read_text())
    article = squad["data"][0]
    (w / "squad").mkdir()
    for split, paragraphs in (("train", article["paragraphs"][:2]),
                              ("valid", article["paragraphs"][2:3])):
        (w / "squad" / f"{split}.json").write_text(json.dumps(
            {"version": "1.1", "data": [dict(article, paragraphs=paragraphs)]}))
    mrpc = [line.rstrip("\n").split("\t") for line in head(GLUE / "MRPC" / "train.tsv", 21).splitlines(True)[1:]]
    (w / "pairs").mkdir()
    (w / "pairs" / "train.jsonl").write_text("".join(
        json.dumps({"sentence1": r[3], "sentence2": r[4], "label": r[0],
                    "phrases": [{"source": [0, len(r[3].split()[0])],
                                 "target": [0, len(r[4].split()[0])], "label": "paraphrase"}]})
        + "\n" for r in mrpc))
    (w / "text").mkdir()
    (w / "text" / "corpus.txt").write_text(head(GLUE / "SST-2" / "train.tsv", 200))
    (w / "enc").mkdir()
    (w / "enc" / "dict.txt").write_text(head(GPT2_BPE / "dict.txt", 3000))
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(GPT2_BPE / name, w / "enc" / name)
    (w / "hf").mkdir()
    (w / "hf" / "config.json").write_text('{"model_type": "bert"}\n')
    (w / "hf" / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
    (w / "ckpt").mkdir()
    (w / "ckpt" / "model.pt").write_bytes(b"a checkpoint's name; refused before it is read")
    return w


def enc(w):
    return ["--srcdict", str(w / "enc" / "dict.txt"), "--gpt2-encoder-json",
            str(w / "enc" / "encoder.json"), "--gpt2-vocab-bpe", str(w / "enc" / "vocab.bpe"),
            "--segmentation", "none", "--workers", "1"]


def enc_inputs(w):
    return {"--srcdict": w / "enc" / "dict.txt", "--gpt2-encoder-json": w / "enc" / "encoder.json",
            "--gpt2-vocab-bpe": w / "enc" / "vocab.bpe"}


class Writer:
    """One command that writes ``out``: ``argv(w, out)``, the flag naming its output,
    whether that is a folder or a file, its inputs ``{flag: path}``, and whether a
    rerun after the holder is gone is cheap enough to make here."""

    def __init__(self, name, command, flag, folder, argv, inputs, rerun=False):
        self.name, self.command, self.flag, self.folder = name, command, flag, folder
        self.argv, self.inputs, self.rerun = argv, inputs, rerun


WRITERS = [
    Writer("table", "span-preprocess", "--out", True, lambda w, o: [
        "table", "--out", str(o), "--train", str(w / "sst2" / "train.tsv"), "--valid",
        str(w / "sst2" / "valid.tsv"), "--text-columns", "sentence", "--label-column", "label",
        *enc(w)], lambda w: {"--train": w / "sst2" / "train.tsv",
                             "--valid": w / "sst2" / "valid.tsv", **enc_inputs(w)}, rerun=True),
    Writer("glue", "span-preprocess", "--out", True, lambda w, o: [
        "glue", "--task", "WNLI", "--glue-dir", str(w / "glue"), "--out", str(o), *enc(w)],
        lambda w: {"--glue-dir": w / "glue" / "WNLI", **enc_inputs(w)}),
    Writer("conll", "span-preprocess", "--out", True, lambda w, o: [
        "conll", "--out", str(o), "--train", str(w / "conll" / "train.txt"), "--valid",
        str(w / "conll" / "valid.txt"), *enc(w)],
        lambda w: {"--train": w / "conll" / "train.txt", "--valid": w / "conll" / "valid.txt",
                   **enc_inputs(w)}),
    Writer("qa", "span-preprocess", "--out", True, lambda w, o: [
        "qa", "--out", str(o), "--train", str(w / "squad" / "train.json"), "--valid",
        str(w / "squad" / "valid.json"), "--max-positions", "128", "--doc-stride", "32", *enc(w)],
        lambda w: {"--train": w / "squad" / "train.json", "--valid": w / "squad" / "valid.json",
                   **enc_inputs(w)}),
    Writer("pairs", "span-preprocess", "--out", True, lambda w, o: [
        "pairs", "--out", str(o), "--train", str(w / "pairs" / "train.jsonl"), "--label-column",
        "label", *enc(w)], lambda w: {"--train": w / "pairs" / "train.jsonl", **enc_inputs(w)}),
    Writer("binarize", "span-preprocess", "--bpe-text", False, lambda w, o: [
        "binarize", str(w / "text" / "corpus.txt"), str(w / "bin" / "train"), "--bpe-text",
        str(o), *enc(w)], lambda w: {"--input": w / "text" / "corpus.txt", **enc_inputs(w)},
        rerun=True),
    Writer("ngrams", "span-preprocess", "--out", False, lambda w, o: [
        "ngrams", "--text", str(w / "text" / "corpus.txt"), "--out", str(o), "--min-count", "2",
        "--workers", "1"], lambda w: {"--text": w / "text" / "corpus.txt"}, rerun=True),
    Writer("align-pairs", "span-preprocess", "--out", False, lambda w, o: [
        "align-pairs", "--input", str(w / "glue" / "MRPC" / "train.tsv"), "--out", str(o)],
        lambda w: {"--input": w / "glue" / "MRPC" / "train.tsv"}),
    Writer("qa-split", "span-preprocess", "--out-first", False, lambda w, o: [
        "qa-split", str(w / "squad" / "train.json"), "--first", "1", "--out-first", str(o),
        "--out-rest", str(w / "rest.json")], lambda w: {"--input": w / "squad" / "train.json"}),
    Writer("qa-sample", "span-preprocess", "--out", False, lambda w, o: [
        "qa-sample", str(w / "squad" / "valid.json"), "--out", str(o), "--questions", "3"],
        lambda w: {"--input": w / "squad" / "valid.json"}, rerun=True),
    Writer("convert bert", "span-convert", "--out", True, lambda w, o: [
        "bert", "--hf-dir", str(w / "hf"), "--out", str(o), "--force"],
        lambda w: {"--hf-dir": w / "hf"}),
    Writer("convert roberta", "span-convert", "--out", True, lambda w, o: [
        "roberta", "--hf-dir", str(w / "hf"), "--out", str(o), "--force"],
        lambda w: {"--hf-dir": w / "hf"}),
    Writer("predict", "span-predict", "--output", False, lambda w, o: [
        "--checkpoint", str(w / "ckpt" / "model.pt"), "--input", str(w / "pairs" / "train.jsonl"),
        "--output", str(o)], lambda w: {"--checkpoint": w / "ckpt" / "model.pt",
                                        "--input": w / "pairs" / "train.jsonl"}),
    Writer("recipe", "recipes/glue/MRPC.sh", "OUT_DIR", True, None,
           lambda w: {"GLUE_DIR": w / "glue" / "MRPC", "BPE_DIR": w / "enc"}),
]
MAINS = {"span-preprocess": preprocess_cli.main, "span-convert": convert_cli.main,
         "span-predict": predict_cli.main}


def run_writer(writer, w, out, console, capsys):
    """``(exit status, output)`` of the writer with output ``out``."""
    if writer.command.startswith("recipes/"):
        env = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "FROM_SCRATCH": "1",
               "GLUE_DIR": str(w / "glue"), "BPE_DIR": str(w / "enc"), "OUT_DIR": str(out),
               "DATA_DIR": str(w / "data-bin" / "MRPC"), "HOME": str(w / "home")}
        proc = run_cli("bash", ROOT / writer.command, "--cpu", env=env, check=False, cwd=w)
        return proc.returncode, proc.stdout
    argv = writer.argv(w, out)
    if console:
        proc = run_cli(writer.command, *argv, check=False, cwd=w)
        return proc.returncode, proc.stdout
    capsys.readouterr()
    code = MAINS[writer.command](argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def over_an_input(rng, writer, w):
    """A seeded output over one of the writer's inputs: ``(out, "is" or "holds")``."""
    flag, path = rng.choice(sorted((f, p) for f, p in writer.inputs(w).items()))
    links = w / "links"
    links.mkdir(exist_ok=True)
    if not writer.folder:  # a file: the input itself, or a link to it
        if path.is_dir():
            return path, "holds"
        if rng.random() < 0.5:
            return path, "is"
        link = links / f"{writer.name.replace(' ', '_')}.link"
        link.unlink(missing_ok=True)
        link.symlink_to(path)
        return link, "is"
    form = rng.choice(["itself", "parent", "link"])
    target = path if path.is_dir() and form != "parent" else path.parent
    how = "is" if target == path else "holds"
    if form == "link":
        link = links / f"{writer.name.replace(' ', '_')}.dir"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        return link, how
    return target, how


def test_outputs_over_inputs(work, capsys, tmp_path):
    rng, failures = random.Random(SEED), []
    work = shutil.copytree(work, tmp_path / "work")  # an input lost here is lost to no other test
    for k, writer in enumerate(WRITERS):
        out, how = over_an_input(rng, writer, work)
        before = snapshot(work)
        console = k % 5 == 0 and not writer.command.startswith("recipes/")
        code, output = run_writer(writer, work, out, console, capsys)
        case = f"{writer.name} with {writer.flag} {out} (console script: {console})"
        changed = snapshot(work) != before
        ok = (code == 2 and f"{writer.flag} {out} {how} the input " in output
              and TRACEBACK not in output and not changed)
        record("output over an input", failures, case, ok, "exit 2, named, nothing changed",
               code, output, changed)
    assert not failures, "\n\n".join(failures)


def holder(kind, out, command, cwd):
    """A live process holding ``out`` as a builder (``python``), a recipe (``shell``) or
    fairseq-train (``fairseq``) holds it."""
    if kind == "shell":
        script = (f"RECIPE_NAME={shlex.quote(command)}; source {ROOT}/recipes/lib.sh; "
                  f"hold_output {out} OUT_DIR; echo held; exec sleep 120")
        argv = ["bash", "-c", script]
    else:
        take = ("from span_plugin.files.outputs import hold\n"
                f"hold({str(out)!r}, {command!r})\n" if kind == "fairseq" else
                "from span_plugin.files.outputs import locked\n"
                f"held = locked({str(out)!r}, {command!r})\nheld.__enter__()\n")
        argv = [sys.executable, "-c", take + "print('held', flush=True)\nimport time\ntime.sleep(120)\n"]
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}"))
    assert proc.stdout.readline() == "held\n"
    return proc


def earlier_output(writer, out, built):
    """What an earlier run left at ``out``: a real folder, or a file."""
    if writer.folder:
        shutil.copytree(built, out)
    else:
        out.write_text("an earlier run's output\n")


@pytest.fixture(scope="module")
def built(work):
    out = work / "built"
    assert preprocess_cli.main(WRITERS[0].argv(work, out)) == 0
    return out


def test_concurrent_writers(work, built, capsys, tmp_path):
    rng, failures = random.Random(SEED + 1), []
    for k, writer in enumerate(WRITERS):
        out = tmp_path / writer.name.replace(" ", "_") / "out"
        out.parent.mkdir()
        earlier_output(writer, out, built)
        kind = rng.choice(["python", "shell", "fairseq"])
        first_command = f"{writer.command} first run"
        first = holder(kind, out, first_command, tmp_path)
        try:
            before = snapshot(tmp_path)
            console = k % 4 == 1 and not writer.command.startswith("recipes/")
            code, output = run_writer(writer, work, out, console, capsys)
            case = f"{writer.name} into {out} held by a {kind} process (console script: {console})"
            named = f"{out} is being written by process {first.pid} ({first_command}"
            changed = snapshot(tmp_path) != before
            ok = code == 2 and named in output and TRACEBACK not in output and not changed
            record("concurrent writers", failures, case, ok,
                   "exit 2, holder named, earlier output intact", code, output, changed)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait()
        if writer.rerun:
            left = os.path.exists(lock_path(out))  # the killed holder's lock file
            code, output = run_writer(writer, work, out, False, capsys)
            ok = left and code == 0 and not os.path.exists(lock_path(out))
            record("concurrent writers", failures, f"{writer.name} after its holder was killed",
                   ok, "holder killed: the lock taken over, exit 0", code, output)
    assert not failures, "\n\n".join(failures)


def test_two_real_builds_race(work, tmp_path):
    """Two real span-preprocess processes into one --out: the second, started while the
    first holds the folder, exits 2 naming it; the first ends whole."""
    big = tmp_path / "big.tsv"
    big.write_text(head(GLUE / "SST-2" / "train.tsv", 3001))
    out = tmp_path / "out"
    argv = WRITERS[0].argv(work, out)
    argv[argv.index("--train") + 1] = str(big)
    argv[argv.index("--segmentation") + 1] = "greedy"  # loads the n-gram dictionary: slower
    first = subprocess.Popen([str(BIN / "span-preprocess"), *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while not os.path.exists(lock_path(out)) and first.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    second = run_cli("span-preprocess", *argv, check=False)
    log = first.communicate()[0]
    assert first.returncode == 0, log
    assert second.returncode == 2, second.stdout
    assert f"{out} is being written by process {first.pid} (span-preprocess table" in second.stdout
    run_cli("span-preprocess", "check", out)
    OUTCOMES.counts["concurrent writers"]["two real builds: second exit 2, first whole"] += 1


def test_fairseq_train_into_a_held_save_dir(resumable, tmp_path, capsys):
    save = tmp_path / "run"
    first = holder(random.Random(SEED + 2).choice(["python", "fairseq", "shell"]), save,
                   "fairseq-train data --save-dir run", tmp_path)
    try:
        code = train(resumable / "data", save)
        err = capsys.readouterr().err
        ok = (code == 2 and f"{save} is being written by process {first.pid}" in err
              and not save.exists())
        OUTCOMES.counts["concurrent writers"]["exit 2, holder named, earlier output intact"
                                       if ok else "problem"] += 1
        assert ok, err[-2000:]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert train(resumable / "data", save) == 0
    OUTCOMES.counts["concurrent writers"]["holder killed: the lock taken over, exit 0"] += 1


# ---- resume onto changed data ---------------------------------------------------------

SST2 = head(GLUE / "SST-2" / "train.tsv", 61).splitlines(True)
HEADER, ROWS = SST2[0], SST2[1:]  # 33 rows of label 0, 27 of label 1


def build(work, folder, rows, *extra):
    src = folder.parent / f"{folder.name}.src.tsv"
    src.write_text(HEADER + "".join(rows))
    argv = ["table", "--out", str(folder), "--train", str(src), "--text-columns", "sentence",
            "--label-column", "label", *enc(work), *extra]
    assert preprocess_cli.main(argv) == 0


@pytest.fixture(scope="module")
def resumable(work, tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    build(work, root / "data", ROWS)
    assert train(root / "data", root / "run") == 0
    return root


def change_labels(rng, work, tmp):
    """Fewer rows of label 0 than of label 1: the label dictionary's order flips."""
    ones = [r for r in ROWS if r.endswith("\t1\n")]
    zeros = [r for r in ROWS if r.endswith("\t0\n")]
    rows = ones + rng.sample(zeros, rng.randint(10, 25))
    rng.shuffle(rows)
    return rows, (), "labels.names"


def change_dictionary(rng, work, tmp):
    """dict.txt with two of its lines swapped (the same size)."""
    lines = (work / "enc" / "dict.txt").read_text().splitlines(True)
    i, j = rng.sample(range(10, len(lines)), 2)
    lines[i], lines[j] = lines[j], lines[i]
    (tmp / "dict.txt").write_text("".join(lines))
    return ROWS, ("--srcdict", str(tmp / "dict.txt")), "encoder.srcdict"


def change_segmentation(rng, work, tmp):
    return ROWS, ("--segmentation", "greedy", "--ngrams-top-k", str(rng.choice([1000, 20000]))), "encoder.ngrams"


def change_rows(rng, work, tmp):
    """Rows dropped, the label order kept."""
    rows = list(ROWS)
    for _ in range(rng.randint(1, 5)):
        rows.remove(rng.choice([r for r in rows if r.endswith("\t0\n")]))
    return rows, (), "rows.train"


def change_nothing(rng, work, tmp):
    return ROWS, (), None


CHANGES = {"label order": change_labels, "dictionary": change_dictionary,
           "encoder settings": change_segmentation, "rows": change_rows,
           "nothing": change_nothing}


def test_resume_onto_changed_data(work, resumable, tmp_path, capsys):
    rng, failures = random.Random(SEED + 3), []
    cases = [(change, how) for change in CHANGES for how in ("resume", "restore-file")]
    cases += [(rng.choice(sorted(set(CHANGES) - {"nothing"})), "reset flags")]
    for k, (change, how) in enumerate(cases):
        case_dir = tmp_path / str(k)
        shutil.copytree(resumable / "data", case_dir / "data")
        shutil.copytree(resumable / "run", case_dir / "run")
        rows, flags, key = CHANGES[change](rng, work, case_dir)
        build(work, case_dir / "data", rows, *flags)
        last = case_dir / "run" / "checkpoint_last.pt"
        before = last.read_bytes()
        save, extra = case_dir / "run", ()
        if how == "restore-file":
            save, extra = case_dir / "new", ("--restore-file", str(last))
        elif how == "reset flags":
            extra = ("--reset-optimizer", "--reset-meters", "--reset-dataloader")
        capsys.readouterr()
        # resumed: update 2; started over (reset flags): update 1
        max_update = 1 if how == "reset flags" else 2
        code = train(case_dir / "data", save, *extra, max_update=max_update)
        err = capsys.readouterr().err
        label = f"{change} ({how})"
        if key is None or how == "reset flags":
            saved = load_mapped(save / "checkpoint_last.pt")
            ok = (code == 0 and saved["optimizer_history"][-1]["num_updates"] == max_update
                  and checkpoint_record(saved)["rows"] == {"train": len(rows)})
            good = "nothing changed: resumed" if key is None else "reset flags: started over"
        else:
            saved = sorted(save.glob("*.pt"))  # --restore-file: nothing saved in the new run
            ok = (code == 2 and f"{last} was trained on other data than " in err
                  and f"holds now: its {key} is " in err and ", the folder's is " in err
                  and "--reset-optimizer" in err and TRACEBACK not in err
                  and last.read_bytes() == before
                  and (saved == [last] if save == last.parent else not saved))
            good = "exit 2 before training, both named"
        record("resume onto changed data", failures, label, ok, good, code, err,
               changed=last.read_bytes() != before)
    assert not failures, "\n\n".join(failures)


def test_outcome_table():
    """Runs last in the module: the table of its cases (and FUZZ_TABLE=PATH)."""
    OUTCOMES.check_table()
