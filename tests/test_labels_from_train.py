"""The label set of every folder comes from the training split: GLUE, users'
tables, sentence pairs and CoNLL files through the real ``span-preprocess`` command, on
real rows from ../shared laid out as each format publishes them. A valid/test label that
train lacks is an error naming file, line and label, or (``--unknown-labels skip``) a row
listed in ``dropped_rows.tsv``; an empty training split is an error; CoNLL types seen only
in valid/test are read as O (counted) by default. And the NER metric modes: entity P/R/F1
equal seqeval's default and strict IOB2 modes on random, ill-formed tag sequences."""

import json
import random
import types
import warnings

import pytest
import torch

from conftest import DATA, GLUE, GPT2_BPE, conll_sentences, run_cli, run_main
from test_span_pair_data import _make_jsonl, mrpc_rows
from test_task_train import span_args, valid_stats

from span_plugin.formats import tags as T
from span_plugin.modules import entities as ner

ENC = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe",
       GPT2_BPE / "vocab.bpe", "--srcdict", GPT2_BPE / "dict.txt", "--workers", "1"]
CONLL = DATA / "conll2003"


def preprocess(*args):
    return run_cli("span-preprocess", *args, *ENC, check=False)


def write_tsv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def dropped(folder):
    """dropped_rows.tsv as (split, file, line, reason) tuples."""
    return [tuple(d.split("\t")) for d in lines(folder / "dropped_rows.tsv")[1:]]


# ----------------------------------------------------------------------------------
# GLUE: an RTE folder (index sentence1 sentence2 label; test.tsv without labels)


@pytest.fixture()
def rte_glue(tmp_path):
    """glue_data/RTE of real MRPC sentence pairs; dev.tsv line 6 says ``maybe``."""
    rows = mrpc_rows(60)
    label = lambda y: "entailment" if y == "1" else "not_entailment"  # noqa: E731
    head = ["index", "sentence1", "sentence2", "label"]
    write_tsv(tmp_path / "glue" / "RTE" / "train.tsv",
              [head] + [[str(i), a, b, label(y)] for i, (a, b, y) in enumerate(rows[:30])])
    dev = [[str(i), a, b, label(y)] for i, (a, b, y) in enumerate(rows[30:46])]
    dev[4][3] = "maybe"  # file line 6 (after the header)
    write_tsv(tmp_path / "glue" / "RTE" / "dev.tsv", [head] + dev)
    write_tsv(tmp_path / "glue" / "RTE" / "test.tsv",
              [head[:3]] + [[str(i), a, b] for i, (a, b, _) in enumerate(rows[46:58])])
    return tmp_path / "glue"


def test_glue_dev_label_not_in_train_is_an_error_naming_file_line_label(rte_glue, tmp_path):
    out = tmp_path / "RTE-bin"
    proc = preprocess("glue", "--task", "RTE", "--glue-dir", rte_glue, "--out", out)
    dev = rte_glue / "RTE" / "dev.tsv"
    assert proc.returncode == 2, proc.stdout
    assert (f"{dev}:6: label 'maybe' is not a label of the training split "
            f"({rte_glue / 'RTE' / 'train.tsv'} has ['entailment', 'not_entailment'])"
            in proc.stdout), proc.stdout
    assert "--unknown-labels skip" in proc.stdout
    assert not (out / "provenance.json").exists()  # refused before anything was written


def test_glue_skip_leaves_the_row_out_and_lists_it(rte_glue, tmp_path):
    out = tmp_path / "RTE-bin"
    proc = preprocess("glue", "--task", "RTE", "--glue-dir", rte_glue, "--out", out,
                      "--unknown-labels", "skip")
    assert proc.returncode == 0, proc.stdout
    dev = rte_glue / "RTE" / "dev.tsv"
    assert dropped(out) == [("valid", str(dev), "6", "label 'maybe' not in the training "
                             "split's labels ['entailment', 'not_entailment']")]
    assert f"{out / 'dropped_rows.tsv'}: 1 row left out (valid 1)" in proc.stdout
    assert "1 row with a label the training split does not have ('maybe')" in proc.stdout
    kept = [r for r in lines(dev)[1:] if r.split("\t")[3] != "maybe"]
    assert lines(out / "raw" / "valid.input0") == [r.split("\t")[1] for r in kept]
    assert lines(out / "raw" / "valid.label") == [r.split("\t")[3] for r in kept]
    record = json.loads((out / "provenance.json").read_text())
    assert record["rows"] == {"train": 30, "valid": 15, "test": 12}  # test: no labels, all kept
    assert sorted(record["labels"]["names"]) == ["entailment", "not_entailment"]
    run_cli("span-preprocess", "check", out)


