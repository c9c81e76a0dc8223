"""Span-pair data: JSON Lines phrase pairs -> token offsets -> the same phrase text, on
real MRPC rows, for GPT-2 BPE and WordPiece (the converted MiniLM); bad ranges; the
weak aligner on real MRPC training pairs."""

import json
import random
import re
import time

import numpy as np
import pytest
from fairseq.data import Dictionary, indexed_dataset

from conftest import GLUE, GPT2_BPE
from span_plugin.data import span_index
from span_plugin.preprocess.folders.align import AlignSettings, align_file
from span_plugin.preprocess.folders.options import FolderOptions
from span_plugin.files.errors import BadInputError
from span_plugin.preprocess.segmentation.encoding import EncoderSpec
from span_plugin.preprocess.folders.pairs import (
    PHRASE_LABEL_DIR,
    phrase_prefix,
    prepare_pairs,
    read_pairs,
)

LABELS = ("paraphrase", "random", "in-paraphrase")


def gpt2_spec():
    return EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"))


def mrpc_rows(n):
    lines = (GLUE / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines()[1:n + 1]
    return [(f[3], f[4], f[0]) for f in (line.split("\t") for line in lines)]


def word_ranges(text):
    """Character ranges of the whitespace-separated words of ``text`` (MRPC is
    tokenized with spaces, so each is a token boundary for every encoder)."""
    return [m.span() for m in re.finditer(r"\S+", text)]


def _make_jsonl(path, rows, seed=0):
    """Real rows with random phrase pairs of 1-4 words on each side; returns the
    expected phrase texts, one (source, target, label) list per row."""
    rng = random.Random(seed)
    expected = []
    with open(path, "w", encoding="utf-8") as f:
        for a, b, y in rows:
            phrases, texts = [], []
            wa, wb = word_ranges(a), word_ranges(b)
            for _ in range(rng.randint(0, 5)):  # rows without pairs too
                ranges = []
                for words in (wa, wb):
                    i = rng.randrange(len(words))
                    j = min(len(words), i + rng.randint(1, 4))
                    ranges.append([words[i][0], words[j - 1][1]])
                label = rng.choice(LABELS)
                phrases.append({"source": ranges[0], "target": ranges[1], "label": label})
                texts.append((a[slice(*ranges[0])], b[slice(*ranges[1])], label))
            f.write(json.dumps({"sentence1": a, "sentence2": b, "label": y,
                                "phrases": phrases}) + "\n")
            expected.append(texts)
    return expected


def _squash(text):
    return re.sub(r"\s+", "", text).lower()


def _read_back(folder, split, k, row, dictionary):
    prefix = str(folder / f"input{k}" / split)
    tokens = indexed_dataset.MMapIndexedDataset(prefix)[row].tolist()[:-1]  # </s> off
    spans = span_index.load_spans(phrase_prefix(prefix))[row].tolist()
    return [dictionary[t] for t in tokens], list(zip(spans[0::2], spans[1::2]))


@pytest.mark.parametrize("encoder", ["gpt2", "wordpiece"])
def test_round_trip_real_mrpc(tmp_path, encoder, request):
    """ranges -> token offsets in the folder's files -> decoded tokens = phrase text."""
    if encoder == "gpt2":
        spec, srcdict = gpt2_spec(), GPT2_BPE / "dict.txt"
    else:
        minilm = request.getfixturevalue("converted_minilm")
        spec = EncoderSpec(bpe="wordpiece", wordpiece=str(minilm))
        srcdict = minilm / "dict.txt"
    rows = mrpc_rows(60)
    src = tmp_path / "train.jsonl"
    expected = _make_jsonl(src, rows)
    out = tmp_path / "folder"
    counts, pairs = prepare_pairs(out, {"train": str(src)}, FolderOptions(spec, str(srcdict)),
                                  label_column="label", positive="1")
    assert counts == {"train": 60}
    assert pairs["train"] == sum(len(e) for e in expected) > 100
    enc = spec.build()
    dictionary = Dictionary.load(str(srcdict))
    labels = indexed_dataset.MMapIndexedDataset(str(out / PHRASE_LABEL_DIR / "train"))
    for row, texts in enumerate(expected):
        sides = [_read_back(out, "train", k, row, dictionary) for k in range(2)]
        assert labels[row].tolist() == [LABELS.index(y) for _, _, y in texts]
        for j, (source, target, _) in enumerate(texts):
            for (tokens, spans), want in zip(sides, (source, target)):
                s, e = spans[j]
                got = enc.decode(tokens[s:e])
                if encoder == "gpt2":
                    assert got.strip() == want  # byte-level BPE: exact
                else:
                    assert _squash(got) == _squash(want)  # uncased, decode re-spaces


def _bad(tmp_path, obj, enc=None, **kw):
    path = tmp_path / "bad.jsonl"
    good = {"sentence1": "Amrozi accused his brother .", "sentence2": "He blamed him .",
            "phrases": []}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, **obj}) + "\n")
    with pytest.raises(BadInputError) as err:
        read_pairs(str(path), enc or gpt2_spec().build(), **kw)
    assert f"{path}:2:" in str(err.value)
    return str(err.value)


