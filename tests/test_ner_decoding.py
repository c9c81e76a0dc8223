"""NER decoding: the IOB2-constrained Viterbi of the tagging heads and the nested span
output of span labeling, against brute-force references written here; the task flag,
the criterion, the hub and span-predict on tiny models trained by fairseq-train."""

import itertools
import json
import logging
import math
import re
import sys

import pytest
import torch

from conftest import DATA, GPT2_BPE, TINY_ROBERTA, USER_DIR, conll_sentences
from span_plugin.formats import tags as T
from span_plugin.modules import entities as ner
from span_plugin.modules.span_decoding import nested_spans
from span_plugin.modules.tag_decoding import decode_tags, iob2_constraints, viterbi_tags
from span_plugin.modules.tagging_heads import enumerate_word_spans


def conll_tag_names():
    """The tag inventory span-preprocess conll builds from real CoNLL-2003 train tags."""
    kinds = set()
    for line in open(DATA / "conll2003" / "train.txt", encoding="utf-8"):
        fields = line.split()
        if fields and fields[0] != "-DOCSTART-" and fields[-1] != "O":
            kinds.add(fields[-1][2:])
    return T.tag_names(kinds)


def well_formed(tags):
    """IOB2 with no repair needed (the converter of the preprocessing, not the decoder's
    constraint matrix)."""
    try:
        T.to_iob2(tags, "iob2", repair=False)
        return True
    except T.TagError:
        return False


# ---- IOB2-constrained Viterbi --------------------------------------------------------


def test_constraints_are_iob2s_rules():
    names = conll_tag_names()
    assert names == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    allowed, first = iob2_constraints(names)
    for a, b in itertools.product(range(len(names)), repeat=2):
        # b may follow a when some well-formed sentence has a then b (a after one tag
        # at most: that opens any entity a may continue).
        reachable = any(well_formed(prefix + [names[a], names[b]])
                        for prefix in [[]] + [[p] for p in names])
        assert bool(allowed[a, b]) == reachable, (names[a], names[b])
    assert first.tolist() == [well_formed([n]) for n in names]
    with pytest.raises(ValueError, match=r"tag 1 'S-PER': not an IOB2 tag"):
        iob2_constraints(["O", "S-PER"])


def brute_force_viterbi(scores, names):
    """The best well-formed sequence of ``scores [n, C]`` by enumerating all C^n."""
    best, best_seq = -math.inf, None
    for seq in itertools.product(range(len(names)), repeat=scores.shape[0]):
        if not well_formed([names[i] for i in seq]):
            continue
        total = sum(float(scores[t, c]) for t, c in enumerate(seq))
        if total > best:
            best, best_seq = total, list(seq)
    return best, best_seq


@pytest.mark.parametrize("seed", range(3))
def test_viterbi_equals_brute_force(seed):
    names = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER", "B-ORG", "I-ORG"]
    gen = torch.Generator().manual_seed(seed)
    batch, num_words = 8, 5
    # Sharp random distributions: the argmax is often ill-formed, so the constraint acts.
    scores = torch.log_softmax(3 * torch.randn(batch, num_words, len(names), generator=gen,
                                               dtype=torch.float64), -1)
    lengths = torch.tensor([5, 4, 1, 3, 5, 2, 0, 5])
    decoded = viterbi_tags(scores, lengths, *iob2_constraints(names))
    changed = 0
    for b in range(batch):
        n = int(lengths[b])
        assert (decoded[b, n:] == -1).all()
        got = decoded[b, :n].tolist()
        if n == 0:
            assert got == []
            continue
        best, want = brute_force_viterbi(scores[b, :n], names)
        assert got == want, (b, got, want)
        assert sum(float(scores[b, t, c]) for t, c in enumerate(got)) == pytest.approx(best, abs=1e-12)
        changed += got != scores[b, :n].argmax(-1).tolist()
    assert changed > 0  # some argmax sequences were ill-formed and got repaired by search


def test_viterbi_output_is_always_well_formed_and_keeps_well_formed_argmax():
    names = conll_tag_names()
    gen = torch.Generator().manual_seed(7)
    batch, num_words = 64, 30
    scores = torch.log_softmax(2 * torch.randn(batch, num_words, len(names), generator=gen), -1)
    lengths = torch.randint(0, num_words + 1, (batch,), generator=gen)
    viterbi = decode_tags(scores, lengths, names, "viterbi").tolist()
    argmax = decode_tags(scores, lengths, names, "argmax").tolist()
    ill_formed = 0
    for b in range(batch):
        n = int(lengths[b])
        seq = [names[i] for i in viterbi[b][:n]]
        assert well_formed(seq), seq
        # Well-formed output: both metric modes read the same entities.
        assert ner.entities_of(seq, "strict") == ner.entities_of(seq, "default")
        arg = [names[i] for i in argmax[b][:n]]
        if well_formed(arg):  # nothing to repair: the search returns the argmax itself
            assert seq == arg
        else:
            ill_formed += 1
        assert viterbi[b][n:] == argmax[b][n:] == [-1] * (num_words - n)
    assert ill_formed > 0
    with pytest.raises(ValueError, match="token decoding 'beam'"):
        decode_tags(scores, lengths, names, "beam")