def test_glue_empty_train_is_an_error(rte_glue, tmp_path):
    train = rte_glue / "RTE" / "train.tsv"
    train.write_text(lines(train)[0] + "\n")  # the header only
    proc = preprocess("glue", "--task", "RTE", "--glue-dir", rte_glue, "--out", tmp_path / "o")
    assert proc.returncode == 2
    assert f"{train}: the training split has no rows" in proc.stdout, proc.stdout


# ----------------------------------------------------------------------------------
# Users' tables: real SST-2 rows


def sst2(split, n):
    return [line.split("\t") for line in lines(GLUE / "SST-2" / f"{split}.tsv")[1:n + 1]]


@pytest.fixture()
def sst_table(tmp_path):
    """train.tsv: SST-2's first 40 train rows (labels 0, 1); valid.tsv: its first 12
    dev rows, two relabelled ``neutral`` (a 3-class export); test.tsv: no label column."""
    src = tmp_path / "src"
    write_tsv(src / "train.tsv", [["sentence", "label"]] + sst2("train", 40))
    dev = sst2("dev", 12)
    dev[2][1] = dev[7][1] = "neutral"  # file lines 4 and 9
    write_tsv(src / "valid.tsv", [["sentence", "label"]] + dev)
    write_tsv(src / "test.tsv", [["sentence"]] + [[s] for s, _ in sst2("dev", 20)[12:]])
    return src


def table(src, out, *extra):
    return preprocess("table", "--out", out, "--train", src / "train.tsv", "--valid",
                      src / "valid.tsv", "--test", src / "test.tsv", "--text-columns",
                      "sentence", "--label-column", "label", *extra)


def test_table_valid_label_not_in_train_is_an_error(sst_table, tmp_path):
    proc = table(sst_table, tmp_path / "out")
    assert proc.returncode == 2
    assert (f"{sst_table / 'valid.tsv'}:4: label 'neutral' is not a label of the training "
            f"split ({sst_table / 'train.tsv'} has ['0', '1'])" in proc.stdout), proc.stdout


@pytest.mark.slow
def test_table_skip_lists_the_rows_and_the_folder_trains(sst_table, tmp_path):
    out = tmp_path / "out"
    proc = table(sst_table, out, "--unknown-labels", "skip")
    assert proc.returncode == 0, proc.stdout
    valid = str(sst_table / "valid.tsv")
    assert [(s, f, ln) for s, f, ln, _ in dropped(out)] == [("valid", valid, "4"), ("valid", valid, "9")]
    assert all(why.startswith("label 'neutral' not in the training split") for *_, why in dropped(out))
    assert f"{out / 'dropped_rows.tsv'}: 2 rows left out (valid 2)" in proc.stdout
    kept = [r for i, r in enumerate(sst2("dev", 12)) if i not in (2, 7)]
    assert lines(out / "raw" / "valid.input0") == [x.strip() for x, _ in kept]
    assert lines(out / "raw" / "valid.label") == [y for _, y in kept]
    assert [x.split()[0] for x in lines(out / "label" / "dict.txt")][:2] in (["0", "1"], ["1", "0"])
    log = run_main("fairseq-train", *span_args(out, tmp_path / "ckpt", max_update=1)).stdout
    assert "accuracy" in valid_stats(log)
    assert (tmp_path / "ckpt" / "checkpoint_best.pt").is_file()


def test_table_empty_or_emptied_train_is_an_error(sst_table, tmp_path):
    train = sst_table / "train.tsv"
    train.write_text("sentence\tlabel\n")
    proc = table(sst_table, tmp_path / "a")
    assert proc.returncode == 2
    assert f"{train}: the training split has no rows (an empty file or a header line only)" \
        in proc.stdout, proc.stdout
    empty = sst_table / "train.jsonl"
    empty.write_text("")
    proc = preprocess("table", "--out", tmp_path / "b", "--train", empty, "--text-columns",
                      "sentence", "--label-column", "label")
    assert proc.returncode == 2 and f"{empty}: the training split has no rows" in proc.stdout
    # Every row left out by --bad-rows skip: also no rows, and the error says why.
    train.write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\textra\n" for s, y in sst2("train", 3)))
    proc = table(sst_table, tmp_path / "c", "--bad-rows", "skip")
    assert proc.returncode == 2
    assert (f"{train}: the training split has no rows left: all 3 were left out (line 2: "
            f"3 tab-separated fields" in proc.stdout), proc.stdout