def pair(source, target=(0, 2), label="paraphrase"):
    return {"phrases": [{"source": list(source), "target": list(target), "label": label}]}


@pytest.mark.parametrize("source, why", [
    ((7, 7), "is empty"),
    ((9, 3), "is empty"),
    ((20, 40), "outside the sentence"),
    ((-1, 3), "outside the sentence"),
    ((0, 3), "ends inside token 1"),       # "Amr" of "Am|ro|zi"
    ((8, 14), "starts inside token"),       # "ccused"
])
def test_bad_ranges_name_file_and_line(tmp_path, source, why):
    msg = _bad(tmp_path, pair(source))
    assert why in msg and "phrase pair 0 source" in msg


def test_other_bad_rows(tmp_path):
    assert "not one of the declared phrase labels" in _bad(tmp_path, pair((0, 6), label="para"))
    assert "empty sentence" in _bad(tmp_path, {"sentence2": "", **pair((0, 6))})
    assert "no 'target'" in _bad(tmp_path, {"phrases": [{"source": [0, 6], "label": "random"}]})
    assert "expected a list" in _bad(tmp_path, {"phrases": {"source": [0, 6]}})


def test_leading_space_is_outside_the_token(tmp_path):
    """A range may take in the space before a word (GPT-2 puts it inside the token)."""
    path = tmp_path / "ok.jsonl"
    text = "Amrozi accused his brother ."
    path.write_text(json.dumps({"sentence1": "  " + text, "sentence2": text, "phrases": [
        {"source": [8, 17], "target": [6, 14], "label": "random"}]}) + "\n")
    rows = read_pairs(str(path), gpt2_spec().build())
    assert rows.inputs[0][0] == text  # stripped; ranges moved with it
    (s, t, y), = rows.phrases[0]
    assert s == t == (3, 4) and y == 1  # "accused" after Am|ro|zi, spaces around it ignored


def test_aligner_on_real_mrpc_is_fast_and_deterministic(tmp_path, capsys):
    mrpc = GLUE / "MRPC" / "train.tsv"
    start = time.perf_counter()
    stats = align_file(mrpc, tmp_path / "a.jsonl", AlignSettings(seed=3))
    assert time.perf_counter() - start < 20
    align_file(mrpc, tmp_path / "b.jsonl", AlignSettings(seed=3))
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    align_file(mrpc, tmp_path / "c.jsonl", AlignSettings(seed=4))
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "c.jsonl").read_bytes()
    report = stats.report()
    assert "identical" in report and "one word" in report and "pairs per" in report
    assert "identity rule" in report
    assert stats.paraphrase_rows == sum(1 for a, b, y in mrpc_rows(10_000) if y == "1")
    assert set(stats.classes) == set(LABELS)
    assert stats.identical == 0 and stats.classes["paraphrase"] > 2000  # gap positives only
    # Its output reads back through the span-pair reader, every range on tokens.
    lines = (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()
    (tmp_path / "head.jsonl").write_text("\n".join(lines[:150] + lines[-50:]) + "\n")
    rows = read_pairs(str(tmp_path / "head.jsonl"), gpt2_spec().build(), label_column="label")
    assert rows.rows == 200 and sum(map(len, rows.phrases)) > 200
    assert set(rows.labels) == {"0", "1"}


def test_round_trip_real_mrpc_sentencepiece(tmp_path):
    """The word-by-word encoders: a sentencepiece model trained here on real MRPC text."""
    spm = pytest.importorskip("sentencepiece")
    rows = mrpc_rows(400)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"{a}\n{b}\n" for a, b, _ in rows), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"),
                                   vocab_size=600, model_type="bpe", character_coverage=1.0,
                                   minloglevel=2)
    enc = EncoderSpec(bpe="sentencepiece", sentencepiece_model=str(tmp_path / "sp.model")).build()
    src = tmp_path / "train.jsonl"
    expected = _make_jsonl(src, rows[:60], seed=1)
    got = read_pairs(str(src), enc, label_column="label")
    for row, texts in enumerate(expected):
        tokens = [enc.encode(got.inputs[k][row])[0] for k in range(2)]
        assert len(got.phrases[row]) == len(texts)
        for (s, t, y), (source, target, label) in zip(got.phrases[row], texts):
            assert y == LABELS.index(label)
            assert _squash(enc.decode(tokens[0][s[0]:s[1]])) == _squash(source)
            assert _squash(enc.decode(tokens[1][t[0]:t[1]])) == _squash(target)


