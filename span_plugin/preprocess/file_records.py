"""Files in data records: their ``{"path", "sha256"}`` entries, and the check at
inference that a file is still the one a checkpoint was trained with. Tokenizers,
segmentations and :mod:`span_plugin.preprocess.records.provenance` all write and check files
with these."""

import hashlib
import os
import stat

from span_plugin.formats.lines import regular_file


class SettingsMismatch(ValueError):
    """A setting or file given for inference that differs from the checkpoint's."""


_HASHES = {}  # (abs path, size, mtime_ns) -> sha256


def sha256(path):
    """Hex sha256 of a file's bytes (cached per path, size and modification time)."""
    path = os.path.abspath(path)
    st = regular_file(path)
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


# No tokenizer file or n-gram dictionary comes near this: a recorded name that holds more
# is another file (a checkpoint, a corpus, a sparse file) and is not hashed.
MAX_RECORDED_BYTES = 1 << 30


def check_plausible(name, path):
    """Raise a ValueError naming ``name=path`` when it is not a regular file (a device,
    a FIFO: reading would not end) or holds more than :data:`MAX_RECORDED_BYTES`."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{name}={path}: not a regular file; expected the tokenizer or "
                         f"n-gram file the record names")
    if st.st_size > MAX_RECORDED_BYTES:
        raise ValueError(f"{name}={path}: {st.st_size:,} bytes, more than any tokenizer or "
                         f"n-gram file ({MAX_RECORDED_BYTES:,}): not the file the record names")


def recorded_file(name, given, entry, checkpoint):
    """The path to use for one recorded file (``entry``: {"path", "sha256"}): ``given``
    when it has the recorded content, else (None) the recorded path if it still has.
    ``name``: how the user gives the file (``gpt2_encoder_json``), for messages."""
    recorded = f"{entry['path']} (sha256 {short(entry['sha256'])})"
    if given is not None:
        if not os.path.exists(given):
            raise FileNotFoundError(f"{name}={given}: no such file")
        check_plausible(name, given)
        actual = sha256(given)
        if actual != entry["sha256"]:
            raise SettingsMismatch(
                f"{name}={given} (sha256 {short(actual)}) is not the file "
                f"{checkpoint} was trained with: {recorded}")
        return str(given)
    path = entry["path"]
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{checkpoint} was trained with {recorded}, which is not here: pass "
            f"{name}=PATH of a file with that content")
    check_plausible(name, path)
    actual = sha256(path)
    if actual != entry["sha256"]:
        raise SettingsMismatch(
            f"{path} changed since {checkpoint} was trained (sha256 now "
            f"{short(actual)}, recorded {short(entry['sha256'])}): "
            f"pass {name}=PATH of a file with the recorded content")
    return path
