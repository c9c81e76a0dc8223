"""Shared helpers for the test suite: paths to the real data and the real CLIs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DATA = SHARED / "data"
GLUE = DATA / "glue"
GPT2_BPE = DATA / "gpt2_bpe"
USER_DIR = ROOT / "span_plugin"
BIN = Path(sys.executable).parent

# A RoBERTa small enough to train a few updates on CPU in seconds.
TINY_ROBERTA = [
    "--encoder-layers", "2", "--encoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
    "--max-positions", "128",
]


def run_cli(name, *args, cwd=None, env=None, check=True):
    """Run an installed console script (fairseq-train, span-preprocess, ...) from
    this environment; on failure, raise with its output so the test log shows why."""
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.run(
        [str(BIN / name), *map(str, args)], cwd=cwd, env=full_env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} exited {proc.returncode}:\n{proc.stdout[-6000:]}")
    return proc


@pytest.fixture(scope="session")
def shared_data():
    if not DATA.is_dir():
        pytest.fail(f"{DATA} is missing: the tests read real data from ../shared/data")
    return DATA
