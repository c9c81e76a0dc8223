"""Messy CoNLL input, built from real CoNLL-2003 rows: a file without
its tag column, ragged columns, files of different layouts, ill-formed BIOES, the line
named for a bad word, invalid UTF-8 replaced and recorded. Each is an error naming the
file and line, or shows in the summary and the record; never a silent change."""

import json
import logging

import pytest

from conftest import DATA, GPT2_BPE, run_cli
from span_plugin.formats import tags as T
from span_plugin.formats.conll import read_conll
from span_plugin.files.errors import BadInputError
from span_plugin.preprocess.folders import conll as C
from span_plugin.preprocess.folders.options import FolderOptions
from span_plugin.preprocess.segmentation.encoding import EncoderSpec
from test_ner_preprocess import wordpiece_spec

CONLL = DATA / "conll2003"
SPEC = EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                   vocab_bpe=str(GPT2_BPE / "vocab.bpe"), segmentation="none")
DICT = str(GPT2_BPE / "dict.txt")
ENC = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
       GPT2_BPE / "vocab.bpe", "--srcdict", GPT2_BPE / "dict.txt", "--workers", "1",
       "--segmentation", "none"]


def head(split, n):
    with open(CONLL / f"{split}.txt", encoding="utf-8") as f:
        return [next(f) for _ in range(n)]


def write(path, lines):
    path.write_text("".join(lines), encoding="utf-8")
    return path


def drop_column(lines, k):
    """The lines with column k removed from word lines (-DOCSTART- and blanks kept)."""
    out = []
    for line in lines:
        fields = line.split()
        if fields and fields[0] != "-DOCSTART-":
            del fields[k]
            line = " ".join(fields) + "\n"
        out.append(line)
    return out


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    root = tmp_path_factory.mktemp("conll_messy")
    return {"train": write(root / "train.txt", head("train", 300)),
            "valid": write(root / "valid.txt", head("valid", 120))}


def test_valid_without_the_tag_column_beside_train_is_refused(real, tmp_path):
    """Today: its last column (chunk tags) read as entity types, all unseen in train,
    so every valid entity became O with a warning and exit 0."""
    valid = write(tmp_path / "valid3.txt", drop_column(real["valid"].read_text().splitlines(True), 3))
    out = tmp_path / "out"
    with pytest.raises(BadInputError, match=rf"{valid}: 3 columns on every word line, but the "
                       rf"train file {real['train']} has 4"):
        C.prepare_conll(out, {"train": str(real["train"]), "valid": str(valid)},
                        FolderOptions(SPEC, DICT))
    assert not out.exists()


def test_ragged_columns_are_an_error_naming_the_line(real, tmp_path):
    lines = real["train"].read_text().splitlines(True)
    lines[12] = " ".join(lines[12].split()[:3] + ["x", lines[12].split()[3]]) + "\n"
    f = write(tmp_path / "ragged.txt", lines)
    with pytest.raises(BadInputError, match=rf"{f}:13: 5 columns, but the file's first word "
                       r"line has 4"):
        read_conll(f)


def test_entity_types_are_counted_as_read(real, tmp_path):
    counts, stats = C.prepare_conll(tmp_path / "out", {k: str(v) for k, v in real.items()},
                                    FolderOptions(SPEC, DICT))
    for split, path in real.items():
        # the files are well-formed IOB2 here: one entity per B- tag
        expected = {}
        for line in path.read_text().splitlines():
            fields = line.split()
            if fields and fields[-1].startswith("B-"):
                expected[fields[-1][2:]] = expected.get(fields[-1][2:], 0) + 1
        assert stats[split]["repaired_tags"] == 0
        assert stats[split]["entity_types"] == dict(sorted(expected.items()))
    record = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert record["labels"]["stats"]["train"]["entity_types"] == stats["train"]["entity_types"]
    assert record["bad_utf8"] == {"mode": "error", "replacements": {"train": 0, "valid": 0}}


def test_a_file_without_its_tag_column_shows_chunk_types(real, tmp_path, caplog):
    train = write(tmp_path / "train3.txt", drop_column(real["train"].read_text().splitlines(True), 3))
    with caplog.at_level(logging.WARNING):
        _, stats = C.prepare_conll(tmp_path / "out", {"train": str(train)}, FolderOptions(SPEC, DICT))
    assert set(stats["train"]["entity_types"]) <= C.CHUNK_TYPES
    assert {"NP", "VP"} <= set(stats["train"]["entity_types"])
    assert "are chunk types: is the tag column missing" in caplog.text


# ---------------------------------------------------------------------------------
# BIOES


def to_bioes(lines):
    """Real IOB2 lines rewritten in BIOES (S- for one-word entities, E- for the last)."""
    out = list(lines)
    for i, line in enumerate(out):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-" or fields[-1] == "O":
            continue
        nxt = out[i + 1].split() if i + 1 < len(out) else []
        goes_on = len(nxt) > 1 and nxt[-1] == "I-" + fields[-1][2:]
        prefix = {("B", False): "S", ("B", True): "B", ("I", False): "E", ("I", True): "I"}[
            (fields[-1][0], goes_on)]
        fields[-1] = prefix + fields[-1][1:]
        out[i] = " ".join(fields) + "\n"
    return out


