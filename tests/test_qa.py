"""Extractive QA: windows, answer alignment, heads against plain references, decoding,
and the real fairseq-train / span-predict / hub path on real SQuAD rows."""

import json
import math
import random

import pytest
import torch

from conftest import DATA, TINY_ROBERTA, USER_DIR, minilm_dir, run_cli
from span_plugin.formats.squad import read_qa
from span_plugin.formats.squad_metrics import squad_scores
from span_plugin.modules.qa_decoding import decode_answers
from span_plugin.modules.qa_heads import BoundaryQAHead, SpanQAHead, candidate_mask
from span_plugin.preprocess.encoding import make_encoder
from span_plugin.preprocess.qa import clip_spans, encode_question, passage_windows

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
        spans = clip_spans(enc.context_spans, a, b)
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
                             null_threshold=None)[0]
        best = max(((scores[n, i, w].item(), offsets[n, i, 0].item(), offsets[n, i + w, 1].item())
                    for n in range(2) for i in range(t) for w in range(a)
                    if scores[n, i, w] != -math.inf), key=lambda x: x[0])
        assert (got["start"], got["end"]) == best[1:]
        assert got["text"] == context[best[1]:best[2]]
        assert got["null_margin"] == pytest.approx(min(null.tolist()) - best[0])
        assert sum(x["probability"] for x in got["nbest"]) == pytest.approx(1.0)
        assert len({(x["start"], x["end"]) for x in got["nbest"]}) == len(got["nbest"])
        thresholded = decode_answers(scores, null, torch.tensor([0, 0]), offsets, [context],
                                     null_threshold=got["null_margin"] - 1e-3)[0]
        assert thresholded["text"] == ""


# -- the real stack ------------------------------------------------------------------


@pytest.fixture(scope="module")
def qa_folder(tmp_path_factory, converted_minilm):
    root = tmp_path_factory.mktemp("qa")
    run_cli("span-preprocess", "qa-split", SQUAD_DEV, "--first", "46",
            "--out-first", root / "first.json", "--out-rest", root / "rest.json")
    # a small train split: the first article's first 3 paragraphs; valid: the last two articles
    data = json.loads((root / "first.json").read_text())
    data["data"] = data["data"][:1]
    data["data"][0]["paragraphs"] = data["data"][0]["paragraphs"][:3]
    (root / "train.json").write_text(json.dumps(data))
    rest = json.loads((root / "rest.json").read_text())
    rest["data"][0]["paragraphs"] = rest["data"][0]["paragraphs"][:4]
    rest["data"] = rest["data"][:1]
    (root / "valid.json").write_text(json.dumps(rest))
    run_cli("span-preprocess", "qa", "--out", root / "bin", "--train", root / "train.json",
            "--valid", root / "valid.json", "--bpe", "wordpiece", "--wordpiece", converted_minilm,
            "--srcdict", converted_minilm / "dict.txt", "--max-positions", "96",
            "--doc-stride", "32", "--workers", "1")
    return root


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


@pytest.mark.slow
@pytest.mark.parametrize("head", ["boundary", "span"])
def test_train_validate_predict_agree(qa_folder, tmp_path, head):
    """fairseq-train's validation EM/F1 (criterion) equal the official scores of the
    predictions.json span-predict writes from the saved checkpoint."""
    save = tmp_path / "ckpt"
    log = run_cli("fairseq-train", qa_folder / "bin", "--user-dir", USER_DIR,
                  "--task", "span_qa", "--criterion", "span_qa", "--arch", "roberta_qa",
                  "--qa-head", head, "--max-answer-tokens", "12", *TINY_ROBERTA,
                  "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8",
                  "--max-update", "3", "--save-dir", save, "--cpu", "--seed", "1",
                  "--no-progress-bar", "--log-interval", "1", "--log-format", "json",
                  "--best-checkpoint-metric", "f1", "--maximize-best-checkpoint-metric",
                  "--no-epoch-checkpoints").stdout
    valid = [json.loads(line.split("|")[-1]) for line in log.splitlines()
             if '"valid_f1"' in line]
    assert valid, log[-3000:]
    out = tmp_path / "pred"
    run_cli("span-predict", "--checkpoint", save / "checkpoint_last.pt",
            "--input", qa_folder / "valid.json", "--output", out / "predictions.json",
            "--nbest", out / "nbest.json", "--results", out / "scores.json")
    predictions = json.loads((out / "predictions.json").read_text())
    examples = read_qa(qa_folder / "valid.json").examples
    assert set(predictions) == {ex.id for ex in examples}
    scores = squad_scores(predictions, examples)
    assert json.loads((out / "scores.json").read_text())["f1"] == pytest.approx(scores["f1"])
    assert float(valid[-1]["valid_f1"]) == pytest.approx(scores["f1"], abs=0.01)
    assert float(valid[-1]["valid_em"]) == pytest.approx(scores["exact_match"], abs=0.01)
    nbest = json.loads((out / "nbest.json").read_text())
    context = {ex.id: ex.context for ex in examples}
    for qid, answers in nbest.items():
        assert answers[0]["text"] == predictions[qid]
        for a in answers:
            assert context[qid][a["start"]:a["end"]] == a["text"]

    from span_plugin.inference.hub import SpanHubInterface

    hub = SpanHubInterface.from_pretrained(save / "checkpoint_last.pt")
    ex = examples[0]
    answer = hub.predict_answers([(ex.question, ex.context)])[0]
    assert answer["text"] == predictions[ex.id]
    assert ex.context[answer["start"]:answer["end"]] == answer["text"]
