"""Text and labels: class labels compared after Unicode NFC and stripping white space
(the variants merged counted in the log and the record), labels holding characters that
show nothing refused, text of invisible characters only is empty, regression labels
finite in float32, text columns named twice or equal to the label column refused, and
answers that never begin or end with an invisible character."""

import json
import math

import pytest
import torch

from conftest import DATA, GLUE, GPT2_BPE, ROOT

from span_plugin.cli.preprocess import main as preprocess

ENC = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
       GPT2_BPE / "vocab.bpe", "--srcdict", ROOT / "tests" / "fixtures" / "checkpoint_v0_2" /
       "data" / "input0" / "dict.txt", "--workers", "1"]
NFD_CAFE, NFC_CAFE = "cafe\u0301", "caf\u00e9"


def sst2(n):
    """The first ``n`` real SST-2 training sentences."""
    lines = (GLUE / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:n + 1]
    return [line.split("\t")[0].strip() for line in lines]


def table(tmp_path, labels, name="rows.tsv", header="sentence\tlabel"):
    path = tmp_path / name
    rows = [f"{s}\t{lab}" for s, lab in zip(sst2(len(labels)), labels)]
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def build(tmp_path, *argv):
    out = tmp_path / "out"
    code = preprocess([str(a) for a in (*argv, "--out", out, *ENC)])
    return code, out


def table_argv(path, *extra):
    return ["table", "--train", path, "--text-columns", "sentence", "--label-column", "label",
            *extra]


def test_label_variants_are_one_class_and_counted(tmp_path, caplog):
    labels = ["pos", "pos ", NFC_CAFE, NFD_CAFE, " pos", NFD_CAFE, "pos", NFC_CAFE]
    code, out = build(tmp_path, *table_argv(table(tmp_path, labels)))
    assert code == 0
    record = json.loads((out / "provenance.json").read_text(encoding="utf-8"))
    assert sorted(record["labels"]["names"]) == sorted(["pos", NFC_CAFE])
    merged = {(m["written"], m["read_as"]): m["rows"] for m in record["labels"]["merged_variants"]}
    assert merged == {("pos ", "pos"): 1, (" pos", "pos"): 1, (NFD_CAFE, NFC_CAFE): 2}
    assert {m["split"] for m in record["labels"]["merged_variants"]} == {"train"}
    # each row's label is its written label as read (nothing shifted)
    names = record["labels"]["names"]
    raw = (out / "raw" / "train.label").read_text(encoding="utf-8").split("\n")[:-1]
    assert raw == ["pos", "pos", NFC_CAFE, NFC_CAFE, "pos", NFC_CAFE, "pos", NFC_CAFE]
    assert set(raw) == set(names)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "4 class labels written otherwise than read" in logged, logged
    assert "'cafe\\u0301' as 'caf\\xe9' (2 rows)" in logged, logged


def test_glue_labels_are_read_the_same_way(tmp_path, caplog):
    """Real MRPC rows whose labels carry a trailing no-break space: one class each, counted."""
    lines = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines()[:13]
    folder = tmp_path / "glue" / "MRPC"
    folder.mkdir(parents=True)
    marked = [lines[0]] + [("1\u00a0" if i % 3 == 0 and line[0] == "1" else line[0]) + line[1:]
                           for i, line in enumerate(lines[1:])]
    for split in ("train", "dev"):
        (folder / f"{split}.tsv").write_text("\n".join(marked) + "\n", encoding="utf-8")
    code, out = build(tmp_path, "glue", "--task", "MRPC", "--glue-dir", tmp_path / "glue")
    assert code == 0
    record = json.loads((out / "provenance.json").read_text(encoding="utf-8"))
    assert sorted(record["labels"]["names"]) == ["0", "1"]
    n = sum(1 for line in marked[1:] if line.startswith("1\u00a0"))
    assert n > 0
    assert record["labels"]["merged_variants"] == [
        {"split": s, "written": "1\u00a0", "read_as": "1", "rows": n} for s in ("train", "valid")]


@pytest.mark.parametrize("hidden,name", [("\u200b", "U+200B ZERO WIDTH SPACE"),
                                         ("\u200e", "U+200E LEFT-TO-RIGHT MARK"),
                                         ("\x07", "U+0007 (no name)")])
