"""Extractive QA: windows, answer alignment, heads against plain references, decoding,
and the real fairseq-train / span-predict / hub path on real SQuAD rows."""

import json
import math
import random
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import DATA, TINY_ROBERTA, USER_DIR, minilm_dir, run_cli, run_main
from span_plugin.formats.squad import read_qa
from span_plugin.formats.squad_metrics import squad_scores
from span_plugin.modules.qa_decoding import cuts_word, decode_answers, word_boundaries
from span_plugin.modules.qa_heads import (BoundaryQAHead, SpanBoundaryQAHead, SpanQAHead,
                                          candidate_mask)
from span_plugin.preprocess.segmentation.encoding import make_encoder
from span_plugin.preprocess.folders.qa import encode_question, passage_windows, spans_in_window

SQUAD_DEV = DATA / "squad" / "dev-v1.1.json"


@pytest.fixture(scope="module")
def encoder():
    return make_encoder(bpe="wordpiece", wordpiece=str(minilm_dir()))


@pytest.fixture(scope="module")
def squad():
    return read_qa(SQUAD_DEV)


# -- windows and answers -------------------------------------------------------------


@pytest.mark.parametrize("n,q,positions,stride", [(0, 5, 64, 16), (40, 5, 64, 16),
                                                  (55, 5, 64, 16), (300, 11, 64, 20),
                                                  (1000, 30, 384, 128)])
def test_windows_cover_the_passage_with_the_stated_overlap(n, q, positions, stride):
    windows = passage_windows(n, q, positions, stride)
    budget = positions - q - 4
    assert windows[0][0] == 0 and windows[-1][1] == n
    for (a, b), (c, d) in zip(windows, windows[1:]):
        assert c == b - stride and d > b  # overlap exactly the stride, progress every step
    assert all(b - a <= budget for a, b in windows)
    assert all(b - a == budget for a, b in windows[:-1])


def test_a_question_that_leaves_no_room_is_an_error():
    with pytest.raises(ValueError, match="questions may have at most 43 tokens"):
        passage_windows(100, 50, 64, 16)


def test_answers_map_to_tokens_that_cover_them_on_real_squad(squad, encoder):
    inexact = 0
    for ex in squad.examples[:400]:
        enc = encode_question(encoder, ex.question, ex.context, ex.answers)
        for (text, start), (first, last) in zip(ex.answers, enc.answers):
            a, b = enc.offsets[first][0], enc.offsets[last - 1][1]
            assert a <= start and start + len(text) <= b, (ex.id, text)
            # the tokens are the fewest that cover it
            assert enc.offsets[first][1] > start and enc.offsets[last - 1][0] < start + len(text)
            inexact += (a, b) != (start, start + len(text))
        assert [t for t, _ in enc.offsets] == sorted(t for t, _ in enc.offsets)
    assert inexact < 0.05 * 400


def test_clipped_spans_still_tile_each_window(squad, encoder):
    ex = max(squad.examples[:300], key=lambda e: len(e.context))
    enc = encode_question(encoder, ex.question, ex.context)
    for a, b in passage_windows(len(enc.context), len(enc.question), 96, 24):
        spans = spans_in_window(enc.context_spans, a, b)
        assert spans[0][0] == 0 and spans[-1][1] == b - a
        assert all(e == s2 for (_, e), (s2, _) in zip(spans, spans[1:]))


# -- heads against plain references --------------------------------------------------