def test_tagging_entities_read_first_subtokens_and_decode():
    """Words of several sub-tokens are read at their first; fp16 logits decode as float."""
    names = ["O", "B-PER", "I-PER"]
    # Tokens: <s> w0 w0' w1 w2 w2' w3 </s>; per-word argmax I-PER I-PER O B-PER (ill-formed).
    words = torch.tensor([[[1, 3], [3, 4], [4, 6], [6, 7]], [[1, 2], [0, 0], [0, 0], [0, 0]]])
    token_tags = torch.tensor([[0, 2, 1, 2, 0, 1, 1, 0], [0, 2, 0, 0, 0, 0, 0, 0]])
    logits = torch.nn.functional.one_hot(token_tags, 3) * 5.0
    logits[1, 1, 1] = 2.0  # the lone I-PER word: B-PER second best (O third)
    logits = logits.half()
    tags, ents = ner.tagging_entities(logits, words, names, "strict", "argmax")
    assert tags == [["I-PER", "I-PER", "O", "B-PER"], ["I-PER"]]
    assert ents == [[(3, 4, "PER")], []]
    tags, ents = ner.tagging_entities(logits, words, names, "strict", "viterbi")
    assert tags == [["B-PER", "I-PER", "O", "B-PER"], ["B-PER"]]
    assert ents == [[(0, 2, "PER"), (3, 4, "PER")], [(0, 1, "PER")]]


def test_token_decoding_is_a_flag_of_the_tagging_task():
    import argparse

    from fairseq.dataclass.utils import gen_parser_from_dataclass

    from span_plugin.tasks.span_tagging import SpanTaggingConfig

    parser = argparse.ArgumentParser()
    gen_parser_from_dataclass(parser, SpanTaggingConfig())
    assert parser.parse_args(["x"]).token_decoding == "viterbi"
    assert parser.parse_args(["x", "--token-decoding", "argmax"]).token_decoding == "argmax"
    with pytest.raises(SystemExit):
        parser.parse_args(["x", "--token-decoding", "crf"])


class _Logits(torch.nn.Module):
    """A model that outputs fixed tag logits (one token per word)."""

    def __init__(self, tag_ids):
        super().__init__()
        self.logits = torch.nn.functional.one_hot(torch.tensor([tag_ids]), 3).float() * 5

    def forward(self, **kw):
        return self.logits, None


@pytest.mark.parametrize("decoding, mode, expected", [
    (None, "strict", (1, 1, 2)),  # a config without the field: argmax, as before it
    ("argmax", "strict", (1, 1, 2)), ("argmax", "default", (2, 2, 2)),
    ("viterbi", "strict", (2, 2, 2)), ("viterbi", "default", (2, 2, 2))])
def test_criterion_reads_the_tasks_token_decoding(decoding, mode, expected):
    """Per-word argmax I-PER I-PER O B-PER, gold B-PER I-PER O B-PER: Viterbi turns the
    ill-formed start into B-PER, so the strict mode finds both entities too."""
    import types

    from span_plugin.criterions.ner import SpanTaggingCriterion

    cfg = types.SimpleNamespace(metric_mode=mode)
    if decoding:
        cfg.token_decoding = decoding
    task = types.SimpleNamespace(cfg=cfg, tag_names=["O", "B-PER", "I-PER"])
    criterion = SpanTaggingCriterion(types.SimpleNamespace(classification_head_name="h"), task)
    words = torch.tensor([[[0, 1], [1, 2], [2, 3], [3, 4]]])
    sample = {"net_input": {"src_tokens": torch.zeros(1, 4, dtype=torch.long), "words": words},
              "target": torch.tensor([[1, 2, 0, 1]]), "ntokens": 4}
    _, _, log = criterion(_Logits([2, 2, 0, 1]).eval(), sample)
    assert (log["_ent_tp"], log["_ent_pred"], log["_ent_gold"]) == expected


# ---- nested span output --------------------------------------------------------------


