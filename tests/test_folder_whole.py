"""A folder is whole or absent: every builder (glue, table, pairs,
conll, qa, binarize) writes into a temporary folder and renames it into place at the
end, so a failure leaves no half folder (and an earlier folder intact); `check`
validates every folder kind, compares the raw text with the binaries and refuses a
folder without its record. Inputs are real rows of ../shared/data."""

import json
import os
import shutil

import pytest

from conftest import DATA, GLUE, run_cli
from span_plugin.files.errors import BadInputError
from span_plugin.preprocess.records import provenance
from span_plugin.preprocess.binary.binarize import binarize_whole
from span_plugin.preprocess.folders.check import CheckError, check_folder
from span_plugin.preprocess.folders.conll import prepare_conll
from span_plugin.files.atomic import PARTIAL
from span_plugin.preprocess.folders.folder import whole_folder
from span_plugin.preprocess.folders.glue import prepare_task
from span_plugin.preprocess.folders.options import FolderOptions
from span_plugin.preprocess.folders.pairs import prepare_pairs
from span_plugin.preprocess.folders.qa import QASettings, prepare_qa
from span_plugin.preprocess.folders.table import prepare_table
from test_conll_messy import DICT, ENC, SPEC  # GPT-2 BPE, no segmentation: fast folders


