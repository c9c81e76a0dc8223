"""The integrity rules of an exported model folder (``span-export hf`` of a fine-tuned
checkpoint; docs/EXPORT.md): ``files.json`` lists the sha256 of every other file in the
folder, and a reader trusts the folder only when the listing and the files agree.

``files.json``: ``{"format": 1, "files": {"<name>": "<sha256>", ...}}``, names relative
to the folder with ``/`` separators. The writer calls :func:`write_manifest` last; the
reader calls :func:`verify_folder` first, before it opens any other file. A folder is
refused, in one line naming the file, when the listing is missing or unreadable, a listed
file is missing or has other bytes, a file is not listed, a file is a link (it could
read something outside the folder), or a file has a pickle's suffix (a pickle runs code
when loaded: weights go in safetensors).
"""

import hashlib
import json
import os

MANIFEST = "files.json"
FORMAT = 1
CONFIG = "config.json"
PICKLE_SUFFIXES = (".pt", ".bin", ".pkl", ".pickle", ".pth", ".ckpt")


class ModelFolderError(ValueError):
    """A model folder that is not whole, or holds what a reader must not load."""


def file_sha256(path) -> str:
    """Hex sha256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _entries(folder):
    """Every entry below ``folder`` but the manifest, as (relative name, path), sorted;
    directories are walked, not listed."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in dirs + files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            if rel == MANIFEST or (name in dirs and not os.path.islink(path)):
                continue
            found.append((rel, path))
    return sorted(found)


def _refuse_unsafe(folder, rel, path):
    if os.path.islink(path):
        raise ModelFolderError(f"{path}: a link in a model folder (every file must be in "
                               f"{folder} itself)")
    if rel.lower().endswith(PICKLE_SUFFIXES):
        raise ModelFolderError(f"{path}: a pickle file in a model folder (suffixes "
                               f"{', '.join(PICKLE_SUFFIXES)} are refused; weights go in "
                               f"model.safetensors)")


def write_manifest(folder) -> None:
    """Write ``folder/files.json`` listing the sha256 of every other file in ``folder``
    (refusing links and pickle files, as :func:`verify_folder` would)."""
    folder = os.fspath(folder)
    files = {}
    for rel, path in _entries(folder):
        _refuse_unsafe(folder, rel, path)
        files[rel] = file_sha256(path)
    text = json.dumps({"format": FORMAT, "files": files}, indent=2, sort_keys=True) + "\n"
    with open(os.path.join(folder, MANIFEST), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _read_manifest(folder):
    path = os.path.join(folder, MANIFEST)
    if not os.path.isdir(folder):
        raise ModelFolderError(f"{folder}: not a folder (expected an exported model folder)")
    if not os.path.isfile(path):
        raise ModelFolderError(f"{path}: missing (an exported model folder lists its files' "
                               f"sha256 there; export it again with span-export hf)")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelFolderError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ModelFolderError(f"{path}: format {got!r}, expected {FORMAT}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ModelFolderError(f"{path}: 'files' must map file names to sha256 strings")
    for rel in files:
        parts = rel.split("/")
        if rel.startswith("/") or ".." in parts or "" in parts or rel == MANIFEST:
            raise ModelFolderError(f"{path}: entry {rel!r} is not a file name inside the folder")
    return files


def verify_folder(folder) -> dict:
    """Check ``folder`` against its ``files.json`` (see the module's rules) and return
    ``config.json``'s dict. Raises :class:`ModelFolderError` naming the first bad file."""
    folder = os.fspath(folder)
    listed = _read_manifest(folder)
    present = dict(_entries(folder))
    for rel, path in present.items():
        _refuse_unsafe(folder, rel, path)
    for rel, digest in sorted(listed.items()):
        path = os.path.join(folder, *rel.split("/"))
        if rel not in present:
            raise ModelFolderError(f"{path}: missing (listed in {MANIFEST})")
        actual = file_sha256(path)
        if actual != digest:
            raise ModelFolderError(f"{path}: changed since export (sha256 {actual[:12]}, "
                                   f"{MANIFEST} lists {digest[:12]})")
    for rel, path in present.items():
        if rel not in listed:
            raise ModelFolderError(f"{path}: not listed in {MANIFEST} (a model folder holds "
                                   f"only the files it was exported with)")
    config = os.path.join(folder, CONFIG)
    if CONFIG not in listed:
        raise ModelFolderError(f"{config}: missing (not listed in {MANIFEST})")
    try:
        with open(config, encoding="utf-8") as f:
            data = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelFolderError(f"{config}: not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise ModelFolderError(f"{config}: expected a JSON object, got {type(data).__name__}")
    return data
