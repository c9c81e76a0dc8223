"""formats/model_folder.py: an exported model folder is trusted only when files.json and
the files agree; every refusal is one line naming the file."""

import json
import os

import pytest

from span_plugin.formats.model_folder import (
    MANIFEST, ModelFolderError, file_sha256, verify_folder, write_manifest)


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "roberta",
                                               "span_plugin": {"format": 1}}))
    (d / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    (d / "vocab.json").write_text('{"<s>": 0}')
    write_manifest(d)
    return d


def _refused(folder, name):
    with pytest.raises(ModelFolderError) as err:
        verify_folder(folder)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(str(folder / name) + ":"), message
    return message


def test_whole_folder_verifies_and_returns_config(folder):
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["format"] == 1
    assert sorted(manifest["files"]) == ["config.json", "model.safetensors", "vocab.json"]
    assert manifest["files"]["vocab.json"] == file_sha256(folder / "vocab.json")
    assert verify_folder(folder) == {"model_type": "roberta", "span_plugin": {"format": 1}}


def test_missing_file(folder):
    os.remove(folder / "vocab.json")
    assert "missing" in _refused(folder, "vocab.json")


def test_changed_byte(folder):
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[517] ^= 1
    (folder / "model.safetensors").write_bytes(bytes(data))
    assert "changed since export" in _refused(folder, "model.safetensors")


def test_unlisted_extra_file(folder):
    (folder / "notes.txt").write_text("hello")
    assert "not listed" in _refused(folder, "notes.txt")


def test_pickle_file_listed_or_not(folder):
    (folder / "head.pt").write_bytes(b"\x80\x02}q\x00.")
    assert "pickle" in _refused(folder, "head.pt")
    with pytest.raises(ModelFolderError, match="head.pt: a pickle"):
        write_manifest(folder)


def test_missing_manifest(folder):
    os.remove(folder / MANIFEST)
    assert "missing" in _refused(folder, MANIFEST)


def test_manifest_naming_outside_file(folder):
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"]["../secret"] = "0" * 64
    (folder / MANIFEST).write_text(json.dumps(manifest))
    assert "not a file name inside" in _refused(folder, MANIFEST)


def test_link_refused(folder, tmp_path):
    (tmp_path / "outside.txt").write_text("x")
    os.symlink(tmp_path / "outside.txt", folder / "merges.txt")
    assert "a link" in _refused(folder, "merges.txt")