def _load_task(folder, *extra):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(folder), "--task", "span_pair_classification", "--criterion",
        "span_pair_classification", "--arch", "roberta_span_pair_base", "--num-classes", "2",
        "--init-token", "0", "--separator-token", "2", *extra])
    return tasks.setup_task(convert_namespace_to_omegaconf(args).task)


def test_task_layout_points_at_the_phrase_tokens(tmp_path):
    """Phrases shifted into <s> A </s> </s> B </s> select exactly the phrase's tokens;
    truncation leaves out the pairs whose target it cuts, keeps the others unchanged
    and counts the dropped ones."""
    spec = gpt2_spec()
    src = tmp_path / "train.jsonl"
    expected = _make_jsonl(src, mrpc_rows(30), seed=2)
    prepare_pairs(tmp_path / "f", {"train": str(src)}, FolderOptions(spec, str(GPT2_BPE / "dict.txt")),
                  label_column="label")
    full = _load_task(tmp_path / "f")
    full_ds = full.load_dataset("train")
    enc = spec.build()
    d = full.source_dictionary
    by_id = {}
    for i in range(len(full_ds)):
        item = full_ds[i]
        tokens = [d[t] for t in item["net_input.src_tokens"].tolist()]
        phrases = item["net_input.phrases"]
        want = expected[item["id"]]
        assert len(phrases) == len(want)
        for (s0, e0, s1, e1, y), (source, target, label) in zip(phrases.tolist(), want):
            assert enc.decode(tokens[s0:e0]).strip() == source
            assert enc.decode(tokens[s1:e1]).strip() == target
            assert y == LABELS.index(label)
        by_id[item["id"]] = phrases

    cut = _load_task(tmp_path / "f", "--shorten-method", "truncate", "--max-positions", "40")
    cut_ds = cut.load_dataset("train")
    kept = 0
    for i in range(len(cut_ds)):
        item = cut_ds[i]
        assert item["net_input.src_tokens"].numel() <= 40
        whole = by_id[item["id"]]
        assert item["net_input.phrases"].tolist() == whole[whole[:, 3] <= 40].tolist()
        kept += len(item["net_input.phrases"])
    total = sum(map(len, expected))
    assert 0 < cut.cut_pairs["train"] == total - kept


def test_load_check_names_file_and_line(tmp_path):
    """Phrase files that do not fit the token files: errors name the file and line."""
    from span_plugin.data.phrase_pairs import check_phrase_files
    from span_plugin.data.span_index import SpanAlignmentError

    src = tmp_path / "train.jsonl"
    expected = _make_jsonl(src, mrpc_rows(12), seed=3)
    out = tmp_path / "f"
    prepare_pairs(out, {"train": str(src)}, FolderOptions(gpt2_spec(), str(GPT2_BPE / "dict.txt")))
    prefixes = [phrase_prefix(str(out / f"input{k}" / "train")) for k in range(2)]
    labels = str(out / PHRASE_LABEL_DIR / "train")
    token_sets = [indexed_dataset.MMapIndexedDataset(str(out / f"input{k}" / "train"))
                  for k in range(2)]  # kept alive: sizes is a view of their mmap
    lengths = [np.array(t.sizes, dtype=np.int64) - 1 for t in token_sets]
    check_phrase_files(prefixes, labels, lengths, 3)  # fits
    with pytest.raises(SpanAlignmentError, match=r"input0/train.phrases.spans.bin: 12 items, "
                                                 r"but the token files have 11"):
        check_phrase_files(prefixes, labels, [lengths[0][:11], lengths[1][:11]], 3)
    row = next(i for i, e in enumerate(expected) if e)
    short = lengths[1].copy()
    short[row] = 0
    with pytest.raises(SpanAlignmentError, match=rf"input1/train.phrases.spans.bin: line {row + 1} "):
        check_phrase_files(prefixes, labels, [lengths[0], short], 3)
    used = max(LABELS.index(y) for e in expected for _, _, y in e)
    with pytest.raises(SpanAlignmentError, match=r"phrase label id"):
        check_phrase_files(prefixes, labels, lengths, used)


