"""Messy tables, built from real GLUE rows: quoted TSV fields, a
header name given twice, JSON objects with a key given twice, JSON Lines labels of
mixed types, scores outside ASCII decimal notation, a phrase-pair row without its
phrases key, invalid UTF-8 counted. Each is an error naming the file and line (or read
right), never a silent change; the real GLUE files still read as GLUE's tooling reads
them (no quoting)."""

import csv
import json

import pytest

from conftest import GLUE
from span_plugin.formats.glue import TASKS, read_split
from span_plugin.files.errors import BadInputError
from span_plugin.formats.lines import read_file_lines
from span_plugin.formats.pairs import read_pair_rows
from span_plugin.formats.rows import read_decimal
from span_plugin.formats.table import TableReading, read_table


def mrpc(n, skip=0):
    """Real MRPC train rows: quality, id1, id2, sentence1, sentence2."""
    lines = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines()
    return [line.split("\t") for line in lines[1 + skip:1 + skip + n]]


def unquoted_mrpc(n):
    """Real MRPC train rows without a quote character (csv.writer leaves them bare)."""
    lines = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    return [line.split("\t") for line in lines if '"' not in line][:n]


def label(row):
    return "pos" if row[0] == "1" else "neg"


def quoted_tsv(path, rows, edit):
    """A TSV as pandas ``to_csv(sep="\\t")`` / Python's csv writes it (quoting
    fields that need it), text and label columns; ``edit(i, text)`` changes row i."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["text", "label"])
        for i, r in enumerate(rows):
            w.writerow([edit(i, r[3]), label(r)])
    return path


def plain_rows(path, header=True):
    lines = path.read_text(encoding="utf-8-sig").split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r").split("\t") for line in lines[header:]]


# ---------------------------------------------------------------------------------
# GLUE's own files: read without quoting, exactly as split on tabs


@pytest.mark.parametrize("task", sorted(p.name for p in GLUE.iterdir() if p.is_dir()))
def test_real_glue_files_read_as_plain_tab_splitting(task):
    """MRPC, QNLI and STS-B hold unclosed quotes and quotes opened in one sentence and
    closed in the next (MRPC dev line 365): every row is still one row, its fields the
    tab-split fields."""
    t = TASKS[task]
    for raw_split, _ in t.splits:
        path = GLUE / task / f"{raw_split}.tsv"
        if not path.exists():
            continue
        header = t.header == "all" or raw_split.startswith("test")
        rows = read_split(t, path, raw_split)
        expected = plain_rows(path, header)
        cols = t.test_inputs if raw_split.startswith("test") else t.inputs
        assert rows.rows == len(expected) and not rows.dropped, path
        for k, c in enumerate(cols):
            assert rows.inputs[k] == [r[c - 1].strip() for r in expected], (path, k)


def test_a_quote_opened_in_one_sentence_and_closed_in_the_next_stays_text():
    """MRPC dev line 365: read with CSV quoting, sentence1 and sentence2 would merge."""
    rows = read_split(TASKS["MRPC"], GLUE / "MRPC" / "dev.tsv", "dev")
    i = rows.lines.index(365)
    assert rows.inputs[0][i].startswith('" The government elements')
    assert rows.inputs[1][i].endswith('they are attacking us . "')


# ---------------------------------------------------------------------------------
# Quoted TSV (pandas, Python's csv)


def test_pandas_quotes_of_a_real_row_are_named(tmp_path):
    """MRPC's first row holds quotes: csv.writer doubles them and quotes the field;
    read without quoting, the text would keep them doubled."""
    path = quoted_tsv(tmp_path / "t.tsv", mrpc(3), lambda i, t: t)
    with pytest.raises(BadInputError, match=rf"{path}:2: field 1 is a quoted field holding a "
                       r"doubled quote"):
        read_table(path, ["text"], "label")
    quoted = TableReading(fmt="csv", delimiter="\t")
    assert read_table(path, ["text"], "label", quoted).inputs[0][0] == mrpc(1)[0][3]


def test_quoted_field_with_tab_and_line_break_is_named_not_read_as_rows(tmp_path):
    """The issue's case: a 5-row file whose row 3 holds a tab and a line break in quotes
    was read as 6 rows, a fragment labelled like the row."""
    rows = unquoted_mrpc(5)
    path = quoted_tsv(tmp_path / "train.tsv", rows,
                      lambda i, t: t if i != 2 else t[:20] + "\tneg\n" + t[20:])
    assert len(plain_rows(path)) == 6  # what plain splitting sees
    with pytest.raises(BadInputError, match=rf"{path}:4: field 1 is a quoted field holding a "
                       r"line break \(it ends on line 5\).*--format csv --delimiter '\\t'"):
        read_table(path, ["text"], "label")
    # Skipped: the whole quoted record goes, no fragment stays.
    skipped = read_table(path, ["text"], "label", TableReading(bad_rows="skip"))
    assert skipped.rows == 4 and skipped.lines == [2, 3, 6, 7]
    assert [line for line, _ in skipped.dropped] == [4]
    assert skipped.labels == [label(r) for i, r in enumerate(rows) if i != 2]
    # The fix the message names reads it whole.
    fixed = read_table(path, ["text"], "label", TableReading(fmt="csv", delimiter="\t"))
    assert fixed.rows == 5 and fixed.labels == [label(r) for r in rows]
    assert fixed.inputs[0][2] == (rows[2][3][:20] + "\tneg " + rows[2][3][20:]).strip()


@pytest.mark.parametrize("what, edit", [
    ("tab", lambda t: t.replace(" ", "\t", 1)),
    ("line break", lambda t: t.replace(" ", "\n", 1)),
    ("doubled quote", lambda t: t.replace(" ", ' "', 1) + '"'),
])
def test_each_kind_of_quoted_field_is_named(tmp_path, what, edit):
    rows = unquoted_mrpc(6)
    path = quoted_tsv(tmp_path / "t.tsv", rows, lambda i, t: edit(t) if i == 3 else t)
    with pytest.raises(BadInputError, match=rf"{path}:5: field 1 is a quoted field holding "
                       rf"a {what}"):
        read_table(path, ["text"], "label")
    assert read_table(path, ["text"], "label", TableReading(fmt="csv", delimiter="\t")).rows == 6


def test_glue_file_with_a_quoted_field_is_refused_by_line(tmp_path):
    """The same rule for GLUE's reader (one rule for every TSV), with GLUE's fix."""
    rows = unquoted_mrpc(8)
    path = tmp_path / "train.tsv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"])
        for i, r in enumerate(rows):
            w.writerow(r[:3] + [r[3] if i != 5 else r[3].replace(" ", "\n", 2), r[4]])
    with pytest.raises(BadInputError, match=rf"{path}:7: field 4 is a quoted field holding a "
                       r"line break \(it ends on line 9\).*remove the quotes"):
        read_split(TASKS["MRPC"], path, "train")
    skipped = read_split(TASKS["MRPC"], path, "train", bad_rows="skip")
    assert skipped.rows == 7 and skipped.labels == [r[0] for i, r in enumerate(rows) if i != 5]


# ---------------------------------------------------------------------------------
# Names given twice


@pytest.mark.parametrize("fmt, sep", [("tsv", "\t"), ("csv", ",")])
def test_header_name_given_twice_is_an_error_naming_both_columns(tmp_path, fmt, sep):
    rows = mrpc(3)
    path = tmp_path / f"t.{fmt}"
    path.write_text(sep.join(["text", "label", "text"]) + "\n" + "".join(
        sep.join([r[3].replace(",", ";"), label(r), r[4].replace(",", ";")]) + "\n"
        for r in rows))
    with pytest.raises(BadInputError, match=rf"{path}:1: column name 'text' is given twice in "
                       r"the header \(columns 1 and 3\)"):
        read_table(path, ["text"], "label")


def test_json_key_given_twice_is_an_error_naming_the_line(tmp_path):
    rows = mrpc(3)
    path = tmp_path / "t.jsonl"
    lines = [json.dumps({"text": r[3], "label": label(r)}) for r in rows]
    lines[1] = lines[1][:-1] + ', "text": "another"}'
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInputError, match=rf"{path}:2: key 'text' is given twice"):
        read_table(path, ["text"], "label")


# ---------------------------------------------------------------------------------
# Labels


def test_json_labels_of_mixed_types_are_refused_naming_the_line(tmp_path):
    rows = mrpc(4)
    path = tmp_path / "t.jsonl"
    for labels, bad_line, kinds in (([1, 0, 1.0, 0], 3, "non-integer number.*integer"),
                                    ([1, 0, True, 0], 3, "boolean.*integer"),
                                    (["1", "0", 1, "0"], 3, "integer.*string")):
        path.write_text("".join(json.dumps({"text": r[3], "label": y}) + "\n"
                                for r, y in zip(rows, labels)))
        with pytest.raises(BadInputError, match=rf"{path}:{bad_line}: label .* is a JSON {kinds}"):
            read_table(path, ["text"], "label")
    # One type throughout is fine, whichever it is.
    for labels in ([1, 0, 1, 0], [1.0, 0.0, 1.5, 0.0], [True, False, True, True]):
        path.write_text("".join(json.dumps({"text": r[3], "label": y}) + "\n"
                                for r, y in zip(rows, labels)))
        assert read_table(path, ["text"], "label").labels == [json.dumps(y) for y in labels]


@pytest.mark.parametrize("score", ["1_000", "\u0663", "\uff13", "3\u0660", "nan", "inf",
                                   "1e999", "0x1p0", " ", "4,5"])
def test_scores_outside_ascii_decimal_notation_are_refused(tmp_path, score):
    rows = mrpc(3)
    path = tmp_path / "t.tsv"
    path.write_text("text\tscore\n" + "".join(f"{r[3]}\t{score if i == 1 else 2.5}\n"
                                              for i, r in enumerate(rows)))
    with pytest.raises(BadInputError, match=rf"{path}:3: label .* is not a number "
                       r"\(regression\): .* ASCII decimal notation"):
        read_table(path, ["text"], "score", TableReading(regression=True))


def test_ascii_decimal_scores_are_read():
    for text, value in (("3", 3.0), ("-0.25", -0.25), ("2.5e-3", 0.0025), (".5", 0.5),
                        ("+1.", 1.0), ("4E2", 400.0)):
        assert read_decimal(text) == value
    for text in ("1_000", "\u0663", "\uff13", "nan", "-inf", "1e999", "", "1.2.3", "e5"):
        assert read_decimal(text) is None, text


def test_stsb_score_in_other_digits_is_refused_by_line(tmp_path):
    lines = (GLUE / "STS-B" / "train.tsv").read_text(encoding="utf-8").splitlines()[:6]
    fields = lines[3].split("\t")
    fields[9] = "\u0663.\u0665"  # Arabic-Indic 3.5: float() reads it
    lines[3] = "\t".join(fields)
    path = tmp_path / "train.tsv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInputError, match=rf"{path}:4: label .* ASCII decimal notation"):
        read_split(TASKS["STS-B"], path, "train")


# ---------------------------------------------------------------------------------
# Phrase pairs, UTF-8


def test_phrase_pair_row_without_its_phrases_key_names_key_file_and_line(tmp_path):
    rows = mrpc(3)
    path = tmp_path / "pairs.jsonl"
    objs = [{"sentence1": r[3], "sentence2": r[4], "phrases": []} for r in rows]
    objs[1] = {"sentence1": rows[1][3], "sentence2": rows[1][4], "phrase": []}  # misnamed
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    with pytest.raises(BadInputError, match=rf"{path}:2: no 'phrases' key \(keys: "
                       r"\['phrase', 'sentence1', 'sentence2'\]\)"):
        read_pair_rows(path)
    objs[1]["phrases"] = []
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    assert len(read_pair_rows(path)) == 3


def test_invalid_utf8_replacements_are_counted(tmp_path):
    rows = mrpc(4)
    path = tmp_path / "t.tsv"
    body = "text\tlabel\n" + "".join(f"{r[3]}\t{label(r)}\n" for r in rows)
    raw = body.encode().replace(b"accused", b"acc\xffsed\xfe").replace(b"Yucaipa", b"Yuca\xe9pa")
    path.write_bytes(raw + "real \ufffd stays\tpos\n".encode())
    with pytest.raises(BadInputError, match=rf"{path}:2: invalid UTF-8"):
        read_file_lines(path)
    assert read_file_lines(path, "replace").replacements == 3  # a real U+FFFD is not one
    assert read_table(path, ["text"], "label", bad_utf8="replace").replacements == 3
