"""Values that make no sense are refused while the command line is parsed: exit 2, one
``argument --FLAG: ...`` line naming the range, nothing written, nothing read."""

import pytest

from span_plugin.cli.preprocess import main as preprocess

TABLE = ["table", "--train", "rows.tsv", "--text-columns", "sentence", "--label-column",
         "label"]
QA = ["qa", "--train", "train.json"]

CASES = [  # (argv, the flag, what the error must say)
    (TABLE + ["--delimiter", "ab"], "--delimiter", "'ab' is 2 characters; expected exactly one"),
    (TABLE + ["--delimiter", ""], "--delimiter", "'' is 0 characters; expected exactly one"),
    (TABLE + ["--ngrams-top-k", "-3"], "--ngrams-top-k", "-3 is out of range; expected 0 or more"),
    (TABLE + ["--workers", "0"], "--workers", "0 is out of range; expected 1 or more"),
    (TABLE + ["--workers", "two"], "--workers", "'two' is not a whole number"),
    (QA + ["--doc-stride", "0"], "--doc-stride", "0 is out of range; expected 1 or more"),
    (QA + ["--doc-stride", "-5"], "--doc-stride", "-5 is out of range; expected 1 or more"),
    (QA + ["--max-positions", "4"], "--max-positions", "4 is out of range; expected 7 or more"),
    (QA + ["--max-positions", "100"], "--doc-stride",
     "128 is too large for --max-positions 100; expected from 1 to 94"),
    (QA + ["--max-positions", "64", "--doc-stride", "59"], "--doc-stride",
     "59 is too large for --max-positions 64; expected from 1 to 58"),
    (["conll", "--train", "t.txt", "--max-tokens", "0"], "--max-tokens", "expected 1 or more"),
    (["ngrams", "--text", "t.txt", "--top-k", "-1"], "--top-k", "expected 0 or more"),
    (["ngrams", "--text", "t.txt", "--partitions", "0"], "--partitions", "expected 1 or more"),
    (["align-pairs", "--input", "t.tsv", "--random-sentence-ratio", "nan"],
     "--random-sentence-ratio", "'nan' is not a finite number"),
    (["align-pairs", "--input", "t.tsv", "--holdout-rows", "-2"], "--holdout-rows", "expected 0 or more"),
    (["qa-sample", "in.json", "--questions", "0"], "--questions", "expected 1 or more"),
]


@pytest.mark.parametrize("argv,flag,said", CASES, ids=[" ".join(c[0][-2:]) for c in CASES])
def test_a_value_out_of_range_is_refused_at_parse_time(argv, flag, said, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        preprocess([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    last = err.strip().splitlines()[-1]
    assert f"error: argument {flag}: " in last and said in last, last
    assert "Traceback" not in err and not out.exists()


def test_values_in_range_still_parse():
    from span_plugin.cli.preprocess import build_parser

    args = build_parser().parse_args([*TABLE, "--out", "o", "--delimiter", "tab", "--ngrams-top-k",
                                   "0", "--workers", "1"])
    assert (args.delimiter, args.ngrams_top_k, args.workers) == ("\t", 0, 1)
    args = build_parser().parse_args([*QA, "--out", "o", "--max-positions", "64", "--doc-stride", "58"])
    assert (args.max_positions, args.doc_stride) == (64, 58)


PREDICT = ["--checkpoint", "model.pt", "--input", "rows.tsv", "--output", "out.tsv"]
PREDICT_CASES = [
    (["--batch-size", "-1"], "--batch-size", "-1 is out of range; expected 1 or more"),
    (["--batch-size", "0"], "--batch-size", "0 is out of range; expected 1 or more"),
    (["--n-best", "-1"], "--n-best", "-1 is out of range; expected 1 or more"),
    (["--null-threshold", "abc"], "--null-threshold",
     "'abc' is neither a finite number nor 'tune'"),
    (["--null-threshold", "inf"], "--null-threshold", "neither a finite number nor 'tune'"),
    (["--span-threshold", "-0.5"], "--span-threshold", "expected 0 or more"),
    (["--regression-scale", "nan"], "--regression-scale", "'nan' is not a finite number"),
    (["--ngrams-top-k", "-1"], "--ngrams-top-k", "expected 0 or more"),
]


@pytest.mark.parametrize("extra,flag,said", PREDICT_CASES, ids=[" ".join(c[0]) for c in PREDICT_CASES])
def test_span_predict_refuses_them_before_loading_anything(extra, flag, said, tmp_path, capsys):
    """The checkpoint named does not exist: parsing stops first."""
    from span_plugin.cli.predict import main as predict

    with pytest.raises(SystemExit) as stop:
        predict([*PREDICT, *extra])
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    last = err.strip().splitlines()[-1]
    assert f"span-predict: error: argument {flag}: " in last and said in last, last


def test_span_predict_still_takes_tune_and_numbers():
    from span_plugin.cli.predict import build_parser

    for given, parsed in (("tune", "tune"), ("-1.5", -1.5), ("0", 0.0)):
        assert build_parser().parse_args([*PREDICT, "--null-threshold", given]).null_threshold == parsed


def test_max_positions_too_small_for_every_question_is_an_error(tmp_path, capsys):
    """Real SQuAD dev questions (all of 5 tokens or more) with --max-positions 8: no
    window fits; the build stops naming the flags instead of writing 0 windows that
    `check` would pass."""
    import json

    from conftest import DATA, GPT2_BPE, ROOT

    squad = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    article = squad["data"][0]
    article["paragraphs"] = article["paragraphs"][:1]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"version": "1.1", "data": [article]}), encoding="utf-8")
    out = tmp_path / "out"
    code = preprocess([str(a) for a in (
        "qa", "--train", path, "--out", out, "--max-positions", "8", "--doc-stride", "1",
        "--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
        GPT2_BPE / "vocab.bpe", "--srcdict", ROOT / "tests" / "fixtures" / "checkpoint_v0_2" /
        "data" / "input0" / "dict.txt", "--workers", "1")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert (f"{path}: no question of split train fits a window of --max-positions 8 "
            f"(--doc-stride 1): all 30 were left out") in err, err
    assert not out.exists()
    assert preprocess(["check", str(out)]) == 1
    assert f"{out}: no such folder" in capsys.readouterr().err


def test_a_missing_srcdict_is_a_users_mistake(tmp_path, capsys):
    rows = tmp_path / "rows.tsv"
    rows.write_text("sentence\tlabel\nA man.\t1\n")
    assert preprocess([*TABLE[:2], str(rows), *TABLE[3:], "--out", str(tmp_path / "o")]) == 2
    assert "span-preprocess table: error: --srcdict (fairseq dict.txt) is required" in \
        capsys.readouterr().err
