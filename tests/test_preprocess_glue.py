"""GLUE preparation: every task present is built and checked, row counts equal the TSV
rows, files equal fairseq's RoBERTa recipe byte for byte, bad rows fail by line or are
dropped from every file at once, and `check` catches a misaligned span file."""

import filecmp
import shutil
import subprocess
import sys

import fairseq
import pytest

from conftest import GLUE, GPT2_BPE, run_cli
from span_plugin.preprocess import EncoderSpec
from span_plugin.preprocess.folders.check import CheckError, check_folder
from span_plugin.preprocess.folders.glue import prepare_task
from span_plugin.preprocess.folders.options import FolderOptions

ENC = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
       GPT2_BPE / "vocab.bpe", "--srcdict", GPT2_BPE / "dict.txt"]
TASKS = sorted(p.name for p in GLUE.iterdir() if p.is_dir())
SPEC = EncoderSpec(encoder_json=str(GPT2_BPE / "encoder.json"),
                   vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
DICT = str(GPT2_BPE / "dict.txt")


def _prepare(task, glue, out, **kw):
    """The library call behind `span-preprocess glue` (in-process: no start-up cost)."""
    return prepare_task(task, str(glue), str(out), FolderOptions(SPEC, DICT, workers=1), **kw)


@pytest.fixture(scope="module")
def all_tasks(tmp_path_factory):
    out = tmp_path_factory.mktemp("glue")
    run_cli("span-preprocess", "glue", "--task", "ALL", "--glue-dir", GLUE, "--out", out,
            *ENC, "--workers", "2")
    return out


def _rows(tsv, header=True):
    with open(tsv, "rb") as f:
        n = sum(1 for line in f if line.strip())
    return n - header


@pytest.mark.slow
def test_every_task_present_builds_and_checks(all_tasks):
    assert TASKS and all((all_tasks / f"{t}-bin").is_dir() for t in TASKS)
    proc = run_cli("span-preprocess", "check", *[all_tasks / f"{t}-bin" for t in TASKS])
    assert proc.stdout.count(": ok\n") >= len(TASKS)
    from fairseq.data import indexed_dataset

    split_of = {"train": "train", "dev": "valid", "test": "test"}
    for t in TASKS:
        pair = (all_tasks / f"{t}-bin" / "input1").is_dir()
        for tsv in (GLUE / t).glob("*.tsv"):
            split = split_of[tsv.stem]
            rows = _rows(tsv, header=not (t == "CoLA" and split != "test"))
            for k in range(2 if pair else 1):
                ds = indexed_dataset.MMapIndexedDataset(str(all_tasks / f"{t}-bin" / f"input{k}" / split))
                assert len(ds) == rows, (t, split)
            label = all_tasks / f"{t}-bin" / "label" / split
            if split != "test":
                n = (len(indexed_dataset.MMapIndexedDataset(str(label))) if t != "STS-B"
                     else len(open(f"{label}.label").read().splitlines()))
                assert n == rows


RECIPE = r"""
set -e
cd "$WORK"
for SPLIT in train dev test; do
  tail -n +2 "$SRC/$SPLIT.tsv" > $SPLIT.tsv
  for K in 0 1; do
    if [ $SPLIT = test ]; then COL=${TEST_COLS[$K]}; else COL=${COLS[$K]}; fi
    cut -f$COL $SPLIT.tsv > $SPLIT.raw.input$K
  done
  # one call encodes both inputs (the script zips parallel files line by line)
  "$PY" "$MPBPE" --encoder-json "$BPE/encoder.json" --vocab-bpe "$BPE/vocab.bpe" \
    --inputs $SPLIT.raw.input0 $SPLIT.raw.input1 --outputs $SPLIT.input0 $SPLIT.input1 \
    --workers 2 --keep-empty
  [ $SPLIT = test ] || cut -f$LABEL $SPLIT.tsv > $SPLIT.label
done
for K in 0 1; do
  "$BIN/fairseq-preprocess" --only-source --trainpref train.input$K --validpref dev.input$K \
    --testpref test.input$K --destdir bin/input$K --workers 2 --srcdict "$BPE/dict.txt"
done
"$BIN/fairseq-preprocess" --only-source --trainpref train.label --validpref dev.label \
  --destdir bin/label --workers 2
"""


@pytest.mark.slow
def test_files_equal_fairseq_recipe(all_tasks, tmp_path):
    """The recipe's steps (preprocess_GLUE_tasks.sh with local BPE files) vs ours, on
    MRPC (pair task, BOM in the header, class labels)."""
    task = "MRPC"
    script = "COLS=(4 5); TEST_COLS=(4 5); LABEL=1\n" + RECIPE
    env = {"WORK": str(tmp_path), "SRC": str(GLUE / task), "PY": sys.executable,
           "MPBPE": fairseq.__path__[0] + "/examples/roberta/multiprocessing_bpe_encoder.py",
           "BPE": str(GPT2_BPE), "BIN": str(__import__("pathlib").Path(sys.executable).parent),
           "TASK": task, "PATH": "/usr/bin:/bin"}
    subprocess.run(["bash", "-c", script], env=env, check=True, capture_output=True)
    ours, ref = all_tasks / f"{task}-bin", tmp_path / "bin"
    names = [f"input{k}/{s}.{e}" for k in (0, 1) for s in ("train", "valid", "test")
             for e in ("bin", "idx")] + ["input0/dict.txt", "input1/dict.txt"]
    names += [f"label/{s}.{e}" for s in ("train", "valid") for e in ("bin", "idx")]
    names += ["label/dict.txt"]
    for name in names:
        assert filecmp.cmp(ours / name, ref / name, shallow=False), name


@pytest.mark.slow
def test_stsb_labels_as_recipe_awk(all_tasks, tmp_path):
    for raw, split in (("train", "train"), ("dev", "valid")):
        awk = subprocess.run(
            ["bash", "-c", f"tail -n +2 '{GLUE / 'STS-B' / raw}.tsv' | cut -f10 | "
                           "awk '{print $1 / 5.0 }'"], capture_output=True, check=True)
        ours = (all_tasks / "STS-B-bin" / "label" / f"{split}.label").read_bytes()
        assert ours == awk.stdout and len(ours.splitlines()) > 1000


def _write_tsv(path, rows, crlf=False, bom=False):
    end = "\r\n" if crlf else "\n"
    text = end.join("\t".join(r) for r in rows) + end
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())