def _passages(batch, length, generator):
    rows = []
    for _ in range(batch):
        p0 = int(torch.randint(1, length // 2, (), generator=generator))
        p1 = int(torch.randint(p0 + 1, length + 1, (), generator=generator))
        rows.append((p0, p1))
    return torch.tensor(rows)


def test_boundary_grid_equals_start_plus_end():
    g = torch.Generator().manual_seed(0)
    head = BoundaryQAHead(8, max_answer_tokens=4, dropout=0.0).eval()
    features, passage = torch.randn(3, 12, 8, generator=g), _passages(3, 12, g)
    out = head(features, passage)
    logits = head.out_proj(features)
    for b in range(3):
        p0, p1 = passage[b].tolist()
        for i in range(12):
            for w in range(4):
                got = out["scores"][b, i, w].item()
                if p0 <= i and i + w < p1:
                    assert got == pytest.approx((logits[b, i, 0] + logits[b, i + w, 1]).item(), abs=1e-5)
                else:
                    assert got == -math.inf
        assert out["null"][b].item() == pytest.approx((logits[b, 0, 0] + logits[b, 0, 1]).item(), abs=1e-5)


def test_sf_boundary_head_equals_a_per_span_convolution_reference():
    """Start/end logits from [x_t; ReLU(conv inside t's span)], written span by span;
    the rest of the grid is the boundary head's. span_dim != D goes through a projection."""
    g = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    for span_dim in (None, 5):
        head = SpanBoundaryQAHead(8, max_answer_tokens=3, span_dim=span_dim,
                                  dropout=0.0).double().eval()
        features = torch.randn(2, 10, 8, generator=g, dtype=torch.float64)
        passage = torch.tensor([[4, 9], [3, 7]])
        spans = torch.tensor([[[1, 3], [4, 5], [5, 8], [8, 9]], [[1, 2], [3, 7], [0, 0], [0, 0]]])
        out = head(features, passage, spans)
        x = features if head.span_proj is None else head.span_proj(features)
        for b in range(2):
            within = torch.zeros(10, x.size(-1), dtype=torch.float64)
            for st, en in spans[b].tolist():
                if st < en:
                    seg = x[b, st:en].t().unsqueeze(0)
                    conv = F.conv1d(seg, head.conv.weight, head.conv.bias, padding=1)
                    within[st:en] = torch.relu(conv)[0].t()
            logits = head.out_proj(torch.cat([features[b], within], -1))
            p0, p1 = passage[b].tolist()
            for i in range(10):
                for w in range(3):
                    got = out["scores"][b, i, w].item()
                    if p0 <= i and i + w < p1:
                        assert got == pytest.approx((logits[i, 0] + logits[i + w, 1]).item(), abs=1e-6)
                    else:
                        assert got == -math.inf
            assert out["null"][b].item() == pytest.approx((logits[0, 0] + logits[0, 1]).item())
    target = torch.tensor([[5, 7], [0, 0]])
    loss, unreachable = head.loss(out, target)
    expect = (F.cross_entropy(out["start"], target[:, 0], reduction="sum")
              + F.cross_entropy(out["end"], target[:, 1], reduction="sum")) / 2
    assert unreachable == 0 and loss.item() == pytest.approx(expect.item())


def test_span_head_scores_equal_a_plain_per_candidate_reference():
    g = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    head = SpanQAHead(8, max_answer_tokens=3, span_dim=6, dropout=0.0).eval()
    features, passage = torch.randn(2, 10, 8, generator=g), _passages(2, 10, g)
    out = head(features, passage)
    x = head.proj(features)
    attn = head.attentive.score(x).squeeze(-1)
    for b in range(2):
        p0, p1 = passage[b].tolist()
        for i in range(10):
            for w in range(3):
                got = out["scores"][b, i, w].item()
                if not (p0 <= i and i + w < p1):
                    assert got == -math.inf
                    continue
                j = i + w
                weights = torch.softmax(attn[b, i:j + 1], 0)
                pooled = (weights.unsqueeze(-1) * x[b, i:j + 1]).sum(0)
                rep = torch.cat([x[b, i], x[b, j], pooled])
                want = head.out_proj(torch.nn.functional.gelu(head.dense(rep)))
                assert got == pytest.approx(want.item(), abs=1e-5)
    assert out["null"].tolist() == pytest.approx(head.null_proj(features[:, 0]).squeeze(-1).tolist())


def test_span_loss_reads_the_gold_candidate_and_counts_unreachable_answers():
    head = SpanQAHead(8, max_answer_tokens=3, span_dim=4, dropout=0.0)
    scores = torch.full((3, 6, 3), -math.inf)
    scores[0, 2, 1] = 5.0  # gold (2, 3) of window 0
    scores[1, 1, 0] = 0.0
    output = {"scores": scores, "null": torch.tensor([0.0, 7.0, 0.0])}
    target = torch.tensor([[2, 3], [0, 0], [1, 5]])  # answer, no answer, too long (5 tokens)
    loss, unreachable = head.loss(output, target)
    want = -(torch.log_softmax(torch.tensor([0.0, 5.0]), 0)[1]
             + torch.log_softmax(torch.tensor([7.0, 0.0]), 0)[0])
    assert loss.item() == pytest.approx(want.item(), abs=1e-5)
    assert unreachable == 1


def test_candidate_mask_counts():
    mask = candidate_mask(torch.tensor([[2, 7]]), 9, 3)
    assert int(mask.sum()) == 5 + 4 + 3  # widths 1, 2, 3 inside 5 passage tokens


# -- decoding ------------------------------------------------------------------------


def test_decoding_across_windows_equals_brute_force():
    rng = random.Random(3)
    context = "abcdefghijklmnopqrstuvwxyz0123456789"
    for trial in range(20):
        # two overlapping windows over character tokens of one context
        windows = [(0, 20), (12, 34)]
        t, a = 26, 4
        scores = torch.full((2, t, a), -math.inf)
        offsets = torch.full((2, t, 2), -1, dtype=torch.long)
        for n, (lo, hi) in enumerate(windows):
            p0 = 4
            for k in range(hi - lo):
                offsets[n, p0 + k] = torch.tensor([lo + k, lo + k + 1])
            for i in range(p0, p0 + hi - lo):
                for w in range(a):
                    if i + w < p0 + hi - lo:
                        scores[n, i, w] = rng.gauss(0, 2)
        null = torch.tensor([rng.gauss(0, 2), rng.gauss(0, 2)])
        got = decode_answers(scores, null, torch.tensor([0, 0]), offsets, [context], n_best=5,
                             null_threshold=None, boundaries="token")[0]
        best = max(((scores[n, i, w].item(), offsets[n, i, 0].item(), offsets[n, i + w, 1].item())
                    for n in range(2) for i in range(t) for w in range(a)
                    if scores[n, i, w] != -math.inf), key=lambda x: x[0])
        assert (got["start"], got["end"]) == best[1:]
        assert got["text"] == context[best[1]:best[2]]
        assert got["null_margin"] == pytest.approx(min(null.tolist()) - best[0])
        assert sum(x["probability"] for x in got["nbest"]) == pytest.approx(1.0)
        assert len({(x["start"], x["end"]) for x in got["nbest"]}) == len(got["nbest"])
        thresholded = decode_answers(scores, null, torch.tensor([0, 0]), offsets, [context],
                                     null_threshold=got["null_margin"] - 1e-3,
                                     boundaries="token")[0]
        assert thresholded["text"] == ""
        # one word from end to end: no candidate is word-aligned, so word boundaries
        # fall back to every token span rather than leave the question unanswered
        assert decode_answers(scores, null, torch.tensor([0, 0]), offsets, [context],
                              n_best=5)[0] == got


def _piece_windows(context, windows, rng, t, a):
    """Offsets ``[len(windows), t, 2]`` of sub-word pieces of ``context`` (each word cut
    into pieces of 1-3 characters, white space dropped, punctuation its own piece)
    inside token windows ``[(first, last)]`` (passage from position 3), and random
    scores of every candidate there."""
    pieces, k = [], 0
    while k < len(context):
        if context[k].isspace():
            k += 1
            continue
        n = 1 if not context[k].isalnum() else rng.randint(1, 3)
        end = k + 1
        while end < len(context) and end - k < n and context[end].isalnum() and context[k].isalnum():
            end += 1
        pieces.append((k, end))
        k = end
    scores = torch.full((len(windows), t, a), -math.inf)
    offsets = torch.full((len(windows), t, 2), -1, dtype=torch.long)
    for n, (lo, hi) in enumerate(windows):
        hi = min(hi, len(pieces))
        for k in range(lo, hi):
            offsets[n, 3 + k - lo] = torch.tensor(pieces[k])
        for i in range(3, 3 + hi - lo):
            for w in range(a):
                if i + w < 3 + hi - lo:
                    scores[n, i, w] = rng.gauss(0, 2)
    return scores, offsets


def test_word_decoding_equals_brute_force_over_word_aligned_candidates():
    """The n-best of word decoding is that of every candidate (of every window) that
    starts and ends on word boundaries, deduplicated by characters, best score kept."""
    rng = random.Random(5)
    context = "The United Methodist Church (UMC) said: Denver's 1990s team won 20–18, in PSN."
    bounds = word_boundaries(context)
    for trial in range(10):
        scores, offsets = _piece_windows(context, [(0, 30), (18, 60)], rng, 40, 5)
        null = torch.tensor([rng.gauss(0, 2), rng.gauss(0, 2)])
        got = decode_answers(scores, null, torch.tensor([0, 0]), offsets, [context], n_best=8)[0]
        best = {}
        for n in range(2):
            for i in range(40):
                for w in range(5):
                    s = scores[n, i, w].item()
                    if s == -math.inf:
                        continue
                    a, b = offsets[n, i, 0].item(), offsets[n, i + w, 1].item()
                    if bounds[a] and bounds[b]:
                        best[a, b] = max(best.get((a, b), -math.inf), s)
        want = sorted(best.items(), key=lambda kv: -kv[1])[:8]
        assert [((x["start"], x["end"]), x["score"]) for x in got["nbest"]] == want
        assert (got["start"], got["end"]) == want[0][0]
        token = decode_answers(scores, null, torch.tensor([0, 0]), offsets, [context],
                               n_best=8, boundaries="token")[0]
        assert any(any(cuts_word(context, x["start"], x["end"])) for x in token["nbest"])


def test_word_boundaries_split_at_spaces_punctuation_and_cjk():
    text = "(UMC) Denver's 2½ 北京 café"
    cut = [k for k in range(len(text) + 1) if word_boundaries(text)[k]]
    words = {text[a:b] for a, b in zip(cut, cut[1:]) if text[a:b].strip()}
    assert {"(", "UMC", ")", "Denver", "'", "s", "2½", "北", "京", "café"} == words
    assert cuts_word(text, 2, 4) == (True, False) and cuts_word(text, 1, 3) == (False, True)
    with pytest.raises(ValueError, match="answer boundaries 'words'"):
        decode_answers(torch.zeros(1, 2, 1), torch.zeros(1), torch.tensor([0]),
                       torch.zeros(1, 2, 2, dtype=torch.long), ["ab"], boundaries="words")


def _inside_word_rate(pairs):
    """``(answers starting or ending inside a word, answers)`` of ``(context, start, end)``."""
    return sum(any(cuts_word(c, a, b)) for c, a, b in pairs), len(pairs)


def test_gold_answers_of_dev_start_or_end_inside_a_word_76_times():
    """Every answer entry of the file, repeated ones too (the figure of DESIGN.md)."""
    data = json.loads(SQUAD_DEV.read_text(encoding="utf-8"))
    gold = [(p["context"], a["answer_start"], a["answer_start"] + len(a["text"]))
            for article in data["data"] for p in article["paragraphs"] for qa in p["qas"]
            for a in qa["answers"]]
    assert _inside_word_rate(gold) == (76, 34726)


def test_word_decoding_never_cuts_a_word_of_real_dev_contexts(squad, encoder):
    """Random score grids over the real windows of 300 dev questions (MiniLM's WordPiece,
    windows of 96 tokens): every answer of every n-best list is whole words, where token
    decoding of the same grids cuts words often."""
    rng = torch.Generator().manual_seed(0)
    examples = squad.examples[::35][:300]
    rows, question = [], []
    for q, ex in enumerate(examples):
        enc = encode_question(encoder, ex.question, ex.context)
        for a, b in passage_windows(len(enc.context), len(enc.question), 96, 32):
            rows.append(torch.tensor(enc.offsets[a:b]))
            question.append(q)
    t, a = 100, 12
    offsets = torch.full((len(rows), t, 2), -1, dtype=torch.long)
    for n, row in enumerate(rows):
        offsets[n, 4:4 + len(row)] = row
    scores = torch.randn(len(rows), t, a, generator=rng)
    inside = torch.arange(t).view(1, -1, 1) + torch.arange(a).view(1, 1, -1)
    lengths = torch.tensor([4 + len(r) for r in rows]).view(-1, 1, 1)
    scores[(inside >= lengths) | (torch.arange(t).view(1, -1, 1) < 4)] = -math.inf
    contexts = [ex.context for ex in examples]
    found = {}
    for boundaries in ("word", "token"):
        answers = decode_answers(scores, torch.zeros(len(rows)), torch.tensor(question), offsets,
                                 contexts, n_best=5, boundaries=boundaries)
        found[boundaries] = _inside_word_rate([(c, x["start"], x["end"]) for c, ans in
                                               zip(contexts, answers) for x in ans["nbest"]])
        assert all(ans["text"] for ans in answers)
    assert found["word"] == (0, 1500)
    assert found["token"][0] > 0.05 * found["token"][1]


# -- the real stack ------------------------------------------------------------------


def test_batches_point_at_the_gold_answers(qa_folder):
    import span_plugin
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq import options

    span_plugin.register()
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(qa_folder / "bin"), "--user-dir", str(USER_DIR), "--task", "span_qa",
        "--arch", "roberta_qa", "--criterion", "span_qa", "--max-positions", "128"])
    task = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
    data = task.load_dataset("train")
    records = task.records["train"]
    batch = data.collater([data[i] for i in range(len(data))])
    offsets, target = batch["qa"]["offsets"], batch["target"]
    assert len(batch["qa"]["question"]) > len(records)  # long passages have several windows
    found = set()
    for w, q in enumerate(batch["qa"]["question"].tolist()):
        s, e = target[w].tolist()
        ex = records[q]
        p0, p1 = batch["net_input"]["passage"][w].tolist()
        assert (offsets[w, p0:p1] >= 0).all() and (offsets[w, :p0] == -1).all()
        if (s, e) == (0, 0):
            continue
        text, start = ex.answers[0]
        a, b = offsets[w, s, 0].item(), offsets[w, e, 1].item()
        assert a <= start and start + len(text) <= b
        found.add(q)
    assert len(found) == len(records)  # every question's answer is in one of its windows
    # n-gram spans in the layout: they tile the question and the passage, nothing else
    spans, lengths = batch["net_input"]["spans"], batch["net_input"]["src_lengths"]
    multi = 0
    for w in range(len(spans)):
        p0, p1 = batch["net_input"]["passage"][w].tolist()
        q_end = p0 - 2  # <s> Q </s> </s> P </s>
        covered = [t for s, e in spans[w].tolist() for t in range(s, e)]
        assert covered == [*range(1, q_end), *range(p0, p1)], w
        assert p1 == lengths[w] - 1
        multi += int(((spans[w, :, 1] - spans[w, :, 0]) > 1).sum())
    assert multi > len(spans)  # n-grams and words split into pieces, not only single tokens


