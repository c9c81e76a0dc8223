"""Shared helpers for the test suite: paths to the real data and the real CLIs."""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import span_plugin
# benchmarks/common.py (on the path through pytest.ini): the paths, the data and the tiny
# model that the tests share with the benchmarks and studies
from common import DATA, GLUE, GPT2_BPE, ROOT, TINY_ROBERTA, minilm_dir  # noqa: F401
from script_runner import exit_status

# Tests call fairseq's entry points in-process after importing span_plugin: register the
# stack fixes (torch.load of fairseq checkpoints), tasks, models and criterions first.
span_plugin.register()

# No test reads its input, and no command it starts may wait on a runner's stdin that
# stays open (CI): every child inherits /dev/null as its fd 0.
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)

# A recipe run that forgets FROM_SCRATCH=1 converts the packaged encoder into the cache:
# keep that out of the user's ~/.cache.
os.environ.setdefault("SPAN_CACHE", os.path.join(tempfile.gettempdir(), "span_plugin_test_cache"))

# Two test workers share the machine's cores (pytest.ini): one thread each, and one for
# every command they start, instead of each oversubscribing every core.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    import torch

    torch.set_num_threads(1)

# The commands set logger levels for their own output (span-predict puts fairseq's at
# WARNING): a test, or a module fixture, that runs one in this process must not take
# fairseq's INFO logs (the progress bar's stats lines) away from the tests after it on the
# same worker. Every test starts and ends with the levels this process started with (a
# module fixture runs before a test's own fixtures, so restoring what a test found is not
# enough).
LOGGERS_THE_COMMANDS_SET = ("", "fairseq", "matplotlib", "PIL")


def _start_levels():
    import logging

    return {name: logging.getLogger(name).level for name in LOGGERS_THE_COMMANDS_SET}


START_LEVELS = _start_levels()


@pytest.fixture(autouse=True)
def _logger_levels_restored():
    import logging

    for name, level in START_LEVELS.items():
        logging.getLogger(name).setLevel(level)
    yield
    for name, level in START_LEVELS.items():
        logging.getLogger(name).setLevel(level)


