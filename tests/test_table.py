"""Users' own data: ``span-preprocess table`` on JSON Lines, CSV and TSV files with named
columns (real sentences from ../shared), its bad-input handling, and recipes/table.sh
training on the folders it makes."""

import json

import pytest

from conftest import GLUE, GPT2_BPE, ROOT, run_cli
from test_recipes import TINY

from span_plugin.files.errors import BadInputError
from span_plugin.formats.table import TableReading, read_table

ENC = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
       GPT2_BPE / "vocab.bpe", "--srcdict", GPT2_BPE / "dict.txt", "--workers", "1"]


def mrpc(n, skip=0):
    lines = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines()[1 + skip:1 + skip + n]
    return [line.split("\t") for line in lines]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def nli_jsonl(folder):
    """Pairs as Hugging Face datasets exports SNLI: premise, hypothesis, label as an int
    (-1: no gold label), one JSON object per line."""
    folder.mkdir(exist_ok=True)
    files = {}
    for split, n, skip in (("train", 36, 0), ("validation", 12, 40), ("test", 8, 60)):
        rows = [{"premise": r[3], "hypothesis": r[4], "label": (-1 if i % 9 == 4 else i % 3),
                 "idx": i} for i, r in enumerate(mrpc(n, skip))]
        if split == "test":
            rows = [dict(r, label=-1) for r in rows]
        files[split] = write_jsonl(folder / f"{split}.jsonl", rows)
    return files


def sts_csv(folder):
    """Single sentences with a score, as pandas.to_csv writes them: quoted fields that
    hold commas, quotes and a line break."""
    folder.mkdir(exist_ok=True)
    import csv

    files = {}
    for split, n, skip in (("train", 30, 0), ("dev", 10, 40)):
        path = folder / f"{split}.csv"
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["id", "text", "score"])
            for i, r in enumerate(mrpc(n, skip)):
                text = r[3] if i != 2 else 'He said "no",\nthen left.'
                w.writerow([i, text, f"{(i % 11) / 2:.1f}"])
        files[split] = path
    return files


def table_recipe(cwd, **env):
    env = {"BPE_DIR": str(GPT2_BPE), "WORKERS": "1", "FROM_SCRATCH": "1",
           **{k: str(v) for k, v in env.items()}}
    return run_cli("bash", ROOT / "recipes" / "table.sh", "--cpu", "--max-update", "2", *TINY,
                   cwd=cwd, env=env).stdout


@pytest.fixture(scope="module")
def nli_run(tmp_path_factory):
    """recipes/table.sh on JSON Lines pairs: prepares data-bin/nli, trains, predicts."""
    cwd = tmp_path_factory.mktemp("table_nli")
    files = nli_jsonl(cwd / "src")
    log = table_recipe(cwd, TASK="nli", TRAIN=files["train"], VALID=files["validation"],
                       TEST=files["test"], TEXT_COLUMNS="premise hypothesis",
                       LABEL_COLUMN="label", DROP_LABELS="-1", NUM_CLASSES=3, METRIC="accuracy")
    return cwd, files, log


@pytest.mark.slow
def test_jsonl_pairs_like_a_huggingface_export_train_with_the_recipe(nli_run):
    cwd, files, log = nli_run
    out = cwd / "data-bin" / "nli"
    rows = [json.loads(line) for line in files["train"].read_text().splitlines()]
    kept = [r for r in rows if r["label"] != -1]
    assert (out / "raw" / "train.input0").read_text().splitlines() == [r["premise"].strip() for r in kept]
    assert (out / "raw" / "train.input1").read_text().splitlines() == [r["hypothesis"].strip() for r in kept]
    assert (out / "raw" / "train.label").read_text().splitlines() == [str(r["label"]) for r in kept]
    dropped = (out / "dropped_rows.tsv").read_text().splitlines()[1:]
    assert [d.split("\t")[2] for d in dropped if d.startswith("train")] == ["5", "14", "23", "32"]
    assert all(d.endswith("label '-1'") for d in dropped)
    # The test file's labels are not read; all its rows are kept.
    assert len((out / "raw" / "test.input0").read_text().splitlines()) == 8
    assert not (out / "label" / "test.bin").exists()
    record = json.loads((out / "provenance.json").read_text())
    assert record["task"] == "nli" and record["inputs"] == 2
    assert sorted(record["labels"]["names"]) == ["0", "1", "2"]
    assert record["source"]["train"]["path"] == str(files["train"])
    assert record["rows"] == {"train": 32, "valid": 11, "test": 8}

    results = json.loads((cwd / "runs" / "nli" / "results.json").read_text())
    assert results["metric"] == "accuracy" and "accuracy" in results["dev"]["dev"]
    assert "f1" not in results["dev"]["dev"]  # three classes
    dev = (cwd / "runs" / "nli" / "dev_predictions" / "nli.tsv").read_text().splitlines()
    assert len(dev) == 1 + 11 and {line.split("\t")[1] for line in dev[1:]} <= {"0", "1", "2"}
    test = (cwd / "runs" / "nli" / "test_predictions" / "nli.tsv").read_text().splitlines()
    assert len(test) == 1 + 8