@pytest.mark.slow
@pytest.mark.parametrize("head", ["boundary", pytest.param("sf", marks=pytest.mark.smoke), "span"])
def test_train_validate_predict_agree(qa_folder, tmp_path, head):
    """fairseq-train's validation EM/F1 (criterion) equal the official scores of the
    predictions.json span-predict writes from the saved checkpoint."""
    # the smoke case starts the console scripts; the others call them in this process
    run = run_cli if head == "sf" else run_main
    save = tmp_path / "ckpt"
    log = run("fairseq-train", qa_folder / "bin", "--user-dir", USER_DIR,
              "--task", "span_qa", "--criterion", "span_qa", "--arch", "roberta_qa",
              "--qa-head", head, "--max-answer-tokens", "12", *TINY_ROBERTA,
              "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8",
              "--max-update", "3", "--save-dir", save, "--cpu", "--seed", "1",
              "--no-progress-bar", "--log-interval", "1", "--log-format", "json",
              "--best-checkpoint-metric", "f1", "--maximize-best-checkpoint-metric",
              "--no-epoch-checkpoints", "--num-workers", "0").stdout
    valid = [json.loads(line.split("|")[-1]) for line in log.splitlines()
             if '"valid_f1"' in line]
    assert valid, log[-3000:]
    out = tmp_path / "pred"
    run("span-predict", "--checkpoint", save / "checkpoint_last.pt",
        "--input", qa_folder / "valid.json", "--output", out / "predictions.json",
        "--nbest", out / "nbest.json", "--results", out / "scores.json")
    predictions = json.loads((out / "predictions.json").read_text())
    examples = read_qa(qa_folder / "valid.json").examples
    assert set(predictions) == {ex.id for ex in examples}
    scores = squad_scores(predictions, examples)
    assert json.loads((out / "scores.json").read_text())["f1"] == pytest.approx(scores["f1"])
    assert float(valid[-1]["valid_f1"]) == pytest.approx(scores["f1"], abs=0.01)
    assert float(valid[-1]["valid_exact_match"]) == pytest.approx(scores["exact_match"], abs=0.01)
    assert "valid_em" not in valid[-1]  # the official names only
    nbest = json.loads((out / "nbest.json").read_text())
    context = {ex.id: ex.context for ex in examples}
    for qid, answers in nbest.items():
        assert answers[0]["text"] == predictions[qid]
        for a in answers:
            assert context[qid][a["start"]:a["end"]] == a["text"]
    # answers are whole words of the real dev contexts (the default), every n-best entry
    # too; the gold answers of these questions cut a word no less often
    assert json.loads((out / "scores.json").read_text())["answer_boundaries"] == "word"
    found = [(context[qid], a["start"], a["end"]) for qid, answers in nbest.items() for a in answers]
    gold = [(ex.context, s, s + len(t)) for ex in examples for t, s in ex.answers]
    assert _inside_word_rate(found)[0] == 0 <= _inside_word_rate(gold)[0]
    run("span-predict", "--checkpoint", save / "checkpoint_last.pt", "--input",
        qa_folder / "valid.json", "--output", out / "token.json", "--results",
        out / "token-scores.json", "--answer-boundaries", "token")
    token = json.loads((out / "token-scores.json").read_text())
    assert token["answer_boundaries"] == "token"
    assert token["f1"] == pytest.approx(squad_scores(
        json.loads((out / "token.json").read_text()), examples)["f1"])

    from span_plugin.hub import SpanHubInterface

    hub = SpanHubInterface.from_pretrained(save / "checkpoint_last.pt")
    # the hub builds the batches of training from raw text: tokens, passage and spans
    valid = hub.task.load_dataset("valid")
    n = min(6, len(valid))
    from span_plugin.portable.batches import pad_rows, pad_tokens

    windows = hub.windows([valid[i]["record"] for i in range(n)])  # an item: a question's windows
    want = valid.collater([valid[i] for i in range(n)])["net_input"]
    got = {"src_tokens": pad_tokens([w[1] for w in windows], hub.vocab.pad),
           "passage": torch.tensor([w[2] for w in windows]),
           "spans": pad_rows([w[4] for w in windows], 2)}
    assert set(want) == {"src_tokens", "src_lengths", "passage", "spans"}
    for key in got:
        assert torch.equal(got[key], want[key]), key
    ex = examples[0]
    answer = hub.predict_answers([(ex.question, ex.context)])[0]
    assert answer["text"] == predictions[ex.id]
    assert ex.context[answer["start"]:answer["end"]] == answer["text"]
    assert hub.answer_boundaries == "word" and hub.task.cfg.answer_boundaries == "word"
    if head == "span":
        _length_prior_decodes_like_span_predict(save / "checkpoint_last.pt", qa_folder, tmp_path,
                                                predictions, examples)