def _mrpc_rows(n):
    with open(GLUE / "MRPC" / "train.tsv", encoding="utf-8-sig") as f:
        next(f)
        return [line.rstrip("\n").split("\t") for _, line in zip(range(n), f)]


def test_qqp_malformed_rows_dropped_everywhere_rte_fails_by_line(tmp_path):
    """QQP (made of real MRPC rows): rows with a tab in a field or a missing column are
    left out of inputs and labels together and listed; RTE stops at the first one."""
    rows = _mrpc_rows(40)
    qqp = [["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]]
    qqp += [[str(i), "1", "2", r[3], r[4], r[0]] for i, r in enumerate(rows)]
    qqp[5] = qqp[5][:3] + [qqp[5][3] + "\tstray", qqp[5][4], qqp[5][5]]  # tab in a field
    qqp[9] = qqp[9][:5]  # missing column
    glue = tmp_path / "glue"
    for split in ("train", "dev"):
        _write_tsv(glue / "QQP" / f"{split}.tsv", qqp)
    _write_tsv(glue / "QQP" / "test.tsv", [["id", "question1", "question2"]]
               + [[str(i), r[3], r[4]] for i, r in enumerate(rows)])
    out = tmp_path / "QQP-bin"
    _prepare("QQP", glue, out)
    check_folder(str(out))
    keep = [r for i, r in enumerate(rows) if i + 1 not in (5, 9)]
    assert (out / "raw" / "train.input1").read_text().splitlines() == [r[4] for r in keep]
    assert (out / "raw" / "train.label").read_text().splitlines() == [r[0] for r in keep]
    dropped = (out / "dropped_rows.tsv").read_text().splitlines()
    assert [d.split("\t")[2] for d in dropped[1:]] == ["6", "10", "6", "10"]
    assert len((out / "raw" / "test.input0").read_text().splitlines()) == 40

    rte = [["index", "sentence1", "sentence2", "label"]]
    rte += [[str(i), r[3], r[4], "entailment"] for i, r in enumerate(rows)]
    rte[7] = rte[7][:3]
    _write_tsv(glue / "RTE" / "train.tsv", rte)
    proc = run_cli("span-preprocess", "glue", "--task", "RTE", "--glue-dir", glue, "--out",
                   tmp_path / "RTE-bin", *ENC, check=False)
    assert proc.returncode == 2
    assert f"{glue / 'RTE' / 'train.tsv'}:8: 3 tab-separated fields, expected 4" in proc.stdout


def test_crlf_bom_tsv_same_as_clean_and_mnli_layout(tmp_path):
    rows = _mrpc_rows(30)
    head12 = [f"c{i}" for i in range(12)]
    head16 = [f"c{i}" for i in range(16)]
    mk = lambda r, n, lab_col: [(r[3] if j == 8 else r[4] if j == 9 else
                                 ("neutral" if r[0] == "1" else "contradiction") if j == lab_col
                                 else "x") for j in range(n)]
    glue, glue2 = tmp_path / "clean", tmp_path / "crlf"
    for g, crlf in ((glue, False), (glue2, True)):
        _write_tsv(g / "MNLI" / "train.tsv", [head12] + [mk(r, 12, 11) for r in rows], crlf, crlf)
        for s in ("dev_matched", "dev_mismatched"):
            _write_tsv(g / "MNLI" / f"{s}.tsv", [head16] + [mk(r, 16, 15) for r in rows[:10]],
                       crlf, crlf)
        for s in ("test_matched", "test_mismatched"):
            _write_tsv(g / "MNLI" / f"{s}.tsv", [head12[:10]] + [mk(r, 10, -1) for r in rows[:7]],
                       crlf, crlf)
    for g in (glue, glue2):
        _prepare("MNLI", g, g / "out")
        check_folder(str(g / "out"))
    a, b = glue / "out", glue2 / "out"
    for name in ["input0/train", "input1/valid1", "input0/test1", "label/valid1", "label/train"]:
        for ext in ("bin", "idx"):
            assert filecmp.cmp(a / f"{name}.{ext}", b / f"{name}.{ext}", shallow=False), name
    assert (a / "raw" / "valid1.label").read_text().splitlines() == \
        ["neutral" if r[0] == "1" else "contradiction" for r in rows[:10]]
    assert not (a / "label" / "test.bin").exists()
    assert (a / "input1" / "test1.spans.bin").exists()


def test_check_reports_first_bad_file_and_line(tmp_path):
    rows = _mrpc_rows(25)
    glue = tmp_path / "glue"
    _write_tsv(glue / "WNLI" / "train.tsv", [["index", "sentence1", "sentence2", "label"]]
               + [[str(i), r[3], r[4], r[0]] for i, r in enumerate(rows)])
    out = tmp_path / "WNLI-bin"
    _prepare("WNLI", glue, out)
    check_folder(str(out))
    # spans of input1 put beside input0: lengths disagree somewhere
    for ext in ("bin", "idx"):
        shutil.copy(out / "input1" / f"train.spans.{ext}", out / "input0" / f"train.spans.{ext}")
    proc = run_cli("span-preprocess", "check", out, check=False)
    assert proc.returncode == 1
    assert f"{out / 'input0' / 'train.spans.bin'}: line " in proc.stdout
    # a text file one row short
    _prepare("WNLI", glue, out)
    check_folder(str(out))
    lines = (out / "raw" / "train.input1").read_text().splitlines()
    (out / "raw" / "train.input1").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(CheckError, match="line 25 has no partner"):
        check_folder(str(out))


def test_snli_layout_drops_unlabelled_rows(tmp_path):
    rows = _mrpc_rows(20)
    glue = tmp_path / "glue"
    gold = lambda i: "-" if i in (3, 11) else ("entailment" if rows[i][0] == "1" else "neutral")
    for split, n_cols in (("train", 11), ("dev", 15), ("test", 15)):
        head = [f"c{j}" for j in range(n_cols)]
        body = [[str(i), "c", "p", "(", "(", "(", "(", r[3], r[4]] + ["x"] * (n_cols - 10)
                + [gold(i)] for i, r in enumerate(rows)]
        _write_tsv(glue / "SNLI" / f"{split}.tsv", [head] + body)
    out = tmp_path / "SNLI-bin"
    counts = _prepare("SNLI", glue, out)
    check_folder(str(out))
    assert counts == {"train": 18, "valid": 18, "test": 18}
    keep = [i for i in range(20) if i not in (3, 11)]
    for split in ("train", "test"):
        assert (out / "raw" / f"{split}.label").read_text().splitlines() == [gold(i) for i in keep]
        assert (out / "raw" / f"{split}.input0").read_text().splitlines() == \
            [rows[i][3].strip() for i in keep]
    assert (out / "label" / "test.bin").exists() and (out / "label" / "valid.bin").exists()
    dropped = (out / "dropped_rows.tsv").read_text().splitlines()[1:]
    assert [d.split("\t")[2] for d in dropped] == ["5", "13"] * 3
