"""span_plugin/preprocess/binary/indexed.py and vocab.py (numpy / plain Python) against fairseq.

The preprocessing layer writes fairseq's mmap indexed datasets and encodes with
``dict.txt`` without importing torch or fairseq; these tests pin it to fairseq's own
``MMapIndexedDatasetBuilder`` / ``MMapIndexedDataset`` / ``Dictionary`` byte for byte.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fairseq.binarizer import FileBinarizer, VocabularyDatasetBinarizer
from fairseq.data import Dictionary, data_utils, indexed_dataset

ROOT = Path(__file__).resolve().parents[1]
PRE = ROOT / "span_plugin" / "preprocess" / "binary"
GPT2_DICT = ROOT.parent / "shared" / "data" / "gpt2_bpe" / "dict.txt"


def _load(name):
    """The module from its file, without running span_plugin/preprocess/__init__.py."""
    spec = importlib.util.spec_from_file_location(f"_span_{name}_under_test", PRE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


indexed = _load("indexed")
vocab_mod = _load("vocab")


def _random_items(rng, vocab_size, n=60):
    """n random 1-D token arrays in [0, vocab_size), lengths 0..40 (some empty)."""
    lengths = rng.integers(0, 41, size=n)
    if n:
        lengths[[0, n // 2, -1]] = 0
    return [rng.integers(0, vocab_size, size=k, dtype=np.int64) for k in lengths]


def _fairseq_write(prefix, items, dtype):
    b = indexed_dataset.MMapIndexedDatasetBuilder(indexed_dataset.data_file_path(prefix),
                                                  dtype=dtype)
    for a in items:
        b.add_item(torch.from_numpy(a))
    b.finalize(indexed_dataset.index_file_path(prefix))


def _ours_write(prefix, items, dtype):
    with indexed.IndexedWriter(prefix, dtype) as w:
        for a in items:
            w.add(a)


def _bytes(prefix):
    return Path(prefix + ".bin").read_bytes(), Path(prefix + ".idx").read_bytes()


@pytest.mark.parametrize("vocab_size", [
    None, 0, 1, 100, 50264, 65499, 65500, 70000, 2**31, 4294967294, 4294967295, 2**40])
def test_token_dtype_is_fairseqs(vocab_size):
    assert indexed.token_dtype(vocab_size) == np.dtype(
        indexed_dataset.best_fitting_int_dtype(vocab_size))


def test_dtype_codes_are_fairseqs():
    for code, dt in indexed_dataset._code_to_dtype.items():
        assert indexed.DTYPE_CODES[code] == np.dtype(dt)
        assert indexed._dtype_code(dt) == indexed_dataset._dtype_header_code(dt)
    assert indexed.HDR_MAGIC == indexed_dataset.MMapIndexedDataset.Index._HDR_MAGIC
    with pytest.raises(ValueError, match="float32"):
        indexed.IndexedWriter("/nonexistent/x", np.float32)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("vocab_size", [7, 50265, 65500, 70000, 4294967295])
def test_writer_bytes_equal_fairseq_and_fairseq_reads_them(tmp_path, vocab_size):
    rng = np.random.default_rng(vocab_size)
    items = _random_items(rng, vocab_size)
    dtype = indexed.token_dtype(vocab_size)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _ours_write(ours, items, dtype)
    _fairseq_write(theirs, items, indexed_dataset.best_fitting_int_dtype(vocab_size))
    assert _bytes(ours) == _bytes(theirs)
    assert sorted(os.listdir(tmp_path)) == ["ours.bin", "ours.idx", "theirs.bin", "theirs.idx"]

    ds = data_utils.load_indexed_dataset(ours, None)
    assert isinstance(ds, indexed_dataset.MMapIndexedDataset)
    assert len(ds) == len(items)
    assert ds.sizes.dtype == np.int32
    np.testing.assert_array_equal(ds.sizes, [len(a) for a in items])
    for i, a in enumerate(items):
        np.testing.assert_array_equal(ds[i].numpy(), a)


def test_writer_other_dtypes_and_edge_cases(tmp_path):
    rng = np.random.default_rng(0)
    cases = {
        "i32": (np.int32, [rng.integers(-2**31, 2**31, size=k) for k in (0, 3, 8, 0)]),
        "u8": (np.uint8, [rng.integers(0, 256, size=k) for k in (5, 0, 1)]),
        "f64": (np.float64, [rng.standard_normal(k) for k in (2, 0, 4)]),
        "i64": (np.int64, [np.array([2**62, -2**62, 0])]),
        "none": (np.uint16, []),              # no items at all
        "allempty": (np.uint16, [np.zeros(0, np.int64)] * 3),  # empty .bin
    }
    for name, (dtype, items) in cases.items():
        ours, theirs = str(tmp_path / f"o_{name}"), str(tmp_path / f"t_{name}")
        _ours_write(ours, items, dtype)
        _fairseq_write(theirs, [np.asarray(a) for a in items], dtype)
        assert _bytes(ours) == _bytes(theirs), name
        r = indexed.IndexedReader(ours)
        assert len(r) == len(items) and r.dtype == np.dtype(dtype)
        for i, a in enumerate(items):
            np.testing.assert_array_equal(r[i], a)
            assert r[i].dtype == np.dtype(dtype)


def test_reader_reads_fairseq_files(tmp_path):
    rng = np.random.default_rng(1)
    for vocab_size in (50265, 70000):
        items = _random_items(rng, vocab_size, n=200)
        prefix = str(tmp_path / f"fs{vocab_size}")
        _fairseq_write(prefix, items, indexed_dataset.best_fitting_int_dtype(vocab_size))
        assert indexed.exists(prefix) and indexed.IndexedReader.exists(prefix)
        r = indexed.IndexedReader(prefix)
        fs = indexed_dataset.MMapIndexedDataset(prefix)
        assert len(r) == len(fs) == len(items)
        assert r.sizes.dtype == np.int32
        np.testing.assert_array_equal(r.sizes, fs.sizes)
        for i, a in enumerate(items):
            assert isinstance(r[i], np.ndarray)
            np.testing.assert_array_equal(r[i], fs[i].numpy())
            np.testing.assert_array_equal(r[i], a)
        np.testing.assert_array_equal(r[-1], items[-1])
        assert [len(x) for x in r] == [len(a) for a in items]
        with pytest.raises(IndexError):
            r[len(items)]
    assert not indexed.exists(str(tmp_path / "missing"))


def test_merge_equals_fairseq_merge(tmp_path):
    rng = np.random.default_rng(2)
    shards = [_random_items(rng, 50265, n=n) for n in (30, 0, 17)]
    dt = indexed.token_dtype(50265)
    for k, items in enumerate(shards):
        _fairseq_write(str(tmp_path / f"shard{k}"), items, dt.type)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    with indexed.IndexedWriter(ours, dt) as w:
        w.add([5, 6])
        for k in range(3):
            w.merge(str(tmp_path / f"shard{k}"))
    # fairseq's builder wants the scalar type (np.uint16), not an np.dtype instance: it
    # calls dtype().itemsize
    b = indexed_dataset.MMapIndexedDatasetBuilder(theirs + ".bin", dtype=dt.type)
    b.add_item(torch.tensor([5, 6]))
    for k in range(3):
        b.merge_file_(str(tmp_path / f"shard{k}"))
    b.finalize(theirs + ".idx")
    assert _bytes(ours) == _bytes(theirs)
    with pytest.raises(ValueError, match="dtype"):
        with indexed.IndexedWriter(str(tmp_path / "bad"), np.int32) as w:
            w.merge(str(tmp_path / "shard0"))


def test_writer_is_atomic_and_checks_values(tmp_path):
    prefix = str(tmp_path / "x")
    _ours_write(prefix, [np.array([1, 2, 3])], np.uint16)
    before = _bytes(prefix)
    with pytest.raises(RuntimeError):
        with indexed.IndexedWriter(prefix, np.uint16) as w:
            w.add([9, 9])
            raise RuntimeError("crash mid-write")
    assert _bytes(prefix) == before                      # old set untouched
    assert sorted(os.listdir(tmp_path)) == ["x.bin", "x.idx"]  # no temporaries left
    w = indexed.IndexedWriter(prefix, np.uint16)
    w.add([4])
    tmp = [p for p in os.listdir(tmp_path) if p not in ("x.bin", "x.idx")]
    assert len(tmp) == 1 and tmp[0].startswith("x.bin.tmp-")
    assert _bytes(prefix) == before                      # nothing visible before finalize
    with pytest.raises(ValueError, match="out of range"):
        w.add([65536])
    with pytest.raises(ValueError, match="out of range"):
        w.add([-1])
    with pytest.raises(TypeError):
        w.add([1.5])
    with pytest.raises(ValueError, match="1-D"):
        w.add([[1, 2]])
    w.finalize()
    w.finalize()  # idempotent
    with pytest.raises(ValueError, match="finalized"):
        w.add([1])
    assert list(indexed.IndexedReader(prefix)[0]) == [4]


def test_corrupt_index_is_a_clear_error(tmp_path):
    prefix = str(tmp_path / "c")
    _ours_write(prefix, [np.array([1, 2, 3]), np.array([4])], np.uint16)
    idx = Path(prefix + ".idx")
    good = idx.read_bytes()

    def expect(data, match):
        idx.write_bytes(data)
        with pytest.raises(ValueError, match=match) as e:
            indexed.IndexedReader(prefix)
        assert str(idx) in str(e.value) or prefix + ".bin" in str(e.value)

    expect(good[:-3], "expected 50")                      # truncated pointers
    expect(good[:10], "too short")                        # truncated header
    expect(good + b"\0" * 8, "expected 50")               # trailing bytes (e.g. Megatron)
    expect(b"TNTIDX\x00\x00" + good[8:], "magic")         # the legacy 'cached' format
    expect(good[:9] + (2).to_bytes(8, "little") + good[17:], "version")
    expect(good[:17] + bytes([42]) + good[18:], "dtype code")
    bad = bytearray(good)
    bad[26 + 8 + 8:26 + 8 + 16] = (99).to_bytes(8, "little")  # second pointer
    expect(bytes(bad), "corrupt index")
    idx.write_bytes(good)
    Path(prefix + ".bin").write_bytes(b"\0" * 6)          # .bin shorter than the index says
    with pytest.raises(ValueError, match=r"c\.bin: 6 bytes, expected 8"):
        indexed.IndexedReader(prefix)
    os.remove(prefix + ".bin")
    with pytest.raises(FileNotFoundError, match=r"c\.bin"):
        indexed.IndexedReader(prefix)


def _random_line(rng, known, n_max=30):
    words = []
    for _ in range(int(rng.integers(0, n_max))):
        r = rng.random()
        if r < 0.75:
            words.append(known[int(rng.integers(0, len(known)))])
        elif r < 0.9:
            words.append(f"zz{int(rng.integers(0, 10**6))}")  # unknown
        else:
            words.append(["<unk>", "<s>", "</s>", "<pad>", "madeupword0000"][int(rng.integers(0, 5))])
    seps = [" ", "  ", "\t", " \u3000 ", "\x0b"]
    return "".join(w + seps[int(rng.integers(0, len(seps)))] for w in words) + "\n"


def _check_vocab_like_fairseq(path, rng, n_lines=300):
    v = vocab_mod.Vocab(path)
    d = Dictionary.load(str(path))
    assert len(v) == len(d)
    assert v.symbols == d.symbols
    assert v.counts == d.count
    assert v.indices == d.indices
    assert (v.bos(), v.pad(), v.eos(), v.unk()) == (d.bos(), d.pad(), d.eos(), d.unk())
    known = v.symbols
    for _ in range(n_lines):
        line = _random_line(rng, known)
        want = d.encode_line(line, append_eos=True, add_if_not_exist=False).tolist()
        assert v.encode_line(line) == want
        assert v.encode(line.split()) == want
        assert v.encode(line.split(), append_eos=False) == want[:-1]
    for sym in known[:50] + ["zz-unknown", ""]:
        assert v.index(sym) == d.index(sym)
    assert len(d) == len(v)  # fairseq's encode_line(add_if_not_exist=False) adds nothing
    return v, d


def test_vocab_matches_fairseq_on_gpt2_dict():
    v, d = _check_vocab_like_fairseq(GPT2_DICT, np.random.default_rng(3))
    assert len(v) == 50264


def test_vocab_overwrite_and_odd_lines_match_fairseq(tmp_path):
    p = tmp_path / "dict.txt"
    p.write_text(
        "hello 5\n"
        "new york 3\n"                      # a symbol with a space
        "a  2\n"                            # symbol 'a ' (split at the last space)
        "hello 7 #fairseq:overwrite\n"      # new id for 'hello'; the old one stays taken
        "<unk> 1 #fairseq:overwrite\n"      # literal <unk> gets a new id; unk id stays 3
        "x +4   \n"
        "y\tz 2 \r\n"                        # CRLF, a tab inside the symbol
        "madeupword0000 0\n",
        encoding="utf-8", newline="")
    v, d = _check_vocab_like_fairseq(p, np.random.default_rng(4), n_lines=100)
    assert v.index("hello") == 7 and v.symbols[4] == "hello"
    assert v.index("<unk>") == 8 and v.encode(["zzz"], append_eos=False) == [3]
    assert v.index("new york") == 5 and v.index("a ") == 6 and v.index("y\tz") == 10
    assert v.index("x") == 9 and v.counts[9] == 4 and len(v) == 12


@pytest.mark.parametrize("text,match", [
    ("a 1\nb 2\na 3\n", r"dict\.txt:3: duplicate symbol 'a'"),
    ("a 1\n<s> 2\n", r"dict\.txt:2: duplicate symbol '<s>'"),
    ("a 1\n\nb 2\n", r"dict\.txt:2: expected"),
    ("a 1\nb x\n", r"dict\.txt:2: expected"),
    ("a 1\nb #fairseq:overwrite\n", r"dict\.txt:2: expected"),
    ("nocount\n", r"dict\.txt:1: expected"),
])
def test_vocab_errors_where_fairseq_errors(tmp_path, text, match):
    p = tmp_path / "dict.txt"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        vocab_mod.Vocab(p)
    with pytest.raises((RuntimeError, ValueError)):
        Dictionary.load(str(p))


def test_vocab_non_utf8_is_a_clear_error(tmp_path):
    p = tmp_path / "dict.txt"
    p.write_bytes(b"a 1\n\xff\xfe 2\n")
    with pytest.raises(ValueError, match=r"dict\.txt: not valid UTF-8"):
        vocab_mod.Vocab(p)


def test_text_to_binary_equals_fairseq_binarizer(tmp_path):
    """A text file binarized as fairseq-preprocess does (its FileBinarizer with
    VocabularyDatasetBinarizer) equals Vocab.encode_line + IndexedWriter, byte for byte."""
    rng = np.random.default_rng(5)
    v = vocab_mod.Vocab(GPT2_DICT)
    text = tmp_path / "train.bpe"
    text.write_text("".join(_random_line(rng, v.symbols) for _ in range(200)) + "\n \n",
                    encoding="utf-8")
    d = Dictionary.load(str(GPT2_DICT))
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    FileBinarizer.multiprocess_dataset(str(text), "mmap", VocabularyDatasetBinarizer(d),
                                       theirs, vocab_size=len(d), num_workers=1)
    with indexed.IndexedWriter(ours, indexed.token_dtype(len(v))) as w, \
            open(text, encoding="utf-8") as f:
        for line in f:
            w.add(v.encode_line(line))
    assert _bytes(ours) == _bytes(theirs)


def test_modules_import_without_torch_or_fairseq():
    code = (
        "import importlib.util, sys\n"
        "for name in ('indexed', 'vocab'):\n"
        f"    spec = importlib.util.spec_from_file_location(name, {str(PRE)!r} + '/' + name + '.py')\n"
        "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('torch', 'fairseq'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=str(ROOT.parent))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