def test_aligner_drops_pairs_sharing_a_target_sentence(tmp_path):
    """STS-B's MSRpar genre comes from the MRPC corpus: transfer data made from STS-B
    train for an MRPC target must hold none of MRPC's dev or test sentences (case, spaces
    and punctuation ignored)."""
    import csv

    def sentences(path, columns):
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        return rows, {re.sub(r"[\W_]", "", r[c].lower()) for r in rows for c in columns}

    mrpc_cols = ("#1 String", "#2 String")
    _, banned = sentences(GLUE / "MRPC" / "dev.tsv", mrpc_cols)
    banned |= sentences(GLUE / "MRPC" / "test.tsv", mrpc_cols)[1]
    stsb, _ = sentences(GLUE / "STS-B" / "train.tsv", ())
    positives = [r for r in stsb if float(r["score"]) >= 4]
    leaking = [r for r in positives
               if {re.sub(r"[\W_]", "", r[c].lower()) for c in ("sentence1", "sentence2")} & banned]
    assert 100 < len(leaking) < len(positives) // 2  # the overlap is real, and partial

    out = tmp_path / "pairs.jsonl"
    stats = align_file(GLUE / "STS-B" / "train.tsv", out, AlignSettings(seed=1),
                       exclude=[GLUE / "MRPC" / "dev.tsv", GLUE / "MRPC" / "test.tsv"])
    kept = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert stats.excluded_rows == len(leaking)
    assert stats.paraphrase_rows == len(positives) - len(leaking)
    assert "dropped" in stats.report()
    for row in kept:
        for s in (row["sentence1"], row["sentence2"]):
            assert re.sub(r"[\W_]", "", s.lower()) not in banned, s

    with pytest.raises(BadInputError, match=r"pairs\.jsonl:1: no text column"):
        align_file(GLUE / "STS-B" / "train.tsv", tmp_path / "b.jsonl", exclude=[out])


def test_aligner_words_fit_the_encoder(tmp_path, converted_minilm):
    """Phrases end at word boundaries of the aligner's word scheme. GPT-2 words cut
    "100th" into "100" + "th" where WordPiece keeps one word ("100", "##th"): on real
    STS-B training pairs, GPT-2-word phrases hit such a cut and the WordPiece reader
    refuses them (naming the line), while BERT-word phrases all read back, each range
    decoding to its own text."""
    stsb = GLUE / "STS-B" / "train.tsv"
    wordpiece = EncoderSpec(bpe="wordpiece", wordpiece=str(converted_minilm)).build()
    align_file(stsb, tmp_path / "gpt2.jsonl", AlignSettings(seed=1, words="gpt2"))
    with pytest.raises(BadInputError, match=r"gpt2\.jsonl:\d+: phrase pair \d+ .* (starts|ends) inside token"):
        read_pairs(str(tmp_path / "gpt2.jsonl"), wordpiece, label_column="label")
    stats = align_file(stsb, tmp_path / "bert.jsonl", AlignSettings(seed=1, words="bert"))
    rows = read_pairs(str(tmp_path / "bert.jsonl"), wordpiece, label_column="label")
    assert rows.rows == stats.paraphrase_rows + stats.random_rows
    assert sum(map(len, rows.phrases)) == sum(stats.classes.values()) > 2000
    lines = (tmp_path / "bert.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines[:300]:
        row = json.loads(line)
        for p in row["phrases"]:
            for side, key in (("source", "sentence1"), ("target", "sentence2")):
                a, b = p[side]
                text = row[key][a:b]
                assert text == text.strip() and text, (row, p)


def test_phrase_pairs_past_the_truncation_are_named_not_dropped():
    """At prediction (hub and exported folder alike), a phrase pair whose target the
    truncation cuts is an error naming it: training left such pairs out, and a silently
    shorter result would misalign the answers with the pairs asked about."""
    import torch

    from span_plugin.modules.span_layout import place_phrase_pairs
    from span_plugin.portable.pairs import refuse_cut_pairs

    pairs = [[(0, 2), (0, 1)], [(1, 3), (4, 6)], [(2, 3), (1, 2)], [(0, 1), (5, 7)]]
    sides = [torch.tensor([o for p in pairs for o in p[k]]) for k in (0, 1)]
    starts = (1, 6)  # where each sentence's token ranges are placed in the laid-out pair
    item = place_phrase_pairs(sides[0], sides[1], torch.zeros(len(pairs), dtype=torch.long),
                              *starts, max_len=11)
    assert len(item) == 2
    with pytest.raises(ValueError, match=r"phrase pairs \[1, 3\] lie past the model's 11 positions"):
        refuse_cut_pairs(pairs, item, starts, 11)
    whole = place_phrase_pairs(sides[0], sides[1], torch.zeros(len(pairs), dtype=torch.long), *starts)
    refuse_cut_pairs(pairs, whole, starts, None)  # nothing cut: no error