def _length_prior_decodes_like_span_predict(checkpoint, qa_folder, tmp_path, predictions, examples):
    """experiments/qa_length_prior.py: its decoding without the prior is span-predict's;
    the prior has one entry per width, counted on the training sample."""
    import qa_length_prior

    results = tmp_path / "prior.jsonl"
    qa_length_prior.main(["--checkpoint", str(checkpoint), "--train", str(qa_folder / "train.json"),
                          "--valid", str(qa_folder / "valid.json"), "--sample", "20",
                          "--results", str(results)])
    record = json.loads(results.read_text())
    official = squad_scores(predictions, examples)
    assert record["without_prior"]["exact_match"] == pytest.approx(official["exact_match"])
    assert record["without_prior"]["f1"] == pytest.approx(official["f1"])
    assert len(record["prior"]) == 12  # --max-answer-tokens
    assert sum(record["predicted_widths"].values()) == record["sample"] == 20
    assert 0 < sum(record["gold_widths"].values()) <= 20
    assert record["questions"] == len(examples)


# -- formats the machine has no real copy of: SQuAD 2.0 and MRQA ---------------------


def _v2_fixture(path, squad):
    """A SQuAD 2.0 file from real v1.1 paragraphs: every paragraph's answerable questions
    plus an impossible one (a question of another paragraph) per paragraph."""
    paragraphs = {}
    for ex in squad.examples[:60]:
        paragraphs.setdefault(ex.context, []).append(ex)
    contexts = list(paragraphs)
    data = []
    for k, context in enumerate(contexts):
        qas = [{"id": ex.id, "question": ex.question, "is_impossible": False,
                "answers": [{"text": t, "answer_start": s} for t, s in ex.answers]}
               for ex in paragraphs[context]]
        other = paragraphs[contexts[(k + 1) % len(contexts)]][0]
        qas.append({"id": f"{other.id}-impossible-{k}", "question": other.question,
                    "is_impossible": True, "answers": [],
                    "plausible_answers": [{"text": context[:5], "answer_start": 0}]})
        data.append({"title": "t", "paragraphs": [{"context": context, "qas": qas}]})
    path.write_text(json.dumps({"version": "v2.0", "data": data}))