def head(path, n, encoding="utf-8"):
    with open(path, encoding=encoding) as f:
        return [next(f) for _ in range(n)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Small real inputs of every builder: WNLI TSVs, MRPC rows as JSON Lines tables and
    phrase pairs, CoNLL-2003 lines, SQuAD v1.1 questions."""
    root = tmp_path_factory.mktemp("whole_inputs")
    (root / "glue" / "WNLI").mkdir(parents=True)
    for split, n in (("train", 30), ("dev", 12), ("test", 10)):
        (root / "glue" / "WNLI" / f"{split}.tsv").write_text("".join(head(GLUE / "WNLI" / f"{split}.tsv", n)))
    mrpc = [line.rstrip("\n").split("\t") for line in head(GLUE / "MRPC" / "train.tsv", 41, "utf-8-sig")[1:]]
    for split, rows in (("train", mrpc[:30]), ("valid", mrpc[30:])):
        (root / f"{split}.jsonl").write_text("".join(
            json.dumps({"sentence1": r[3], "sentence2": r[4], "label": r[0],
                        "phrases": [{"source": [0, len(r[3].split()[0])],
                                     "target": [0, len(r[4].split()[0])],
                                     "label": "paraphrase"}]}) + "\n" for r in rows))
    for split, n in (("train", 200), ("valid", 200)):
        (root / f"{split}.conll").write_text("".join(head(DATA / "conll2003" / f"{split}.txt", n)))
    squad = json.loads((DATA / "squad" / "dev-v1.1.json").read_text())
    article = squad["data"][0]
    for split, paragraphs in (("train", article["paragraphs"][:2]),
                              ("valid", article["paragraphs"][2:3])):
        (root / f"{split}.squad.json").write_text(json.dumps(
            {"version": "1.1", "data": [dict(article, paragraphs=paragraphs)]}))
    # valid with a question too long for a window: prepare_qa fails on it, after train
    bad = json.loads((root / "valid.squad.json").read_text())
    bad["data"][0]["paragraphs"][0]["qas"][0]["question"] = " ".join(["word"] * 400) + "?"
    (root / "bad.squad.json").write_text(json.dumps(bad))
    return root


def build(kind, inputs, out, **kw):
    """One builder, in-process (no start-up cost)."""
    options = FolderOptions(SPEC, DICT)
    if kind == "glue":
        return prepare_task("WNLI", str(inputs / "glue"), str(out), options, **kw)
    if kind == "table":
        return prepare_table(str(out), {s: str(inputs / f"{s}.jsonl") for s in ("train", "valid")},
                             ["sentence1", "sentence2"], "label", options, **kw)
    if kind == "pairs":
        return prepare_pairs(str(out), {s: str(inputs / f"{s}.jsonl") for s in ("train", "valid")},
                             options, label_column="label", **kw)
    if kind == "conll":
        return prepare_conll(str(out), {s: str(inputs / f"{s}.conll") for s in ("train", "valid")},
                             options, **kw)
    if kind == "qa":
        valid = kw.pop("valid", "valid")
        return prepare_qa(str(out), {"train": str(inputs / "train.squad.json"),
                                     "valid": str(inputs / f"{valid}.squad.json")}, options,
                          QASettings(max_positions=128, doc_stride=32, **kw))
    raise ValueError(kind)


KINDS = ("glue", "table", "pairs", "conll", "qa")


def leftovers(out):
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(out.name + "."))


@pytest.mark.parametrize("kind", KINDS)
def test_every_builder_writes_a_folder_that_check_passes(kind, inputs, tmp_path):
    """check validates every kind (a QA folder gave KeyError: 'names')."""
    out = tmp_path / f"{kind}-bin"
    build(kind, inputs, out)
    report = check_folder(str(out))
    assert any(line.startswith("record: made by span_plugin") for line in report)
    assert leftovers(out) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_failure_at_the_end_leaves_no_folder_and_the_old_one_intact(kind, inputs, tmp_path,
                                                                     monkeypatch):
    out = tmp_path / f"{kind}-bin"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as a killed run: after every file but the record

    monkeypatch.setattr(provenance, "write_record", killed)
    with pytest.raises(KeyboardInterrupt):
        build(kind, inputs, out)
    assert not out.exists() and leftovers(out) == []
    monkeypatch.undo()
    build(kind, inputs, out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    monkeypatch.setattr(provenance, "write_record", killed)
    with pytest.raises(KeyboardInterrupt):
        build(kind, inputs, out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert leftovers(out) == []


def test_qa_failing_on_the_valid_file_leaves_no_folder(inputs, tmp_path):
    """The issue's case: a train-only folder without dict.txt or record, which check
    passed and fairseq-train then failed on."""
    out = tmp_path / "qa-bin"
    with pytest.raises(BadInputError, match="bad.squad.json"):
        build("qa", inputs, out, valid="bad", on_bad="error")
    assert not out.exists() and leftovers(out) == []


def test_a_rebuild_replaces_the_folder_whole(inputs, tmp_path):
    out = tmp_path / "t"
    build("table", inputs, out)
    (out / "input0" / "stale.bin").write_bytes(b"x")  # a file of an earlier layout
    build("table", inputs, out)
    assert not (out / "input0" / "stale.bin").exists()
    check_folder(str(out))
    assert json.loads((out / "provenance.json").read_text())["task"] == "t"  # not the temp name


def test_a_folder_span_preprocess_did_not_make_is_refused_untouched(inputs, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my own file")
    with pytest.raises(BadInputError, match=rf"{out}: exists and is not a folder "
                       r"span-preprocess made"):
        build("conll", inputs, out)
    assert sorted(os.listdir(out)) == ["notes.txt"] and leftovers(out) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    build("conll", inputs, empty)  # an empty folder is taken
    check_folder(str(empty))


def test_a_killed_builds_partial_folder_is_removed(tmp_path):
    out = tmp_path / "x"
    dead = tmp_path / f"x{PARTIAL}999999999"  # no such process
    (dead / "input0").mkdir(parents=True)
    with whole_folder(out) as tmp:
        (open(os.path.join(tmp, "provenance.json"), "w")).close()
    assert out.is_dir() and not dead.exists()


def test_binarize_writes_all_its_files_or_none(tmp_path):
    text = tmp_path / "in.txt"
    lines = [line.split("\t")[3] for line in head(GLUE / "MRPC" / "train.tsv", 30, "utf-8-sig")[1:]]
    text.write_bytes(("\n".join(lines) + "\n").encode() + b"bad \xff byte\n")
    out = tmp_path / "data" / "train"
    with pytest.raises(BadInputError, match=rf"{text}:30: invalid UTF-8"):
        binarize_whole(text, out, SPEC, DICT)
    assert sorted(os.listdir(out.parent)) == []  # no tokens, spans or dict.txt; no temp folder
    s = binarize_whole(text, out, SPEC, DICT, bad_utf8="replace")
    assert s.lines == 30
    assert sorted(os.listdir(out.parent)) == ["dict.txt", "train.bin", "train.idx",
                                              "train.spans.bin", "train.spans.idx"]


# ---------------------------------------------------------------------------------
# check


@pytest.fixture(scope="module")
def folders(inputs, tmp_path_factory):
    root = tmp_path_factory.mktemp("whole_folders")
    for kind in KINDS:
        build(kind, inputs, root / kind)
    return root


def copy(folders, kind, tmp_path):
    dst = tmp_path / kind
    shutil.copytree(folders / kind, dst)
    return dst


def cut(path, n):
    lines = path.read_text(encoding="utf-8").splitlines(True)
    path.write_text("".join(lines[:n]), encoding="utf-8")


def test_check_refuses_a_folder_without_its_record(folders, tmp_path):
    out = copy(folders, "glue", tmp_path)
    (out / "provenance.json").unlink()
    with pytest.raises(CheckError, match=rf"{out}: no provenance.json: a build that did not "
                       r"finish"):
        check_folder(str(out))


@pytest.mark.parametrize("kind, raw", [("conll", "valid.source"), ("conll", "valid.label"),
                                       ("glue", "train.label"), ("table", "valid.input1"),
                                       ("pairs", "train.input0")])
def test_check_compares_the_raw_text_with_the_binaries(folders, tmp_path, kind, raw):
    """raw/ is not hashed by the record: a CoNLL raw/valid.source cut to 5 lines passed,
    and span-predict then wrote 5 items' worth of lines."""
    out = copy(folders, kind, tmp_path)
    cut(out / "raw" / raw, 5)
    with pytest.raises(CheckError, match=rf"{out / 'raw' / raw}: 5 items but .* has \d+; "
                       r"line 6 has no partner"):
        check_folder(str(out))


def test_check_of_a_qa_folder_compares_questions_and_windows(folders, tmp_path):
    out = copy(folders, "qa", tmp_path)
    report = check_folder(str(out))
    assert any("windows of" in line for line in report)
    assert any("extractive QA" in line for line in report)
    cut(out / "raw" / "train.jsonl", 3)
    with pytest.raises(CheckError, match=r"train.jsonl: 3 questions, but provenance.json records"):
        check_folder(str(out))


def test_check_compares_the_records_rows(folders, tmp_path):
    out = copy(folders, "table", tmp_path)
    record = json.loads((out / "provenance.json").read_text())
    record["rows"]["valid"] += 1
    (out / "provenance.json").write_text(json.dumps(record))
    with pytest.raises(CheckError, match=r"10 items, but provenance.json records 11 rows for valid"):
        check_folder(str(out))


@pytest.mark.slow
def test_cli_exit_codes(folders, inputs, tmp_path):
    """check: exit 0 on every kind, 1 on a folder without record; builders: exit 2 on
    bad input, no traceback, no folder."""
    proc = run_cli("span-preprocess", "check", *[folders / k for k in KINDS])
    assert proc.stdout.count(": ok\n") >= len(KINDS)
    out = copy(folders, "qa", tmp_path)
    (out / "provenance.json").unlink()
    proc = run_cli("span-preprocess", "check", out, check=False)
    assert proc.returncode == 1 and "no provenance.json" in proc.stdout
    bad = tmp_path / "quoted.tsv"
    bad.write_text('text\tlabel\n"a\tb\nc"\tpos\nplain\tneg\n')
    proc = run_cli("span-preprocess", "table", "--out", tmp_path / "t", "--train", bad,
                   "--text-columns", "text", "--label-column", "label", *ENC, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout
    assert f"{bad}:2: field 1 is a quoted field" in proc.stdout
    assert not (tmp_path / "t").exists()
    proc = run_cli("span-preprocess", "qa", "--out", tmp_path / "q", "--train",
                   inputs / "train.squad.json", "--valid", inputs / "bad.squad.json",
                   "--max-positions", "128", "--doc-stride", "32", "--on-bad", "error", *ENC,
                   check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout
    assert not (tmp_path / "q").exists() and leftovers(tmp_path / "q") == []