def test_a_label_holding_an_invisible_character_is_an_error(hidden, name, tmp_path, capsys):
    path = table(tmp_path, ["pos", f"po{hidden}s", "neg"])
    code, out = build(tmp_path, *table_argv(path))
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{path}:3: label {'po' + hidden + 's'!r} holds {name}, a character that shows " \
        f"nothing" in err, err
    assert not out.exists()


def test_regression_labels_must_be_finite_in_float32(tmp_path, capsys):
    path = table(tmp_path, ["0.5", "1e308", "2"])
    code, out = build(tmp_path, *table_argv(path, "--regression"))
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:3: label '1e308' is not a number" in err, err
    assert "finite in float32" in err and not out.exists()
    # the largest float32 still reads
    code, out = build(tmp_path, *table_argv(table(tmp_path, ["0.5", "3.4e38", "2"]), "--regression"))
    assert code == 0
    stsb = tmp_path / "glue" / "STS-B"
    stsb.mkdir(parents=True)
    lines = (GLUE / "STS-B" / "train.tsv").read_text(encoding="utf-8").splitlines()[:8]
    lines[2] = "\t".join(lines[2].split("\t")[:-1] + ["-1e300"])
    for split in ("train", "dev"):
        (stsb / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _ = build(tmp_path, "glue", "--task", "STS-B", "--glue-dir", tmp_path / "glue")
    err = capsys.readouterr().err
    assert code == 2 and "train.tsv:3: label '-1e300' is not a number" in err, err


@pytest.mark.parametrize("columns,label,said", [
    (["sentence", "sentence"], "label", "--text-columns names 'sentence' twice"),
    (["sentence"], "sentence", "--label-column 'sentence' is also one of --text-columns"),
])
def test_a_text_column_named_twice_or_as_the_label_is_an_error(columns, label, said, tmp_path,
                                                                capsys):
    path = table(tmp_path, ["pos", "neg"])
    code, out = build(tmp_path, "table", "--train", path, "--text-columns", *columns,
                      "--label-column", label)
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err, err
    assert not out.exists()


def test_a_question_of_invisible_characters_is_empty(tmp_path, capsys):
    """Real SQuAD dev questions; one made of a zero-width space and a word joiner."""
    squad = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    article = squad["data"][0]
    article["paragraphs"] = article["paragraphs"][:1]
    article["paragraphs"][0]["qas"][1]["question"] = "\u200b\u2060 "
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"version": "1.1", "data": [article]}), encoding="utf-8")
    code, out = build(tmp_path, "qa", "--train", path, "--on-bad", "error")
    err = capsys.readouterr().err
    assert code == 2 and "empty question" in err, err
    from span_plugin.formats.text_inputs import question_pairs

    with pytest.raises(ValueError, match="pair 0: empty question"):
        question_pairs([("\u200b", "A context.")])
    with pytest.raises(ValueError, match="pair 0: empty context"):
        question_pairs([("Who?", "\ufeff\u200d")])


def test_an_answer_never_begins_or_ends_with_an_invisible_character():
    """Character tokens of a context with a zero-width space and a bidi mark around a
    word: the best-scored span covers them, the answer is the word."""
    from span_plugin.modules.qa_decoding import decode_answers

    context = "ab \u200bcd\u200e ef"
    t = len(context) + 2
    scores = torch.full((1, t, 8), -math.inf)
    offsets = torch.full((1, t, 2), -1, dtype=torch.long)
    for k in range(len(context)):
        offsets[0, 1 + k] = torch.tensor([k, k + 1])
        for w in range(min(8, len(context) - k)):
            scores[0, 1 + k, w] = 0.0
    scores[0, 1 + 3, 3] = 5.0  # tokens 3..6: "\u200bcd\u200e"
    got = decode_answers(scores, torch.tensor([0.0]), torch.tensor([0]), offsets, [context],
                         n_best=5, boundaries="token")[0]
    assert (got["text"], got["start"], got["end"]) == ("cd", 4, 6)
    assert all(not x["text"][0].isspace() and x["text"][0] not in "\u200b\u200e"
               for x in got["nbest"])