# The two workers take whole files (--dist loadfile) in collection order
# (--no-loadscope-reorder; xdist would otherwise start files with many tests first and
# leave the one-test grid runs of two or three minutes to the end, one worker idle).
# The files with the longest indivisible runs go first.
LONGEST_FIRST = ("test_recipes.py", "test_transfer_grid.py", "test_glue_grid.py",
                 "test_crash_safety.py", "test_recipes_bert.py", "test_transfer_recipe.py",
                 "test_multinode.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: else as found


USER_DIR = ROOT / "span_plugin"
BIN = Path(sys.executable).parent


def run_cli(name, *args, cwd=None, env=None, check=True, timeout=1200):
    """Run a console script of this environment (fairseq-train, span-preprocess, ...)
    or a system command (bash); on failure, raise with its output so the test log
    shows why."""
    full_env = dict(os.environ, **(env or {}))
    # Children (recipes calling fairseq-train, ...) use this same environment.
    full_env["PATH"] = f"{BIN}{os.pathsep}{full_env.get('PATH', '')}"
    command = str(BIN / name) if (BIN / name).exists() else name
    try:
        # stdin from /dev/null: a command that waits for input fails instead of hanging
        # on a runner whose stdin stays open.
        proc = subprocess.run(
            [command, *map(str, args)], cwd=cwd, env=full_env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode("utf-8", "replace") if isinstance(err.stdout, bytes) else err.stdout
        raise AssertionError(f"{name} still running after {timeout} s:\n{(out or '')[-6000:]}") from None
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} exited {proc.returncode}:\n{proc.stdout[-6000:]}")
    return proc


@pytest.fixture(scope="session")
def shared_data():
    if not DATA.is_dir():
        pytest.fail(f"{DATA} is missing: the tests read real data from ../shared/data")
    return DATA


def sst2_rows(split, n):
    """The first n (sentence, label) rows of real SST-2."""
    lines = (GLUE / "SST-2" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines[1 : n + 1]]
    return [(sentence, label) for sentence, label in rows]


def conll_sentences(path, n):
    """The first n sentences of a CoNLL file (with its -DOCSTART- lines)."""
    out, count = [], 0
    for line in open(path, encoding="utf-8"):
        out.append(line)
        if not line.strip() and out[-2:-1] and out[-2].strip() and not out[-2].startswith("-DOCSTART-"):
            count += 1
            if count == n:
                break
    return "".join(out)


def small_conll_folder(root, **segmentation):
    """Real CoNLL-2003 sentences (24 train, 8 valid) in a tagging folder ``root/bin``
    (GPT-2 BPE; by default greedy segmentation with the packaged n-gram dictionary)."""
    from span_plugin.preprocess.folders.conll import prepare_conll
    from span_plugin.preprocess.folders.options import FolderOptions
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec

    files = {}
    for split, n in (("train", 24), ("valid", 8)):
        files[split] = root / f"{split}.txt"
        files[split].write_text(conll_sentences(DATA / "conll2003" / f"{split}.txt", n))
    spec = EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"), **segmentation)
    prepare_conll(root / "bin", {k: str(v) for k, v in files.items()},
                  FolderOptions(spec, str(GPT2_BPE / "dict.txt"), name="conll2003"))
    return root / "bin"


@pytest.fixture(scope="session")
def sst2_bin(tmp_path_factory):
    """A fairseq-preprocess'd sample of real SST-2 rows (96 train, 32 dev), whitespace
    tokens with their own dictionary: DATA/input0 and DATA/label. For tests of the
    plain fairseq stack, which need no BPE or spans."""
    root = tmp_path_factory.mktemp("sst2")
    for split, n in (("train", 96), ("dev", 32)):
        rows = sst2_rows(split, n)
        (root / f"{split}.input0").write_text("".join(s + "\n" for s, _ in rows))
        (root / f"{split}.label").write_text("".join(y + "\n" for _, y in rows))
    for column in ("input0", "label"):
        run_main(
            "fairseq-preprocess", "--only-source", "--workers", "1",
            "--trainpref", root / f"train.{column}", "--validpref", root / f"dev.{column}",
            "--destdir", root / "data" / column,
        )
    return root / "data"


def train_args(data, save_dir, *extra, num_classes=2, max_update=4):
    """fairseq-train arguments for a tiny sentence_prediction run with the plugin loaded."""
    return [
        data, "--user-dir", USER_DIR, "--task", "sentence_prediction",
        "--num-classes", num_classes, "--criterion", "sentence_prediction",
        "--arch", "roberta_base", *TINY_ROBERTA,
        "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "16",
        "--max-update", max_update, "--save-dir", save_dir, "--cpu", "--seed", "1",
        "--no-progress-bar", "--log-interval", "1", "--log-format", "simple",
        "--no-epoch-checkpoints", "--num-workers", "0", *extra,
    ]


def num_updates(log):
    """Every num_updates figure fairseq logged."""
    return [int(n) for n in re.findall(r"num_updates (\d+)", log)]


@pytest.fixture(scope="session")
def converted_minilm(tmp_path_factory):
    """all-MiniLM-L6-v2 converted by ``span-convert bert`` (model.pt, dict.txt and its
    tokenizer), once per session."""
    out = tmp_path_factory.mktemp("minilm") / "minilm"
    run_main("span-convert", "bert", "--hf-dir", minilm_dir(), "--out", out)
    return out


@pytest.fixture(scope="session")
def tiny_bert_hf(tmp_path_factory):
    """A Hugging Face BERT folder with all-MiniLM-L6-v2's config, WordPiece vocabulary and
    tokenizer files, but 2 layers of width 32 (random weights, seed 0)."""
    import shutil

    import torch
    import transformers

    hf = tmp_path_factory.mktemp("tiny_bert_hf")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_dir() / name, hf / name)
    config = transformers.BertConfig.from_pretrained(minilm_dir())
    config.update({"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                   "intermediate_size": 64})
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(hf)
    return hf


@pytest.fixture(scope="session")
def converted_tiny_bert(tiny_bert_hf, tmp_path_factory):
    """:func:`tiny_bert_hf` converted by ``span-convert bert``: the grid tests check the
    grids' bookkeeping (records, subsets, resumes, reports) on the real WordPiece and
    conversion path, without MiniLM's six layers of compute per run."""
    out = tmp_path_factory.mktemp("tiny_bert") / "tiny-bert"
    run_main("span-convert", "bert", "--hf-dir", tiny_bert_hf, "--out", out)
    return out


# Folders and checkpoints that several test files read: built once per worker.

@pytest.fixture(scope="session")
def qa_folder(tmp_path_factory, converted_minilm):
    """A small real QA folder (MiniLM WordPiece, windows of 96 tokens): train, the first
    3 paragraphs of SQuAD 1.1 dev's first article; valid, 4 paragraphs of the 47th."""
    import json

    root = tmp_path_factory.mktemp("qa")
    run_cli("span-preprocess", "qa-split", DATA / "squad" / "dev-v1.1.json", "--first", "46",
            "--out-first", root / "first.json", "--out-rest", root / "rest.json")
    data = json.loads((root / "first.json").read_text())
    data["data"] = data["data"][:1]
    data["data"][0]["paragraphs"] = data["data"][0]["paragraphs"][:3]
    (root / "train.json").write_text(json.dumps(data))
    rest = json.loads((root / "rest.json").read_text())
    rest["data"][0]["paragraphs"] = rest["data"][0]["paragraphs"][:4]
    rest["data"] = rest["data"][:1]
    (root / "valid.json").write_text(json.dumps(rest))
    run_main("span-preprocess", "qa", "--out", root / "bin", "--train", root / "train.json",
            "--valid", root / "valid.json", "--bpe", "wordpiece", "--wordpiece", converted_minilm,
            "--srcdict", converted_minilm / "dict.txt", "--max-positions", "96",
            "--doc-stride", "32", "--workers", "1")
    return root


@pytest.fixture(scope="session")
def qa_checkpoint(qa_folder, tmp_path_factory):
    """checkpoint_last.pt of 2 fairseq-train updates of a tiny span_qa model on
    ``qa_folder``, without validation."""
    save = tmp_path_factory.mktemp("qa_ckpt")
    run_main("fairseq-train", qa_folder / "bin", "--user-dir", USER_DIR, "--task", "span_qa",
             "--criterion", "span_qa", "--arch", "roberta_qa", *TINY_ROBERTA,
             "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--max-update", "2",
             "--save-dir", save, "--cpu", "--seed", "1", "--no-progress-bar",
             "--log-format", "simple", "--no-epoch-checkpoints", "--disable-validation",
             "--num-workers", "0")
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="session")
def pair_folders(tmp_path_factory):
    """Two span-pair folders from the same real MRPC rows aligned by the weak aligner:
    with sentence labels ("labelled"), and without ("phrasal")."""
    root = tmp_path_factory.mktemp("pairs")
    run_cli("span-preprocess", "align-pairs", "--input", GLUE / "MRPC" / "train.tsv",
            "--out", root / "all.jsonl", "--seed", "1")
    lines = (root / "all.jsonl").read_text(encoding="utf-8").splitlines()
    # Paraphrase rows come first, random partners last: take some of each.
    (root / "train.jsonl").write_text("\n".join(lines[:48] + lines[-16:]) + "\n")
    (root / "valid.jsonl").write_text("\n".join(lines[100:116] + lines[-24:-16]) + "\n")
    encoder = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
               GPT2_BPE / "vocab.bpe", "--srcdict", GPT2_BPE / "dict.txt", "--workers", "1"]
    folders = {}
    for name, labels in (("labelled", ["--label-column", "label", "--positive-label", "1"]),
                         ("phrasal", [])):
        folders[name] = root / name
        out = run_cli("span-preprocess", "pairs", "--out", folders[name], "--train",
                      root / "train.jsonl", "--valid", root / "valid.jsonl", *labels, *encoder)
        assert "phrase pairs" in out.stdout
    return folders