def crosses(a, b):
    """Two (start, end) spans overlap and neither contains the other."""
    return a[0] < b[0] < a[1] < b[1] or b[0] < a[0] < b[1] < a[1]


def reference_nested(score, valid, min_score):
    """The nested rule with plain loops: candidates at or above ``min_score`` in order of
    decreasing score (then start, then width), each kept unless it crosses a kept one."""
    num_words, max_words = score.shape
    cands = sorted(((-float(score[i, w]), i, w) for i in range(num_words)
                    for w in range(max_words) if valid[i, w] and float(score[i, w]) >= min_score))
    kept = []
    for _, i, w in cands:
        if not any(crosses((i, i + w + 1), (j, j + v + 1)) for j, v in kept):
            kept.append((i, w))
    return set(kept)


def random_candidates(gen, batch=6, num_words=7, max_words=4):
    lengths = torch.randint(1, num_words + 1, (batch,), generator=gen)
    words = torch.stack([torch.tensor([[k + 1, k + 2] if k < n else [0, 0] for k in range(num_words)])
                         for n in lengths.tolist()])
    _, valid = enumerate_word_spans(words, max_words)
    return valid


@pytest.mark.parametrize("seed", range(3))
def test_nested_equals_the_reference_and_is_laminar(seed):
    gen = torch.Generator().manual_seed(seed)
    valid = random_candidates(gen)
    score = torch.log(torch.rand(valid.shape, generator=gen, dtype=torch.float64))
    min_score = math.log(0.3)
    chosen = nested_spans(score, valid, min_score)
    nested_pairs = 0
    for b in range(valid.size(0)):
        got = {(i, w) for i, w in chosen[b].nonzero().tolist()}
        assert got == reference_nested(score[b], valid[b], min_score)
        spans = [(i, i + w + 1) for i, w in got]
        assert not any(crosses(x, y) for x, y in itertools.combinations(spans, 2))
        nested_pairs += sum(x[0] <= y[0] and y[1] <= x[1] or y[0] <= x[0] and x[1] <= y[1]
                            for x, y in itertools.combinations(spans, 2))
        # Every dropped candidate above the threshold crosses a better kept one.
        for i, w in (valid[b] & (score[b] >= min_score)).nonzero().tolist():
            if (i, w) not in got:
                assert any(crosses((i, i + w + 1), (j, j + v + 1))
                           and score[b, j, v] >= score[b, i, w] for j, v in got)
    assert nested_pairs > 0  # the output does nest


def test_nested_threshold_behaviour():
    gen = torch.Generator().manual_seed(11)
    valid = random_candidates(gen, batch=8)
    score = torch.log(torch.rand(valid.shape, generator=gen))
    previous = None
    for threshold in (0.1, 0.3, 0.5, 0.8, 0.95):
        chosen = nested_spans(score, valid, math.log(threshold))
        assert not (chosen & (score < math.log(threshold))).any()
        if previous is not None:
            # A higher threshold keeps exactly the lower one's output above it: a kept
            # span's fate depends only on better-scored candidates.
            assert torch.equal(chosen, previous & (score >= math.log(threshold)))
        previous = chosen
    # Candidates that pairwise never cross are all kept when above the threshold.
    words = torch.tensor([[[1, 2], [2, 3], [3, 4]]])
    _, valid3 = enumerate_word_spans(words, 1)  # single words: disjoint
    s = torch.log(torch.tensor([[[0.9], [0.2], [0.6]]]))
    assert nested_spans(s, valid3, math.log(0.5)).view(-1).tolist() == [True, False, True]
    assert not nested_spans(s, valid3 & False, math.log(0.1)).any()


def softmax(row):
    m = max(row)
    exps = [math.exp(x - m) for x in row]
    return [e / sum(exps) for e in exps]