@pytest.mark.slow
def test_csv_regression_trains_with_the_recipe(tmp_path):
    sts = sts_csv(tmp_path / "sts")
    table_recipe(tmp_path, TASK="sts", TRAIN=sts["train"], VALID=sts["dev"], TEXT_COLUMNS="text",
                 LABEL_COLUMN="score", REGRESSION=1, NUM_CLASSES=1, METRIC="pearson")
    record = json.loads((tmp_path / "data-bin" / "sts" / "provenance.json").read_text())
    assert record["inputs"] == 1 and record["labels"] == {"kind": "regression", "scale": 1.0, "range": None}
    results = json.loads((tmp_path / "runs" / "sts" / "results.json").read_text())
    assert results["metric"] == "pearson" and {"pearson", "spearman"} <= set(results["dev"]["dev"])
    scores = (tmp_path / "runs" / "sts" / "dev_predictions" / "sts.tsv").read_text().splitlines()[1:]
    assert len(scores) == 10 and all(float(s.split("\t")[1]) == float(s.split("\t")[1]) for s in scores)


def test_csv_quoting_line_breaks_and_regression(tmp_path):
    files = sts_csv(tmp_path / "src")
    rows = read_table(files["train"], ["text"], "score", TableReading(regression=True))
    assert rows.inputs[0][2] == 'He said "no", then left.'  # one line per row
    assert rows.labels[:3] == ["0", "0.5", "1"] and rows.rows == 30
    # The same rows as a tab-separated file with the GLUE layout read the same.
    tsv = tmp_path / "train.tsv"
    tsv.write_text("id\ttext\tscore\n" + "".join(
        f"{i}\t{t}\t{y}\n" for i, (t, y) in enumerate(zip(rows.inputs[0], rows.labels))))
    again = read_table(tsv, ["text"], "score", TableReading(regression=True))
    assert again.inputs == rows.inputs and again.labels == rows.labels


def test_bad_rows_name_file_and_line_or_are_left_out(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [{"s": "one", "y": "a"}, {"s": "two", "y": "b"}])
    p.write_text(p.read_text() + "{not json\n" + json.dumps({"s": None, "y": "a"}) + "\n"
                 + json.dumps({"y": "b"}) + "\n" + json.dumps({"s": "x", "y": ""}) + "\n")
    with pytest.raises(BadInputError, match=rf"{p}:3: not valid JSON .*--bad-rows skip"):
        read_table(p, ["s"], "y")
    rows = read_table(p, ["s"], "y", TableReading(bad_rows="skip"))
    assert rows.inputs == [["one", "two"]] and rows.labels == ["a", "b"]
    assert [(ln, why.split(" (")[0]) for ln, why in rows.dropped] == [
        (3, "not valid JSON"), (4, "text column 's' holds null, expected text"),
        (5, "no text column 's'"), (6, "empty label in column 'y'")]

    c = tmp_path / "b.csv"
    c.write_text('s,y\n"a, b",pos\nonly one field\n"x",neg\n', encoding="utf-8")
    with pytest.raises(BadInputError, match=rf"{c}:3: 1 CSV fields, expected 2 \(the header's\)"):
        read_table(c, ["s"], "y")
    with pytest.raises(BadInputError, match=rf"{c}:1: no label column 'label' in the header"):
        read_table(c, ["s"], "label")
    r = tmp_path / "c.tsv"
    r.write_text("s\ty\nfine\t1.5\nbad\tten\n")
    with pytest.raises(BadInputError, match=rf"{r}:3: label 'ten' is not a number \(regression\)"):
        read_table(r, ["s"], "y", TableReading(regression=True))
    u = tmp_path / "d.tsv"
    u.write_bytes(b"s\ty\nok\t1\nbad \xff byte\t0\n")
    with pytest.raises(BadInputError, match=rf"{u}:3: invalid UTF-8"):
        read_table(u, ["s"], "y")
    assert read_table(u, ["s"], "y", bad_utf8="replace").inputs == [["ok", "bad \ufffd byte"]]

    # Through the command: an error names the file and line, exit status 2.
    proc = run_cli("span-preprocess", "table", "--out", tmp_path / "out", "--train", c,
                   "--text-columns", "s", "--label-column", "y", *ENC, check=False)
    assert proc.returncode == 2 and f"{c}:3: 1 CSV fields, expected 2" in proc.stdout, proc.stdout
