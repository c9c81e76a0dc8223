"""Quiet, informative commands: long preprocessing shows a progress bar on a terminal
and nothing of it in a log. (The recipe runs check that no stack notice reaches their
logs: tests/test_recipes.py.)"""

import fcntl
import os
import pty
import struct
import termios
import subprocess
import threading

import pytest

from conftest import BIN, DATA, GPT2_BPE, run_cli

ARGS = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
        GPT2_BPE / "vocab.bpe", "--srcdict", GPT2_BPE / "dict.txt", "--workers", "1"]
TEXT = DATA / "wikitext-2" / "wiki.valid.tokens"  # 1.1 MB: above the bar's threshold


def on_terminal(args):
    """Run a console script with its stdout and stderr on a pseudo-terminal; its output."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen([str(BIN / args[0]), *map(str, args[1:])], stdin=follower,
                            stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    chunks = []

    def read():
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command has ended
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc.wait(timeout=300)
    reader.join(timeout=10)
    os.close(leader)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.slow
def test_progress_bar_on_a_terminal_only(tmp_path):
    code, shown = on_terminal(["span-preprocess", "binarize", TEXT, tmp_path / "tty" / "valid", *ARGS])
    assert code == 0, shown
    assert "wiki.valid.tokens:" in shown and "%|" in shown and "\r" in shown, shown[-2000:]
    logged = run_cli("span-preprocess", "binarize", TEXT, tmp_path / "log" / "valid", *ARGS).stdout
    assert "%|" not in logged and "\r" not in logged
    assert logged.splitlines() == [line for line in logged.splitlines() if "lines," in line]
    # The bar changes nothing: the same files either way.
    for ext in ("bin", "idx", "spans.bin", "spans.idx"):
        assert (tmp_path / "tty" / f"valid.{ext}").read_bytes() == (tmp_path / "log" / f"valid.{ext}").read_bytes()