# Commands whose entry function a test may call in this process, as fairseq's own tests
# call train.main: the function the console script calls, on the same argv, its exit
# status and its stdout, stderr and logs in one string, as run_cli returns them. Saves the
# process start (importing fairseq is ~4 s of CPU) where the test is about the command's
# work, not its process: signals, concurrent runs, a clean interpreter and the smoke tests
# keep run_cli.
IN_PROCESS = ("fairseq-train", "fairseq-validate", "fairseq-preprocess", "fairseq-hydra-train",
              "span-predict", "span-preprocess", "span-convert", "span-export")
# what fairseq_cli's modules set up before they import fairseq (fairseq_cli/train.py)
FAIRSEQ_LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"


def fresh_fairseq_state():
    """Forget what an earlier run in this process left in fairseq's function attributes:
    the best validation figure so far (checkpoint_best.pt is saved only above it) and the
    early-stopping count; and close its tensorboard writers, which fairseq keeps for the
    process keyed by "train" and "valid" only (a second run would write into the first
    one's folder)."""
    import fairseq_cli.train
    from fairseq import checkpoint_utils
    from fairseq.logging import progress_bar

    progress_bar._close_writers()
    progress_bar._tensorboard_writers.clear()

    for function, names in ((checkpoint_utils.save_checkpoint, ("best",)),
                            (fairseq_cli.train.should_stop_early, ("best", "num_runs"))):
        for attribute in names:
            if hasattr(function, attribute):
                delattr(function, attribute)


