"""Checkpoint copies as hard links (span_plugin.files.atomic.atomic_link): the same
bytes under both names, no name changed when the other is replaced, a copy where the
file system has no links."""

import errno
import os

import pytest

from span_plugin.files import atomic as files
from span_plugin.files.atomic import atomic_link, atomic_write, staged_folder


def test_link_shares_the_bytes_until_one_name_is_replaced(tmp_path):
    best, last = tmp_path / "checkpoint_best.pt", tmp_path / "checkpoint_last.pt"
    best.write_bytes(b"epoch 1")
    # a killed writer's temporary file: another process's name, never this one's
    stale = tmp_path / "checkpoint_last.pt.999999999.tmp"
    stale.write_bytes(b"stale, from a killed writer")
    atomic_link(best, last)
    assert last.read_bytes() == b"epoch 1" and os.stat(last).st_ino == os.stat(best).st_ino
    assert sorted(p.name for p in tmp_path.glob("*.tmp")) == [stale.name]
    # The next save replaces checkpoint_last.pt by rename: the best keeps its bytes.
    atomic_write(last, lambda f: f.write(b"epoch 2"))
    assert best.read_bytes() == b"epoch 1" and last.read_bytes() == b"epoch 2"
    # Linking over an existing name replaces it whole.
    atomic_link(best, last)
    assert last.read_bytes() == b"epoch 1"


def test_without_hard_links_it_copies(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(files.os, "link", no_links)
    src, dst = tmp_path / "a.pt", tmp_path / "b.pt"
    src.write_bytes(b"x" * 1000)
    atomic_link(src, dst)
    assert dst.read_bytes() == b"x" * 1000 and os.stat(dst).st_ino != os.stat(src).st_ino


def test_a_staged_folder_replaces_whole_or_leaves_the_old_one(tmp_path):
    """staged_folder, the one way every builder (span-preprocess, the Hugging Face and
    ONNX exports) writes a folder: committed whole when the block ends; a failure leaves
    the old folder and no partial one, and a write error that names no file names the
    folder; what a killed builder left is removed, a live one's is not."""
    out = tmp_path / "out[1]"  # glob characters in the name
    out.mkdir()
    (out / "old.txt").write_text("the old folder")
    dead = tmp_path / "out[1].partial-999999999"
    dead.mkdir()
    dead_old = tmp_path / "out[1].old-999999999"  # killed between commit_folder's renames
    dead_old.mkdir()
    live = tmp_path / f"out[1].partial-{os.getppid()}"
    live.mkdir()
    with pytest.raises(OSError, match=r"No space left") as err:
        with staged_folder(out) as tmp:
            assert tmp.parent == tmp_path and tmp.name == f"out[1].partial-{os.getpid()}"
            (tmp / "new.txt").write_text("half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert err.value.filename == str(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, live.name])
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    with staged_folder(out) as tmp:
        (tmp / "new.txt").write_text("whole")
    assert [p.name for p in out.iterdir()] == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, live.name])
