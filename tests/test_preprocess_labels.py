"""Label files written without fairseq (span_plugin.preprocess.binary.labels) are byte for byte
what fairseq-preprocess --only-source writes from the same label files."""

import pytest

from conftest import run_main
from span_plugin.preprocess.binary.labels import binarize_labels, write_label_dict
from span_plugin.preprocess.binary.vocab import Vocab

# Ties (b/a, x/y), code-point order (Z before a, é after z), a label fairseq treats as a
# special symbol (<unk>), an unknown label in valid, an empty line and a CR line end.
TRAIN = ["b", "a", "entailment", "a", "b", "Z", "é", "<unk>", "y", "x", "a", "", "z\r", "q"]
VALID = ["a", "unseen", "b", "x", "é"]


def _write(path, lines):
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    return path


def _fairseq_preprocess(tmp_path, train, valid, dest, srcdict=None):
    argv = ["--only-source", "--destdir", dest, "--workers", "1", "--validpref", valid]
    argv += ["--srcdict", srcdict] if srcdict else ["--trainpref", train]
    run_main("fairseq-preprocess", *argv)


@pytest.mark.parametrize("train", [TRAIN, ["1", "0", "0"], [f"c{i}" for i in range(13)]])
def test_label_files_identical_to_fairseq_preprocess(tmp_path, train):
    src = tmp_path / "src"
    src.mkdir()
    tr, va = _write(src / "train.label", train), _write(src / "valid.label", VALID)
    ref, ours = tmp_path / "ref", tmp_path / "ours"
    _fairseq_preprocess(tmp_path, tr, va, ref)
    vocab = Vocab(write_label_dict([tr], ours / "dict.txt"))
    assert binarize_labels(tr, ours / "train", vocab) == len(train)
    binarize_labels(va, ours / "valid", vocab)
    for name in ("dict.txt", "train.bin", "train.idx", "valid.bin", "valid.idx"):
        assert (ours / name).read_bytes() == (ref / name).read_bytes(), name


def test_label_dict_from_several_files_as_fairseq_builds_it(tmp_path):
    """No train split: the dictionary of all labelled splits, as fairseq's
    build_dictionary makes it (then passed to fairseq-preprocess as --srcdict)."""
    from fairseq.tasks.fairseq_task import LegacyFairseqTask

    files = [_write(tmp_path / "valid.label", VALID), _write(tmp_path / "test.label", TRAIN)]
    d = LegacyFairseqTask.build_dictionary([str(f) for f in files], workers=1, threshold=-1,
                                           nwords=-1, padding_factor=8)
    d.save(str(tmp_path / "ref.txt"))
    write_label_dict(files, tmp_path / "ours.txt")
    assert (tmp_path / "ours.txt").read_bytes() == (tmp_path / "ref.txt").read_bytes()
    ref = tmp_path / "ref"
    _fairseq_preprocess(tmp_path, None, files[0], ref, srcdict=tmp_path / "ref.txt")
    binarize_labels(files[0], tmp_path / "valid", Vocab(tmp_path / "ours.txt"))
    for ext in ("bin", "idx"):
        assert (tmp_path / f"valid.{ext}").read_bytes() == (ref / f"valid.{ext}").read_bytes()
    assert (ref / "dict.txt").read_bytes() == (tmp_path / "ours.txt").read_bytes()