def _mrqa_fixture(path, squad):
    """An MRQA JSON Lines file (gzip) from real paragraphs: header line, inclusive
    char_spans, every occurrence of the first answer."""
    import gzip

    lines = [json.dumps({"header": {"dataset": "SQuAD", "split": "dev"}})]
    by_context = {}
    for ex in squad.examples[60:120]:
        by_context.setdefault(ex.context, []).append(ex)
    for context, exs in by_context.items():
        qas = []
        for ex in exs:
            text = ex.answers[0][0]
            starts = [i for i in range(len(context)) if context.startswith(text, i)]
            qas.append({"qid": ex.id, "question": ex.question,
                        "answers": [t for t, _ in ex.answers],
                        "detected_answers": [{"text": text,
                                              "char_spans": [[s, s + len(text) - 1] for s in starts],
                                              "token_spans": []}]})
        lines.append(json.dumps({"context": context, "qas": qas}))
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


@pytest.mark.slow
def test_squad_v2_and_mrqa_train_with_no_answer_metrics(tmp_path, squad, converted_minilm):
    _v2_fixture(tmp_path / "v2.json", squad)
    _mrqa_fixture(tmp_path / "mrqa.jsonl.gz", squad)
    for name, train in (("v2", tmp_path / "v2.json"), ("mrqa", tmp_path / "mrqa.jsonl.gz")):
        folder = tmp_path / f"bin-{name}"
        run_main("span-preprocess", "qa", "--out", folder, "--train", train, "--valid", train,
                "--bpe", "wordpiece", "--wordpiece", converted_minilm,
                "--srcdict", converted_minilm / "dict.txt", "--max-positions", "128",
                "--doc-stride", "32", "--workers", "1")
        record = json.loads((folder / "provenance.json").read_text())
        assert record["labels"]["versions"]["train"] == ("2.0" if name == "v2" else "mrqa")
        # v2: selected by exact match under its old name, as a run from before the
        # official names would be resumed: that name is logged too
        select = ["--best-checkpoint-metric", "HasAns_em", "--maximize-best-checkpoint-metric"]
        log = run_main("fairseq-train", folder, "--user-dir", USER_DIR, "--task", "span_qa",
                       "--criterion", "span_qa", "--arch", "roberta_qa", *TINY_ROBERTA,
                       "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8",
                       "--max-update", "2", "--save-dir", tmp_path / f"ckpt-{name}", "--cpu",
                       "--no-progress-bar", "--log-format", "simple", "--num-workers", "0",
                       "--no-epoch-checkpoints", *(select if name == "v2" else ())).stdout
        valid = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
        assert valid and " f1 " in valid[-1] and " exact_match " in valid[-1], log[-2000:]
        if name == "v2":
            for key in ("HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "HasAns_em"):
                assert f" {key} " in valid[-1], (key, valid[-1])
            assert " em " not in valid[-1] and "NoAns_em" not in valid[-1]
            # fairseq selected by it (it stops on a metric it cannot find)
            assert (tmp_path / "ckpt-v2" / "checkpoint_best.pt").exists()
        else:
            assert "NoAns" not in valid[-1] and "_em " not in valid[-1]
    out = tmp_path / "pred-v2"
    run_main("span-predict", "--checkpoint", tmp_path / "ckpt-v2" / "checkpoint_last.pt",
             "--input", tmp_path / "v2.json", "--output", out / "predictions.json",
             "--results", out / "scores.json", "--null-threshold", "tune")
    scores = json.loads((out / "scores.json").read_text())
    assert {"best_f1_thresh", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"} <= set(scores)
    predictions = json.loads((out / "predictions.json").read_text())
    examples = read_qa(tmp_path / "v2.json").examples
    assert squad_scores(predictions, examples)["f1"] == pytest.approx(scores["f1"])

    # the same questions without answers (the official test files' layout): predicted,
    # the same answers at the same threshold, and scores refused up front, naming one
    raw = json.loads((tmp_path / "v2.json").read_text())
    for par in (p for a in raw["data"] for p in a["paragraphs"]):
        for qa in par["qas"]:
            for key in ("answers", "is_impossible", "plausible_answers"):
                qa.pop(key, None)
    bare = tmp_path / "test-v2.json"
    bare.write_text(json.dumps(raw))
    threshold = str(scores["best_f1_thresh"])
    for name, file in (("gold", tmp_path / "v2.json"), ("bare", bare)):
        run_main("span-predict", "--checkpoint", tmp_path / "ckpt-v2" / "checkpoint_last.pt",
                 "--input", file, "--output", out / f"{name}.json", "--null-threshold", threshold)
    assert json.loads((out / "bare.json").read_text()) == json.loads(
        (out / "gold.json").read_text())
    for flags in (("--results", out / "s.json"), ("--null-threshold", "tune")):
        proc = run_main("span-predict", "--checkpoint",
                        tmp_path / "ckpt-v2" / "checkpoint_last.pt", "--input", bare,
                        "--output", out / "x.json", *flags, check=False)
        first = raw["data"][0]["paragraphs"][0]["qas"][0]["id"]
        assert proc.returncode != 0 and "Traceback" not in proc.stdout, proc.stdout[-2000:]
        assert (f"test-v2.json: article 1 (t), paragraph 1, question 1: question {first!r} "
                f"has no answers ({len(examples)} of {len(examples)} questions have none)"
                in proc.stdout), proc.stdout[-2000:]
        assert not (out / "x.json").exists()


def test_bad_questions_are_named_or_skipped_and_counted(tmp_path, squad, converted_minilm):
    ex = squad.examples[0]
    long_question = " ".join(["word"] * 80) + "?"
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": ex.context, "qas": [
        {"id": "ok", "question": ex.question,
         "answers": [{"text": ex.answers[0][0], "answer_start": ex.answers[0][1]}]},
        {"id": "too-long", "question": long_question,
         "answers": [{"text": ex.answers[0][0], "answer_start": ex.answers[0][1]}]},
        {"id": "shifted", "question": ex.question,
         "answers": [{"text": ex.answers[0][0], "answer_start": ex.answers[0][1] + 1}]}]}]}]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    args = ["span-preprocess", "qa", "--train", path, "--bpe", "wordpiece", "--wordpiece",
            converted_minilm, "--srcdict", converted_minilm / "dict.txt", "--max-positions",
            "64", "--doc-stride", "16", "--workers", "1"]
    proc = run_cli(*args, "--out", tmp_path / "a", "--on-bad", "error", check=False)
    assert proc.returncode == 2 and "shifted" in proc.stdout and "bad.json" in proc.stdout
    assert "Traceback" not in proc.stdout
    proc = run_cli(*args, "--out", tmp_path / "b")  # skip: the default when training
    assert "1 questions" in proc.stdout and "2 dropped" in proc.stdout
    dropped = (tmp_path / "b" / "dropped_rows.tsv").read_text().splitlines()[1:]
    assert sorted(row.split("\t")[3] for row in dropped) == ["shifted", "too-long"]
    assert "questions may have at most" in next(r for r in dropped if "too-long" in r)