def test_bioes_of_real_rows_reads_back_the_iob2_tags(real, tmp_path):
    bioes = write(tmp_path / "bioes.txt", to_bioes(real["train"].read_text().splitlines(True)))
    a, b = read_conll(real["train"]), read_conll(bioes, scheme="bioes", bad_tags="error")
    assert [s.tags for s in a.sentences] == [s.tags for s in b.sentences] and b.repairs == 0


@pytest.mark.parametrize("change, why", [
    ("E-", "followed by 'B-"),   # B B: the first entity's E- turned into B-
    ("O", "followed by 'O'"),    # B O: the entity has no E-
])
def test_ill_formed_bioes_is_caught_by_bad_tags_error(real, tmp_path, change, why):
    lines = to_bioes(real["train"].read_text().splitlines(True))
    # "Peter B-PER / Blackburn E-PER" (lines 13, 14): change the E- tag
    assert lines[12].split()[-1] == "B-PER" and lines[13].split()[-1] == "E-PER"
    fields = lines[13].split()
    if change == "O":
        lines[13] = " ".join(fields[:-1] + ["O"]) + "\n"
    else:
        lines[13:14] = [" ".join(fields[:-1] + ["B-PER"]) + "\n",
                        " ".join(fields[:-1] + ["E-PER"]) + "\n"]
    f = write(tmp_path / "bad.txt", lines)
    with pytest.raises(BadInputError, match=rf"{f}:13: tag 'B-PER' is {why}.*ill-formed in bioes"):
        read_conll(f, scheme="bioes", bad_tags="error")
    assert read_conll(f, scheme="bioes").repairs == 1  # repaired: ended there, as conlleval


def test_bioes_entity_without_its_end_at_the_sentence_end():
    with pytest.raises(T.TagError, match="'I-LOC' is followed by the end of the sentence"):
        T.to_iob2("O B-LOC I-LOC".split(), "bioes", repair=False)
    assert T.to_iob2("O B-LOC I-LOC".split(), "bioes") == ("O B-LOC I-LOC".split(), 1)
    with pytest.raises(T.TagError, match="'B-LOC' is followed by 'S-PER'"):
        T.to_iob2("B-LOC S-PER".split(), "bioes", repair=False)


# ---------------------------------------------------------------------------------
# Lines named, UTF-8


def test_bad_word_is_named_at_its_own_line(real, tmp_path):
    spec, srcdict = wordpiece_spec(tmp_path)
    spec.segmentation = "none"
    lines = real["train"].read_text().splitlines(True)[:40]
    # a lone accent for "Commission", word 3 of the sentence that starts on line 19
    lines[20] = "\u0301 NNP I-NP I-ORG\n"
    f = write(tmp_path / "accent.txt", lines)
    with pytest.raises(BadInputError, match=rf"{f}:21: word 3 of the sentence \('\u0301'\) gives no"):
        C.prepare_conll(tmp_path / "out", {"train": str(f)}, FolderOptions(spec, str(srcdict)))
    assert not (tmp_path / "out").exists()


def test_word_longer_than_max_tokens_is_named_at_its_own_line(real, tmp_path):
    lines = real["train"].read_text().splitlines(True)[:40]
    lines[21] = "Qzxvwqpzxkqvjzx" * 3 + " VBD B-VP O\n"  # "said": word 4, line 22
    f = write(tmp_path / "long.txt", lines)
    with pytest.raises(BadInputError, match=rf"{f}:22: word 4 alone has \d+ tokens"):
        C.prepare_conll(tmp_path / "out", {"train": str(f)}, FolderOptions(SPEC, DICT),
                        max_tokens=6)


def test_bad_utf8_replace_records_its_replacements(real, tmp_path):
    raw = real["train"].read_bytes().replace(b"Blackburn", b"Black\xffburn\xfe", 1)
    raw = raw.replace(b"German", b"Germ\xe4n", 1)
    f = tmp_path / "latin.txt"
    f.write_bytes(raw)
    with pytest.raises(BadInputError, match=rf"{f}:5: invalid UTF-8"):  # "German"
        read_conll(f)
    _, stats = C.prepare_conll(tmp_path / "out", {"train": str(f)},
                               FolderOptions(SPEC, DICT, bad_utf8="replace"))
    assert stats["train"]["utf8_replacements"] == 3
    record = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert record["bad_utf8"] == {"mode": "replace", "replacements": {"train": 3}}
    assert record["labels"]["stats"]["train"]["utf8_replacements"] == 3


@pytest.mark.slow
def test_cli_prints_entity_types_and_refuses_other_layouts(real, tmp_path):
    out = tmp_path / "out"
    proc = run_cli("span-preprocess", "conll", "--out", out, "--train", real["train"],
                   "--valid", real["valid"], *ENC)
    assert "entity types (4 columns): LOC " in proc.stdout and "PER " in proc.stdout
    valid = write(tmp_path / "valid3.txt", drop_column(real["valid"].read_text().splitlines(True), 3))
    proc = run_cli("span-preprocess", "conll", "--out", tmp_path / "out3", "--train",
                   real["train"], "--valid", valid, *ENC, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout  # stderr joined in
    assert f"{valid}: 3 columns on every word line" in proc.stdout
    assert not (tmp_path / "out3").exists()