def test_labeling_entities_nested_against_probabilities():
    """labeling_entities(overlap="nested"): every span whose best type has probability
    >= threshold, by a plain softmax here, less crossing ones; flat is unchanged."""
    gen = torch.Generator().manual_seed(5)
    valid = random_candidates(gen, batch=5, num_words=6, max_words=3)
    logits = 2 * torch.randn(*valid.shape, 4, generator=gen)
    types = ["LOC", "ORG", "PER"]
    threshold = 0.4
    got = ner.labeling_entities(logits, valid, types, "nested", threshold)
    for b in range(valid.size(0)):
        score = torch.full(valid.shape[1:], -math.inf, dtype=torch.float64)
        kind = {}
        for i, w in valid[b].nonzero().tolist():
            probs = softmax(logits[b, i, w].tolist())
            k = max(range(1, 4), key=lambda c: probs[c])
            score[i, w], kind[i, w] = math.log(probs[k]), types[k - 1]
        want = sorted((i, i + w + 1, kind[i, w]) for i, w in
                      reference_nested(score, valid[b], math.log(threshold)))
        assert got[b] == want
    assert ner.labeling_entities(logits, valid, types) == ner.labeling_entities(
        logits, valid, types, "flat")
    default = ner.labeling_entities(logits, valid, types, "nested")
    assert default == ner.labeling_entities(logits, valid, types, "nested", ner.DEFAULT_SPAN_THRESHOLD)
    for overlap, threshold, message in (("flat", 0.5, "applies to overlap 'nested' only"),
                                        ("nested", 0.0, r"expected a probability in \(0, 1\]"),
                                        ("nested", 1.5, r"expected a probability in \(0, 1\]"),
                                        ("stacked", None, "overlap 'stacked'")):
        with pytest.raises(ValueError, match=message):
            ner.labeling_entities(logits, valid, types, overlap, threshold)


# ---- end to end: fairseq-train, the hub and span-predict -------------------------------


@pytest.fixture(scope="module")
def conll_folder(tmp_path_factory):
    """Real CoNLL-2003 sentences (40 train, 16 valid) and their tagging folder."""
    from span_plugin.preprocess.folders.conll import prepare_conll
    from span_plugin.preprocess.folders.options import FolderOptions
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec

    root = tmp_path_factory.mktemp("conll_decoding")
    files = {}
    for split, n in (("train", 40), ("valid", 16)):
        files[split] = root / f"{split}.txt"
        files[split].write_text(conll_sentences(DATA / "conll2003" / f"{split}.txt", n))
    spec = EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
    prepare_conll(root / "bin", {k: str(v) for k, v in files.items()},
                  FolderOptions(spec, str(GPT2_BPE / "dict.txt"), name="conll2003"))
    return root / "bin"


def train(folder, save_dir, monkeypatch, caplog, *task_args):
    """fairseq-train's own entry point, in this process: 3 updates of a tiny model; the
    last validation's logged f1."""
    import fairseq_cli.train

    task = task_args[0]
    argv = [folder, "--user-dir", USER_DIR, "--task", task, "--criterion", task,
            "--arch", "roberta_tagging", *TINY_ROBERTA, *task_args[1:], "--init-token", "0",
            "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--max-update", "3",
            "--cpu", "--num-workers", "0", "--seed", "1", "--save-dir", save_dir,
            "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "1",
            "--no-progress-bar", "--best-checkpoint-metric", "f1",
            "--maximize-best-checkpoint-metric"]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        monkeypatch.setattr(sys, "argv", ["fairseq-train", *map(str, argv)])
        fairseq_cli.train.cli_main()
    valid = [r.getMessage() for r in caplog.records if "valid on 'valid' subset" in r.getMessage()]
    assert valid, caplog.text[-3000:]
    return float(re.search(r"\| f1 ([\d.]+)", valid[-1]).group(1))


def predict(*args):
    """span-predict in this process; the logger levels it sets for a command are put
    back for the tests that follow."""
    from span_plugin.cli.predict import main

    saved = {name: logging.getLogger(name).level for name in ("", "fairseq")}
    try:
        return main([str(a) for a in args])
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