# ----------------------------------------------------------------------------------
# Sentence pairs with phrase pairs (JSON Lines): real MRPC rows


def test_pairs_valid_label_not_in_train_error_and_skip(tmp_path):
    rows = mrpc_rows(40)
    train, valid = tmp_path / "train.jsonl", tmp_path / "valid.jsonl"
    _make_jsonl(train, rows[:28], seed=1)
    expected = _make_jsonl(valid, rows[28:], seed=2)
    objs = [json.loads(x) for x in lines(valid)]
    objs[3]["label"] = "2"  # line 4
    valid.write_text("".join(json.dumps(o) + "\n" for o in objs))
    args = ["pairs", "--train", train, "--valid", valid, "--label-column", "label"]
    proc = preprocess(*args, "--out", tmp_path / "a")
    assert proc.returncode == 2
    assert (f"{valid}:4: label '2' is not a label of the training split ({train} has "
            f"['0', '1'])" in proc.stdout), proc.stdout

    out = tmp_path / "b"
    proc = preprocess(*args, "--out", out, "--unknown-labels", "skip")
    assert proc.returncode == 0, proc.stdout
    assert [d[:3] for d in dropped(out)] == [("valid", str(valid), "4")]
    del expected[3]
    assert f"valid 11 rows, {sum(map(len, expected))} phrase pairs" in proc.stdout
    from span_plugin.preprocess.binary import indexed

    # The phrase files lost the same row as the tokens and the labels.
    sizes = indexed.IndexedReader(str(out / "phrase_label" / "valid")).sizes
    assert list(sizes) == [len(e) for e in expected]
    assert len(indexed.IndexedReader(str(out / "input1" / "valid")).sizes) == 11
    assert len(indexed.IndexedReader(str(out / "label" / "valid")).sizes) == 11
    run_cli("span-preprocess", "check", out)

    train.write_text("")
    proc = preprocess(*args, "--out", tmp_path / "c")
    assert proc.returncode == 2 and f"{train}: the training split has no rows" in proc.stdout


# ----------------------------------------------------------------------------------
# CoNLL: train without MISC (real sentences), real valid/test prefixes that have it


@pytest.fixture(scope="module")
def conll_no_misc(tmp_path_factory):
    """train.txt: the first 120 real train sentences without a MISC entity; valid.txt,
    test.txt: the first 20 / 30 real sentences of their files (line numbers as there)."""
    root = tmp_path_factory.mktemp("conll_types")
    text = conll_sentences(CONLL / "train.txt", 200).split("\n\n")
    keep = [s for s in text if s.strip() and "MISC" not in s and not s.startswith("-DOCSTART-")]
    (root / "train.txt").write_text("-DOCSTART- -X- -X- O\n\n" + "\n\n".join(keep[:120]) + "\n\n")
    (root / "valid.txt").write_text(conll_sentences(CONLL / "valid.txt", 20))
    (root / "test.txt").write_text(conll_sentences(CONLL / "test.txt", 30))
    return root


def misc_in(path):
    """(MISC entities, line of the first MISC word, first lines of sentences holding
    one) of an IOB2 CoNLL file, read line by line."""
    count, first, starts, start, prev = 0, None, [], None, "O"
    for n, line in enumerate(lines(path), 1):
        f = line.split()
        if not f or f[0] == "-DOCSTART-":
            start, prev = None, "O"
            continue
        start = start or n
        tag = f[-1]
        if tag.endswith("-MISC"):
            first = first or n
            if starts[-1:] != [start]:
                starts.append(start)
            if tag.startswith("B-") or prev[2:] != "MISC":
                count += 1
        prev = tag
    return count, first, starts


def conll(root, out, *extra):
    return preprocess("conll", "--out", out, "--train", root / "train.txt", "--valid",
                      root / "valid.txt", "--test", root / "test.txt", *extra)