@pytest.mark.slow
def test_recipe_smoke_run_resumes_and_its_hydra_twin(tmp_path, qa_folder):
    """recipes/qa/squad.sh as a user runs it (FROM_SCRATCH, GPT-2 BPE), a relaunch that
    resumes instead of training again, and recipes/hydra/qa_squad.yaml on its folder."""
    from conftest import GPT2_BPE, ROOT

    env = dict(FROM_SCRATCH="1", BPE_DIR=str(GPT2_BPE), TRAIN_FILE=str(qa_folder / "train.json"),
               VALID_FILE=str(qa_folder / "valid.json"), MAX_POSITIONS="96", DOC_STRIDE="32",
               HEAD="span", NUM_GPUS="0", DATA_DIR=str(tmp_path / "data"),
               OUT_DIR=str(tmp_path / "run"), EPOCHS="1", BATCH_SIZE="8")
    tiny = [*TINY_ROBERTA[:-2], "--cpu", "--max-update", "2"]
    run_cli("bash", ROOT / "recipes" / "qa" / "squad.sh", *tiny, env=env)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["total"] == len(read_qa(qa_folder / "valid.json").examples)
    assert (tmp_path / "run" / "predictions.json").exists() and (tmp_path / "run" / "nbest.json").exists()
    again = run_cli("bash", ROOT / "recipes" / "qa" / "squad.sh", *tiny, env=env).stdout
    # (stopped by --max-update inside the epoch, fairseq takes one more step on resuming)
    assert re.search(r"Loaded checkpoint \S+checkpoint_last.pt \(epoch \d+ @ 2 updates\)", again)
    run_main("fairseq-hydra-train", "--config-dir", ROOT / "recipes" / "hydra",
            "--config-name", "qa_squad", f"task.data={tmp_path / 'data'}", "common.fp16=false",
            "common.cpu=true", f"common.user_dir={USER_DIR}", "optimization.max_update=1",
            "+model.encoder_layers=2", "+model.encoder_embed_dim=32",
            "+model.encoder_ffn_embed_dim=64", "+model.encoder_attention_heads=2",
            f"checkpoint.save_dir={tmp_path / 'hydra' / 'checkpoints'}", "dataset.num_workers=0",
            cwd=tmp_path)
    assert (tmp_path / "hydra" / "checkpoints" / "checkpoint_last.pt").exists()


