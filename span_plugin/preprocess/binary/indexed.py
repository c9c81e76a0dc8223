"""fairseq's "mmap" indexed dataset files (``PREFIX.bin`` values, ``PREFIX.idx`` sizes and
pointers), written (:class:`IndexedWriter`) and read (:class:`IndexedReader`) with numpy
alone, byte for byte as ``fairseq.data.indexed_dataset.MMapIndexedDataset`` writes them
(tests/test_indexed_format.py). Imports neither torch nor fairseq, not even lazily. The
byte layout: docs/DATA.md, section "Module notes"."""

import os
import shutil
import struct

import numpy as np

__all__ = [
    "DTYPE_CODES", "HDR_MAGIC", "IndexedReader", "IndexedWriter", "data_file_path",
    "exists", "index_file_path", "token_dtype",
]

HDR_MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
_HEADER = struct.Struct("<9sQBQ")  # magic, version, dtype code, N: 26 bytes

# fairseq's ``_code_to_dtype``. Codes 6 and 7 are both float64 (np.double is np.float64);
# fairseq writes 6 for it. There is no float32 / float16 code.
DTYPE_CODES = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float64),
    8: np.dtype(np.uint16),
    9: np.dtype(np.uint32),
    10: np.dtype(np.uint64),
}


def _dtype_code(dtype) -> int:
    """The header code fairseq writes for ``dtype`` (the first match, as fairseq)."""
    dt = np.dtype(dtype)
    for code, known in DTYPE_CODES.items():
        if known == dt:
            return code
    raise ValueError(
        f"dtype {dt} has no code in fairseq's mmap format; use one of "
        f"{sorted({str(d) for d in DTYPE_CODES.values()})}")


def index_file_path(prefix: str) -> str:
    return prefix + ".idx"


def data_file_path(prefix: str) -> str:
    return prefix + ".bin"


def exists(prefix: str) -> bool:
    """True when both ``prefix.idx`` and ``prefix.bin`` exist (fairseq's test)."""
    return os.path.exists(index_file_path(prefix)) and os.path.exists(data_file_path(prefix))


def token_dtype(vocab_size) -> np.dtype:
    """The token dtype fairseq-preprocess picks for a dictionary of ``vocab_size``
    symbols (``best_fitting_int_dtype(len(dict))``): uint16 below 65500, uint32 below
    2**32 - 1, else int64; uint32 when ``vocab_size`` is None."""
    if vocab_size is None:
        return np.dtype(np.uint32)
    if vocab_size < 65500:
        return np.dtype(np.uint16)
    if vocab_size < 4294967295:
        return np.dtype(np.uint32)
    return np.dtype(np.int64)