def test_conll_type_only_in_valid_test_is_read_as_o_and_counted(conll_no_misc, tmp_path):
    out = tmp_path / "bin"
    proc = conll(conll_no_misc, out)
    assert proc.returncode == 0, proc.stdout
    n_valid, _, _ = misc_in(conll_no_misc / "valid.txt")
    n_test, _, _ = misc_in(conll_no_misc / "test.txt")
    assert n_valid > 0 and n_test > 0
    assert (f"{conll_no_misc / 'test.txt'}: entity types the training split does not have: "
            f"MISC ({n_test} entities); their tags read as O" in proc.stdout), proc.stdout
    assert f"{n_test} MISC entities not in train" in proc.stdout
    record = json.loads((out / "provenance.json").read_text())["labels"]
    assert record["types"] == ["LOC", "ORG", "PER"] and record["unknown_labels"] == "map-to-o"
    assert record["stats"]["valid"]["unseen_types"] == {"MISC": n_valid}
    assert record["stats"]["test"]["unseen_types"] == {"MISC": n_test}
    assert record["stats"]["train"]["unseen_types"] == {}
    assert lines(out / "label" / "tags.txt") == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    # The other tags are untouched: gold tags with MISC as O.
    from span_plugin.formats.conll import read_conll

    gold = [t if "MISC" not in t else "O" for s in read_conll(str(conll_no_misc / "test.txt")).sentences
            for t in s.tags]
    assert " ".join(lines(out / "raw" / "test.label")).split() == gold
    run_cli("span-preprocess", "check", out)


def test_conll_type_only_in_test_refused_by_flag(conll_no_misc, tmp_path):
    proc = conll(conll_no_misc, tmp_path / "bin", "--unknown-labels", "error")
    _, line, _ = misc_in(conll_no_misc / "valid.txt")
    assert proc.returncode == 2
    assert (f"{conll_no_misc / 'valid.txt'}:{line}: entity type 'MISC'" in proc.stdout
            and f"({conll_no_misc / 'train.txt'} has ['LOC', 'ORG', 'PER'])" in proc.stdout), proc.stdout


def test_conll_skip_drops_the_sentences_and_the_prediction_file_follows(conll_no_misc, tmp_path):
    out = tmp_path / "bin"
    proc = conll(conll_no_misc, out, "--unknown-labels", "skip")
    assert proc.returncode == 0, proc.stdout
    test = conll_no_misc / "test.txt"
    _, _, starts = misc_in(test)
    rows = dropped(out)
    assert [(s, ln) for s, f, ln, _ in rows if f == str(test)] == [("test", str(n)) for n in starts]
    assert all(why.startswith("entity type(s) ['MISC'] not in the training split") for *_, why in rows)
    stats = json.loads((out / "provenance.json").read_text())["labels"]["stats"]["test"]
    assert stats["dropped_sentences"] == len(starts) and stats["items"] == 30 - len(starts)
    assert not any("MISC" in x for x in lines(out / "raw" / "test.label"))
    run_cli("span-preprocess", "check", out)

    # span-predict's CoNLL writer leaves the same sentences out of its file.
    from span_plugin.portable.conll_files import read_items, write_conll

    words, gold, source = read_items(out, "test")
    written = tmp_path / "test.conll"
    assert write_conll(test, written, source, gold) == sum(map(len, words))
    # The source without the left-out sentences (and their blank lines), each word line
    # with its tag appended (the gold tags, passed as predictions here).
    expected, skipping = [], False
    for n, line in enumerate(lines(test), 1):
        skipping = skipping or n in starts
        if skipping:
            skipping = bool(line.strip())
            continue
        f = line.split()
        expected.append(f"{line} {f[-1]}" if f and f[0] != "-DOCSTART-" else line)
    assert lines(written) == expected
    assert not any("MISC" in line for line in expected)