def test_preprocessing_in_worker_processes_writes_the_same_folder(tmp_path, squad):
    """span-preprocess qa --workers 2 (the recipe's WORKERS) tokenizes in chunks in two
    processes: every file of the folder is the one a single process writes."""
    from conftest import GPT2_BPE
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec
    from span_plugin.preprocess.folders.options import FolderOptions
    from span_plugin.preprocess.folders.qa import CHUNK_QUESTIONS, QASettings, prepare_qa

    data = json.loads(SQUAD_DEV.read_text(encoding="utf-8"))
    data["data"] = data["data"][:1]
    (tmp_path / "train.json").write_text(json.dumps(data))
    questions = sum(len(p["qas"]) for p in data["data"][0]["paragraphs"])
    assert questions > 3 * CHUNK_QUESTIONS
    spec = EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
    for workers in (1, 2):
        prepare_qa(str(tmp_path / f"w{workers}"), {"train": str(tmp_path / "train.json")},
                   FolderOptions(spec, str(GPT2_BPE / "dict.txt"), workers=workers,
                                 command="test"),
                   QASettings(max_positions=128, doc_stride=32, on_bad="skip"))
    files = sorted(p.relative_to(tmp_path / "w1") for p in (tmp_path / "w1").rglob("*") if p.is_file())
    assert len(files) > 10
    for name in files:
        assert (tmp_path / "w1" / name).read_bytes() == (tmp_path / "w2" / name).read_bytes(), name