@pytest.mark.slow
@pytest.mark.smoke
def test_token_head_viterbi_through_criterion_hub_and_span_predict(conll_folder, tmp_path,
                                                                    monkeypatch, caplog, capsys):
    from span_plugin.portable.conll_files import read_items

    logged_f1 = train(conll_folder, tmp_path / "ckpt", monkeypatch, caplog,
                      "span_tagging", "--tagging-head", "token")
    checkpoint = tmp_path / "ckpt" / "checkpoint_last.pt"
    out = {}
    for decoding in (None, "argmax", "viterbi"):
        results = tmp_path / f"results-{decoding}.json"
        conll = tmp_path / f"valid-{decoding}.conll"
        extra = ["--token-decoding", decoding] if decoding else []
        assert predict("--checkpoint", checkpoint, "--results", results, "--conll-out", conll,
                       *extra) == 0
        out[decoding] = json.loads(results.read_text())
        pred = [line.split()[-1] for line in conll.read_text().splitlines()
                if line.split() and line.split()[0] != "-DOCSTART-"]
        out[decoding]["tags"] = pred
    # Trained with the default, the checkpoint decodes with viterbi; the criterion's
    # validation F1 (same items, same decoding) is span-predict's.
    assert out[None]["decoding"] == out["viterbi"]["decoding"] == {"token_decoding": "viterbi"}
    assert out["argmax"]["decoding"] == {"token_decoding": "argmax"}
    assert out[None]["dev"] == out["viterbi"]["dev"]
    assert out["viterbi"]["dev"]["valid"]["f1"] == pytest.approx(logged_f1, abs=0.01)
    assert "token decoding viterbi" in capsys.readouterr().out
    # The viterbi column is well-formed sentence by sentence.
    words, _, _ = read_items(conll_folder, "valid")
    k = 0
    for w in words:
        assert well_formed(out["viterbi"]["tags"][k:k + len(w)])
        k += len(w)

    from span_plugin.hub import SpanHubInterface

    hub = SpanHubInterface.from_pretrained(checkpoint)
    assert hub.token_decoding == "viterbi"
    assert hub.predict_words(words[:4]) == hub.predict_words(words[:4], token_decoding="viterbi")
    text = "EU rejects German call to boycott British lamb ."
    assert hub.predict_entities(text) == hub.predict_entities(text, token_decoding="viterbi")
    with pytest.raises(ValueError, match="--overlap and --span-threshold apply to span_labeling"):
        hub.predict_words(words[:1], overlap="nested")
    assert predict("--checkpoint", checkpoint, "--span-threshold", "0.3") == 2
    assert "apply to span_labeling checkpoints" in capsys.readouterr().err


@pytest.mark.slow
def test_span_head_nested_output_through_hub_and_span_predict(conll_folder, tmp_path,
                                                              monkeypatch, caplog, capsys):
    train(conll_folder, tmp_path / "ckpt", monkeypatch, caplog, "span_labeling",
          "--max-span-words", "4")
    checkpoint = tmp_path / "ckpt" / "checkpoint_last.pt"
    from span_plugin.portable.conll_files import read_items
    from span_plugin.hub import SpanHubInterface

    hub = SpanHubInterface.from_pretrained(checkpoint)
    words, gold, source = read_items(conll_folder, "valid")
    # A tiny model trained 3 updates is unsure: a low threshold gives many, nested spans.
    threshold = 0.05
    nested = hub.predict_words(words, overlap="nested", span_threshold=threshold)
    flat = hub.predict_words(words)
    assert flat == hub.predict_words(words, overlap="flat")
    assert sum(map(len, nested)) > sum(map(len, flat))
    assert any(a[0] <= b[0] and b[1] <= a[1] for ents in nested
               for a, b in itertools.permutations(ents, 2))
    for ents in nested:
        assert not any(crosses(a[:2], b[:2]) for a, b in itertools.combinations(ents, 2))

    spans_out = tmp_path / "valid.jsonl"
    results = tmp_path / "results.json"
    assert predict("--checkpoint", checkpoint, "--overlap", "nested", "--span-threshold",
                   threshold, "--spans-out", spans_out, "--results", results) == 0
    rows = [json.loads(line) for line in spans_out.read_text().splitlines()]
    assert len(rows) == len(words)
    for k, row in enumerate(rows):
        assert row["item"] == k and row["words"] == words[k] and row["line"] == source[k][0]
        assert [(e["start"], e["end"], e["type"]) for e in row["entities"]] == sorted(nested[k])
        assert [(e["start"], e["end"], e["type"]) for e in row["gold"]] == T.entities(gold[k])
        assert all(e["text"] == " ".join(words[k][e["start"]:e["end"]]) for e in row["entities"])
    record = json.loads(results.read_text())
    assert record["decoding"] == {"overlap": "nested", "span_threshold": threshold}
    tp, n_pred, n_gold = ner.match_counts(nested, [T.entities(g) for g in gold])
    assert record["dev"]["valid"]["f1"] == round(100 * ner.prf(tp, n_pred, n_gold)[2], 2)
    assert "scored against the folder's flat gold" in capsys.readouterr().out

    # Nested output has no CoNLL form; a tagging flag is refused; the threshold is checked.
    for args, message in (
            (["--overlap", "nested", "--conll-out", tmp_path / "x.conll"], "cannot represent nested"),
            (["--token-decoding", "argmax"], "applies to span_tagging checkpoints"),
            (["--span-threshold", "0.5"], "applies to overlap 'nested' only"),
            (["--overlap", "nested", "--span-threshold", "2"], r"probability in \(0, 1\]"),
            (["--split", "valid", "--spans-out", "a.jsonl", "b.jsonl"], "give one --spans-out per --split")):
        assert predict("--checkpoint", checkpoint, *args) == 2
        assert re.search(message, capsys.readouterr().err), args
