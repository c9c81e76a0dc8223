"""Files in data records: their ``{"path", "sha256"}`` entries, and the check at
inference that a file is still the one a checkpoint was trained with. Tokenizers,
segmentations and :mod:`span_plugin.preprocess.records.provenance` all write and check files
with these."""

import hashlib
import os


class SettingsMismatch(ValueError):
    """A setting or file given for inference that differs from the checkpoint's."""


_HASHES = {}  # (abs path, size, mtime_ns) -> sha256


def sha256(path):
    """Hex sha256 of a file's bytes (cached per path, size and modification time)."""
    path = os.path.abspath(path)
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def file_entry(path):
    """``{"path": absolute path, "sha256": ...}`` of an existing file."""
    return {"path": os.path.abspath(path), "sha256": sha256(path)}


def short(digest):
    return digest[:12]


def recorded_file(name, given, entry, checkpoint):
    """The path to use for one recorded file (``entry``: {"path", "sha256"}): ``given``
    when it has the recorded content, else (None) the recorded path if it still has.
    ``name``: how the user gives the file (``gpt2_encoder_json``), for messages."""
    recorded = f"{entry['path']} (sha256 {short(entry['sha256'])})"
    if given is not None:
        if not os.path.isfile(given):
            raise FileNotFoundError(f"{name}={given}: no such file")
        actual = sha256(given)
        if actual != entry["sha256"]:
            raise SettingsMismatch(
                f"{name}={given} (sha256 {short(actual)}) is not the file "
                f"{checkpoint} was trained with: {recorded}")
        return str(given)
    path = entry["path"]
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{checkpoint} was trained with {recorded}, which is not here: pass "
            f"{name}=PATH of a file with that content")
    actual = sha256(path)
    if actual != entry["sha256"]:
        raise SettingsMismatch(
            f"{path} changed since {checkpoint} was trained (sha256 now "
            f"{short(actual)}, recorded {short(entry['sha256'])}): "
            f"pass {name}=PATH of a file with the recorded content")
    return path