@pytest.mark.slow
def test_recipe_validates_on_a_sample_and_says_where_everything_went(tmp_path):
    """recipes/qa/squad.sh on 4 real dev articles split 2/2 (SPLIT_ARTICLES), validating on
    25 questions of the evaluation split drawn by VALID_SEED, WORKERS=2: the sample is
    recorded, the folder's validation split is the sample, results.json scores the
    whole evaluation split under the official names, the checkpoint decodes at word
    boundaries, and the recipe prints every output, which exists. A relaunch with
    another sample size on the same folder is refused."""
    from conftest import GPT2_BPE, ROOT

    data = json.loads(SQUAD_DEV.read_text(encoding="utf-8"))
    data["data"] = data["data"][:4]
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps(data))
    env = dict(FROM_SCRATCH="1", BPE_DIR=str(GPT2_BPE), SQUAD_DEV=str(dev), SPLIT_ARTICLES="2",
               VALID_QUESTIONS="25", VALID_SEED="3", WORKERS="2", MAX_POSITIONS="96",
               DOC_STRIDE="32", NUM_GPUS="0", EPOCHS="1", BATCH_SIZE="8",
               DATA_DIR=str(tmp_path / "data"), OUT_DIR=str(tmp_path / "run"))
    tiny = [*TINY_ROBERTA[:-2], "--cpu", "--max-update", "2"]
    out = run_cli("bash", ROOT / "recipes" / "qa" / "squad.sh", *tiny, env=env,
                  cwd=tmp_path).stdout
    sample = json.loads((tmp_path / "data.valid.json").read_text())["span_plugin_sample"]
    assert (sample["questions"], sample["seed"], sample["unit"]) == (25, 3, "questions")
    evaluation = tmp_path / "data-bin" / "squad-dev-split2" / "valid.json"
    assert sample["source"] == str(evaluation.resolve())
    assert len((tmp_path / "data" / "raw" / "valid.jsonl").read_text().splitlines()) == 25
    record = json.loads((tmp_path / "data" / "provenance.json").read_text())
    assert "--workers 2" in record["command"]
    assert (f"validation: {tmp_path / 'data.valid.json'}: 25 of {sample['of_questions']} "
            f"questions" in out), out[-3000:]
    log = (tmp_path / "run" / "train.log").read_text()
    valid = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
    assert valid and " exact_match " in valid[-1] and " em " not in valid[-1], log[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["total"] == sample["of_questions"]  # the whole evaluation split
    assert results["answer_boundaries"] == "word" and {"exact_match", "f1"} <= set(results)
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "run" / "checkpoints" / "checkpoint_best.pt"))
    assert state["cfg"]["task"]["answer_boundaries"] == "word"
    printed = out[out.index("outputs of recipes/qa/squad.sh:"):]
    for path in (tmp_path / "data", tmp_path / "data.valid.json", tmp_path / "run" / "checkpoints",
                 tmp_path / "run" / "train.log", tmp_path / "run" / "tensorboard",
                 tmp_path / "run" / "predictions.json", tmp_path / "run" / "nbest.json",
                 tmp_path / "run" / "results.json"):
        assert str(path) in printed and path.exists(), (path, printed)
    proc = run_cli("bash", ROOT / "recipes" / "qa" / "squad.sh", *tiny, env=dict(
        env, VALID_QUESTIONS="30"), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout, proc.stdout[-2000:]
    assert "its valid split was built from" in proc.stdout and "another validation sample" in proc.stdout