def test_conll_empty_train_is_an_error(tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("-DOCSTART- -X- -X- O\n\n")
    (tmp_path / "valid.txt").write_text(conll_sentences(CONLL / "valid.txt", 3))
    proc = preprocess("conll", "--out", tmp_path / "bin", "--train", train, "--valid",
                      tmp_path / "valid.txt")
    assert proc.returncode == 2 and f"{train}: no sentences" in proc.stdout, proc.stdout


# ----------------------------------------------------------------------------------
# NER metric modes against seqeval


def random_tags(rng, n, kinds=("PER", "LOC", "ORG")):
    """Tags drawn freely: ill-formed sequences (I- after O, I- of another type) often."""
    return [rng.choice(["O", "O", "B-" + rng.choice(kinds), "I-" + rng.choice(kinds)])
            for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_both_metric_modes_equal_seqeval_on_random_sequences(seed):
    metrics = pytest.importorskip("seqeval.metrics")
    from seqeval.scheme import IOB2, Entities

    rng = random.Random(seed)
    gold = [random_tags(rng, rng.randint(0, 14)) for _ in range(400)]
    pred = [random_tags(rng, len(g)) for g in gold]
    # free gold against free predictions, and well-formed gold (as folders store it)
    fixed = [T.tags_of(T.entities(g), len(g)) for g in gold]
    for g_seqs in (gold, fixed):
        for mode, kw in (("default", {}), ("strict", {"mode": "strict", "scheme": IOB2})):
            counts = ner.match_counts([ner.entities_of(p, mode) for p in pred],
                                      [ner.entities_of(g, mode) for g in g_seqs])
            ours = ner.prf(*counts)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                theirs = (metrics.precision_score(g_seqs, pred, **kw),
                          metrics.recall_score(g_seqs, pred, **kw),
                          metrics.f1_score(g_seqs, pred, **kw))
            assert ours == pytest.approx(theirs, abs=1e-9), (mode, ours, theirs)
    # The strict entities themselves are seqeval's.
    for seq in pred[:200]:
        want = sorted((e.start, e.end, e.tag) for e in Entities([seq], IOB2).entities[0])
        assert sorted(ner.strict_entities(seq)) == want, seq


def test_modes_differ_on_ill_formed_predictions():
    seq = ["I-PER", "I-PER", "O", "B-LOC", "I-ORG", "B-ORG", "I-ORG", "I-LOC"]
    assert ner.entities_of(seq, "default") == [(0, 2, "PER"), (3, 4, "LOC"), (4, 5, "ORG"),
                                               (5, 7, "ORG"), (7, 8, "LOC")]
    assert ner.entities_of(seq, "strict") == [(3, 4, "LOC"), (5, 7, "ORG")]
    with pytest.raises(ValueError, match="metric mode 'lenient'"):
        ner.entities_of(seq, "lenient")


def _criterion(mode):
    from span_plugin.criterions.ner import SpanTaggingCriterion

    cfg = types.SimpleNamespace(metric_mode=mode) if mode else types.SimpleNamespace()
    task = types.SimpleNamespace(cfg=cfg, tag_names=["O", "B-PER", "I-PER"])
    return SpanTaggingCriterion(types.SimpleNamespace(classification_head_name="h"), task)


class _Logits(torch.nn.Module):
    """A model that outputs fixed tag logits (one token per word)."""

    def __init__(self, tag_ids):
        super().__init__()
        self.logits = torch.nn.functional.one_hot(torch.tensor([tag_ids]), 3).float() * 5

    def forward(self, **kw):
        return self.logits, None


@pytest.mark.parametrize("mode, expected", [(None, (2, 2, 2)), ("default", (2, 2, 2)),
                                            ("strict", (1, 1, 2))])
def test_criterion_reads_the_tasks_metric_mode(mode, expected):
    """Predicted I-PER I-PER O B-PER, gold B-PER I-PER O B-PER: the default mode reads
    the ill-formed I-PER I-PER as the gold entity, the strict mode as none."""
    model = _Logits([2, 2, 0, 1]).eval()
    words = torch.tensor([[[0, 1], [1, 2], [2, 3], [3, 4]]])
    sample = {"net_input": {"src_tokens": torch.zeros(1, 4, dtype=torch.long), "words": words},
              "target": torch.tensor([[1, 2, 0, 1]]), "ntokens": 4}
    _, _, log = _criterion(mode)(model, sample)
    assert (log["_ent_tp"], log["_ent_pred"], log["_ent_gold"]) == expected


def test_metric_mode_is_a_flag_of_both_tasks():
    import argparse

    from fairseq.dataclass.utils import gen_parser_from_dataclass

    from span_plugin.tasks.span_tagging import SpanLabelingConfig, SpanTaggingConfig

    for config in (SpanTaggingConfig, SpanLabelingConfig):
        parser = argparse.ArgumentParser()
        gen_parser_from_dataclass(parser, config())
        assert parser.parse_args(["x"]).metric_mode == "default"
        assert parser.parse_args(["x", "--metric-mode", "strict"]).metric_mode == "strict"
        with pytest.raises(SystemExit):
            parser.parse_args(["x", "--metric-mode", "lenient"])