def forget_hydra():
    """What a hydra run leaves in this process and a second one would trip over: the
    global instance (initialized once a process) and the job's config."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = None


def run_main(name, *args, cwd=None, env=None, check=True):
    """``name``'s console-script entry function called in this process with ``args``:
    a ``CompletedProcess`` like :func:`run_cli`'s (``returncode``, ``stdout`` with stderr
    and the log lines). ``env`` is set around the call: variables read at import time do
    not apply, except ``LOGLEVEL`` for fairseq's commands."""
    import contextlib
    import io
    import logging
    import traceback
    from importlib.metadata import entry_points

    assert name in IN_PROCESS, f"{name} is not run in process here; use run_cli"
    (entry,) = entry_points(group="console_scripts", name=name)
    argv = [str(a) for a in args]
    # A data loader's worker processes outlive the run in this process, and joining them
    # when collected costs seconds each (fairseq's default is one worker).
    assert name not in ("fairseq-train", "fairseq-validate") or "--num-workers" in argv, (
        f"{name} in process: give --num-workers 0")
    assert name != "fairseq-hydra-train" or any(a.startswith("dataset.num_workers=") for a in argv), (
        f"{name} in process: give dataset.num_workers=0")
    # nor may a pool fork this process (a test worker, with threads of its own)
    assert name != "span-preprocess" or "--workers" in argv and argv[argv.index("--workers") + 1] == "1", (
        f"{name} in process: give --workers 1")
    out = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], {n: logging.getLogger(n).level for n in LOGGERS_THE_COMMANDS_SET}
    for handler in saved[0]:
        root.removeHandler(handler)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        if cwd is not None:
            patch.chdir(cwd)
        patch.setattr(sys, "argv", [name, *argv])
        for logger, level in START_LEVELS.items():
            logging.getLogger(logger).setLevel(level)
        if entry.module.startswith("fairseq_cli."):
            fresh_fairseq_state()
            # a fresh process's logging, to `out`
            handler = logging.StreamHandler(out)
            handler.setFormatter(logging.Formatter(FAIRSEQ_LOG_FORMAT, "%Y-%m-%d %H:%M:%S"))
            root.addHandler(handler)
            root.setLevel(os.environ.get("LOGLEVEL", "INFO").upper())
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    code = entry.load()()
                except SystemExit as stop:
                    code = exit_status(stop)
                except Exception:  # noqa: BLE001 -- the interpreter would print it
                    traceback.print_exc()
                    code = 1
        finally:
            if entry.module.startswith("fairseq_cli."):
                fresh_fairseq_state()  # the run's event files closed: whole when read
            if name == "fairseq-hydra-train":
                forget_hydra()
            for handler in root.handlers[:]:
                root.removeHandler(handler)
                if handler not in saved[0]:
                    handler.close()  # hydra's job log file among them
            for handler in saved[0]:
                root.addHandler(handler)
            for logger, level in saved[1].items():
                logging.getLogger(logger).setLevel(level)
    proc = subprocess.CompletedProcess([name, *argv], code or 0, out.getvalue())
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} exited {proc.returncode}:\n{proc.stdout[-6000:]}")
    return proc


def fairseq_train(argv):
    """fairseq-train in this process (:func:`run_main`); its output."""
    return run_main("fairseq-train", *argv).stdout


def tiny_train_args(save):
    """fairseq-train options of the export tests' tiny runs: 2 CPU updates, no validation."""
    return ["--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--max-update", "2",
            "--save-dir", save, "--cpu", "--seed", "1", "--num-workers", "0",
            "--no-progress-bar", "--log-format", "simple", "--no-epoch-checkpoints",
            "--disable-validation"]