class IndexedWriter:
    """Writes one file set ``prefix.{bin,idx}``, item by item, in order.

    ``dtype``: the element dtype of every item (a dtype with a fairseq code, see
    DTYPE_CODES; for tokens use :func:`token_dtype`).

    Data goes to temporary files beside the targets; :meth:`finalize` renames them into
    place (``.bin`` first, then ``.idx``; an old ``.idx`` is removed before), so a crash
    never leaves a half-written file set under the final names. As a context manager it
    finalizes on a clean exit and discards everything on an exception::

        with IndexedWriter("out/train", token_dtype(len(vocab))) as w:
            w.add(ids)
    """

    def __init__(self, prefix: str, dtype):
        self.prefix = str(prefix)
        self.dtype = np.dtype(dtype)
        self._code = _dtype_code(self.dtype)
        self._bin_path = data_file_path(self.prefix)
        self._idx_path = index_file_path(self.prefix)
        tag = f".tmp-{os.getpid()}-{id(self):x}"
        self._bin_tmp = self._bin_path + tag
        self._idx_tmp = self._idx_path + tag
        self._sizes = []
        self._closed = False
        self._data = open(self._bin_tmp, "wb")

    def __len__(self):
        """Items added so far."""
        return len(self._sizes)

    def add(self, item):
        """Append one item: a 1-D array-like ``[n]`` (n may be 0) of values that fit
        ``dtype`` exactly (integers for an integer dtype; out-of-range values are a
        ValueError where fairseq would silently wrap them)."""
        self._check_open()
        arr = np.asarray(item)
        if arr.ndim != 1:
            raise ValueError(f"{self._bin_path}: an item must be 1-D, got shape {arr.shape}")
        if arr.size and self.dtype.kind in "iu":
            if arr.dtype.kind not in "iub":
                raise TypeError(f"{self._bin_path}: integer dtype {self.dtype} takes integer "
                                f"items, got {arr.dtype}")
            if arr.dtype != self.dtype:
                info = np.iinfo(self.dtype)
                lo, hi = arr.min(), arr.max()
                if lo < info.min or hi > info.max:
                    raise ValueError(
                        f"{self._bin_path}: value out of range for {self.dtype} "
                        f"[{info.min}, {info.max}]: min {lo}, max {hi}")
        if arr.size > np.iinfo(np.int32).max:
            raise ValueError(f"{self._bin_path}: an item of {arr.size} elements does not "
                             f"fit the int32 size field")
        self._data.write(np.ascontiguousarray(arr, dtype=self.dtype).tobytes(order="C"))
        self._sizes.append(int(arr.size))

    def merge(self, prefix: str):
        """Append every item of a finished file set ``prefix`` (a worker's shard), as
        fairseq's ``merge_file_``; its dtype must equal this writer's."""
        self._check_open()
        other = IndexedReader(prefix)
        if other.dtype != self.dtype:
            raise ValueError(f"{index_file_path(prefix)}: dtype {other.dtype}, "
                             f"expected {self.dtype} to merge into {self.prefix}")
        self._sizes.extend(int(s) for s in other.sizes)
        del other
        with open(data_file_path(prefix), "rb") as f:
            shutil.copyfileobj(f, self._data)

    def finalize(self):
        """Write ``prefix.idx`` and move both files into place. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._data.flush()
            os.fsync(self._data.fileno())
            self._data.close()
            sizes = np.asarray(self._sizes, dtype=np.int32)
            pointers = np.zeros(len(sizes), dtype=np.int64)
            if len(sizes) > 1:
                np.cumsum(sizes[:-1], dtype=np.int64, out=pointers[1:])
            pointers *= self.dtype.itemsize
            with open(self._idx_tmp, "wb") as f:
                f.write(_HEADER.pack(HDR_MAGIC, VERSION, self._code, len(sizes)))
                f.write(sizes.tobytes(order="C"))
                f.write(pointers.tobytes(order="C"))
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            self._remove_tmp()
            raise
        if os.path.exists(self._idx_path):
            os.remove(self._idx_path)  # a crash from here on leaves no stale pair
        os.replace(self._bin_tmp, self._bin_path)
        os.replace(self._idx_tmp, self._idx_path)

    def abort(self):
        """Discard what was written; the final names are left untouched."""
        if self._closed:
            return
        self._closed = True
        self._data.close()
        self._remove_tmp()

    def _remove_tmp(self):
        for p in (self._bin_tmp, self._idx_tmp):
            try:
                os.remove(p)
            except FileNotFoundError:
                pass

    def _check_open(self):
        if self._closed:
            raise ValueError(f"{self.prefix}: writer already finalized or aborted")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finalize()
        else:
            self.abort()


class IndexedReader:
    """Reads a file set ``prefix.{bin,idx}`` written by fairseq or :class:`IndexedWriter`.

    ``len(r)``: N items; ``r.sizes``: int32 ``[N]``; ``r.pointers``: int64 ``[N]`` byte
    offsets; ``r.dtype``; ``r[i]``: a read-only 1-D ``[sizes[i]]`` array in ``dtype``,
    memory-mapped, no copy (fairseq's ``MMapIndexedDataset`` returns it upcast to an
    int64 tensor instead).

    The index is checked on open: magic, version, dtype code, exact file length, and
    pointers contiguous from 0 to the ``.bin`` length. A foreign, truncated or corrupt
    file is a ValueError that names the file and what was expected.
    """

    exists = staticmethod(exists)

    def __init__(self, prefix: str):
        self.prefix = str(prefix)
        idx_path, bin_path = index_file_path(self.prefix), data_file_path(self.prefix)
        for p in (idx_path, bin_path):
            if not os.path.exists(p):
                raise FileNotFoundError(f"{p}: not found (expected the fairseq mmap indexed "
                                        f"dataset {self.prefix}.{{bin,idx}})")
        idx_len = os.path.getsize(idx_path)
        with open(idx_path, "rb") as f:
            head = f.read(_HEADER.size)
        if len(head) < _HEADER.size:
            raise ValueError(f"{idx_path}: {idx_len} bytes, too short for a fairseq mmap index "
                             f"header ({_HEADER.size} bytes, magic {HDR_MAGIC!r})")
        magic, version, code, n = _HEADER.unpack(head)
        if magic != HDR_MAGIC:
            raise ValueError(f"{idx_path}: not a fairseq mmap index: magic {magic!r}, "
                             f"expected {HDR_MAGIC!r} (made with another --dataset-impl?)")
        if version != VERSION:
            raise ValueError(f"{idx_path}: index version {version}, expected {VERSION}")
        if code not in DTYPE_CODES:
            raise ValueError(f"{idx_path}: unknown dtype code {code}, expected one of "
                             f"{sorted(DTYPE_CODES)}")
        self.dtype = DTYPE_CODES[code]
        want = _HEADER.size + 12 * n
        if idx_len != want:
            raise ValueError(f"{idx_path}: {idx_len} bytes, expected {want} for {n} items "
                             f"(header {_HEADER.size} + 4*N sizes + 8*N pointers); "
                             f"truncated or not fairseq's format")
        if n:
            buf = np.memmap(idx_path, dtype=np.uint8, mode="r")
            self.sizes = np.frombuffer(buf, dtype=np.int32, count=n, offset=_HEADER.size)
            self.pointers = np.frombuffer(buf, dtype=np.int64, count=n,
                                          offset=_HEADER.size + 4 * n)
        else:
            self.sizes = np.zeros(0, dtype=np.int32)
            self.pointers = np.zeros(0, dtype=np.int64)

        bin_len = os.path.getsize(bin_path)
        nbytes = self.sizes.astype(np.int64) * self.dtype.itemsize
        if n and (self.sizes.min() < 0 or self.pointers[0] != 0
                  or (n > 1 and not np.array_equal(np.diff(self.pointers), nbytes[:-1]))):
            raise ValueError(f"{idx_path}: corrupt index: sizes must be >= 0 and pointers "
                             f"the running byte offsets from 0")
        total = int(nbytes.sum())
        if bin_len != total:
            raise ValueError(f"{bin_path}: {bin_len} bytes, expected {total} "
                             f"({int(self.sizes.sum())} x {self.dtype}) from {idx_path}")
        if total:
            self._data = np.memmap(bin_path, dtype=self.dtype, mode="r")
        else:  # mmap of an empty file is an error
            self._data = np.zeros(0, dtype=self.dtype)
        self._starts = self.pointers // self.dtype.itemsize if n else self.pointers

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i) -> np.ndarray:
        n = len(self.sizes)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{self.prefix}: item {i} out of range for {n} items")
        start = int(self._starts[i])
        return self._data[start:start + int(self.sizes[i])]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        return f"IndexedReader({self.prefix!r}, n={len(self)}, dtype={self.dtype})"
