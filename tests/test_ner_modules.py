"""Vectorised span pooling, tagging heads and span decoding against plain loop
references written here (values and gradients)."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from span_plugin.modules import span_extractors as E
from span_plugin.modules import span_pooling as P
from span_plugin.modules.span_decoding import best_non_overlapping
from span_plugin.modules.tagging_heads import (
    SpanLabelingHead,
    SpanTokenTaggingHead,
    enumerate_word_spans,
)


def random_spans(batch, num, seq_len, gen):
    """Overlapping, nested, repeated and empty spans, some past the end."""
    start = torch.randint(0, seq_len + 1, (batch, num), generator=gen)
    width = torch.randint(-1, 6, (batch, num), generator=gen)
    spans = torch.stack([start, start + width], -1)
    spans[0, 0] = torch.tensor([2, 5])
    spans[0, 1] = torch.tensor([2, 5])  # a repeat
    spans[0, 2] = torch.tensor([3, 4])  # nested
    spans[-1, -1] = torch.tensor([0, 0])  # padding row
    return spans


@pytest.mark.parametrize("kind", ["max", "mean", "attentive", "endpoint"])
def test_span_pooling_matches_loops(kind):
    gen = torch.Generator().manual_seed(0)
    spans = random_spans(3, 9, 11, gen)
    values = torch.randn(3, 11, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    scores = torch.randn(3, 11, generator=gen, dtype=torch.float64, requires_grad=True)
    fast = {
        "max": lambda: P.span_max(values, spans),
        "mean": lambda: P.span_mean(values, spans),
        "attentive": lambda: P.span_attentive_pool(values, scores, spans),
        "endpoint": lambda: P.span_endpoints(values, spans).flatten(-2),
    }[kind]()
    torch.testing.assert_close(fast, loop_reference(values, scores, spans, kind))
    weight = torch.randn(fast.shape, generator=gen, dtype=torch.float64)
    g_fast = torch.autograd.grad((fast * weight).sum(), [values, scores], allow_unused=True)
    g_ref = torch.autograd.grad((loop_reference(values, scores, spans, kind) * weight).sum(),
                                [values, scores], allow_unused=True)
    for a, b in zip(g_fast, g_ref):
        if a is None or b is None:
            assert a is None or not a.any()
            continue
        torch.testing.assert_close(a, b)


def loop_reference(values, scores, spans, kind):
    """One span at a time, differentiable (rows stacked)."""
    batch, seq_len, dim = values.shape
    width = 2 * dim if kind == "endpoint" else dim
    rows = []
    for b in range(batch):
        for k in range(spans.size(1)):
            s, e = (int(x) for x in spans[b, k].clamp(0, seq_len))
            if s >= e:
                rows.append(values.new_zeros(width))
                continue
            tokens = values[b, s:e]
            rows.append({
                "max": lambda: tokens.max(0).values,
                "mean": lambda: tokens.mean(0),
                "attentive": lambda: (torch.softmax(scores[b, s:e], 0).unsqueeze(-1) * tokens).sum(0),
                "endpoint": lambda: torch.cat([tokens[0], tokens[-1]]),
            }[kind]())
    return torch.stack(rows).view(batch, spans.size(1), width)


def test_poolers_share_one_interface():
    features = torch.randn(2, 7, 4)
    spans = torch.tensor([[[0, 3], [1, 2]], [[2, 7], [0, 0]]])
    for kind in E.SPAN_EXTRACTORS:
        pooler = E.build_span_extractor(kind, 4, **EXTRACTOR_OPTIONS.get(kind, {}))
        out = pooler(features, spans)
        assert out.shape == (2, 2, pooler.output_dim)
        assert not out[1, 1].any()  # the padding row pools to zeros
    with pytest.raises(ValueError, match="unknown span extractor"):
        E.build_span_extractor("min", 4)


EXTRACTOR_OPTIONS = {"conv": {"kernel_size": 3}, "width": {"max_width": 4}}


def test_extractor_registry_has_every_scheme():
    assert set(E.SPAN_EXTRACTORS) == {"endpoint", "max", "mean", "self-attentive", "conv", "width"}


def test_conv_and_width_extractors_match_loops():
    """conv: ReLU(conv1d) on each span alone (zero padding), max; width: the embedding
    row of end - start - 1, the last row for longer spans; both zeros for empty rows."""
    gen = torch.Generator().manual_seed(1)
    spans = random_spans(3, 9, 11, gen)
    values = torch.randn(3, 11, 5, generator=gen, dtype=torch.float64)
    conv = E.build_span_extractor("conv", 5, kernel_size=3).double()
    width = E.build_span_extractor("width", 5, max_width=3).double()
    got_conv, got_width = conv(values, spans), width(values, spans)
    for b in range(3):
        for k in range(9):
            s, e = spans[b, k].tolist()  # width counts the spans' own unit: no clamp to T
            ref = width.weight[min(e - s, 3) - 1] if s < e else torch.zeros(5, dtype=torch.float64)
            torch.testing.assert_close(got_width[b, k], ref)
            s, e = (int(x) for x in spans[b, k].clamp(0, 11))
            if s >= e:
                assert not got_conv[b, k].any()
                continue
            x = values[b, s:e].t().unsqueeze(0)
            ref = torch.relu(F.conv1d(x, conv.conv.weight, conv.conv.bias, padding=1))[0].amax(-1)
            torch.testing.assert_close(got_conv[b, k], ref)


@pytest.mark.parametrize("kind", ["max", "self-attentive", "conv"])
def test_pooling_extractors_pool_a_partition_as_its_spans(kind):
    """pool_segments on packed segments (the sentence encoder's path) = forward on
    the same tokens given as spans."""
    torch.manual_seed(0)
    extractor = E.build_span_extractor(kind, 4, **EXTRACTOR_OPTIONS.get(kind, {})).double()
    values = torch.randn(1, 9, 4, dtype=torch.float64)
    segment_ids = torch.tensor([[-1, 0, 0, 0, 1, -1, 2, 2, -1]])
    spans = torch.tensor([[[1, 4], [4, 5], [6, 8]]])
    torch.testing.assert_close(extractor.pool_segments(values, segment_ids, 3), extractor(values, spans))


def test_attentive_pool_fp16_empty_rows_finite():
    values = torch.randn(1, 4, 3).half()
    scores = torch.full((1, 4), 60000.0).half()
    out = P.span_attentive_pool(values, scores, torch.tensor([[[0, 2], [0, 0]]]))
    assert torch.isfinite(out).all() and not out[0, 1].any()


def test_enumerate_word_spans():
    words = torch.tensor([[[1, 3], [3, 4], [4, 6], [0, 0]], [[1, 2], [2, 3], [3, 4], [4, 5]]])
    spans, valid = enumerate_word_spans(words, 3)
    for b in range(2):
        n = int((words[b, :, 0] < words[b, :, 1]).sum())
        for i in range(4):
            for w in range(3):
                ok = i + w < n
                assert bool(valid[b, i, w]) == ok
                expected = [int(words[b, i, 0]), int(words[b, i + w, 1])] if ok else [0, 0]
                assert spans[b, i, w].tolist() == expected


def test_span_labeling_head_equals_concatenation():
    """The per-token projection is the textbook [first; last; attn; width] -> Linear."""
    torch.manual_seed(0)
    head = SpanLabelingHead(6, 4, max_words=3, inner_dim=5).double()
    features = torch.randn(2, 9, 6, dtype=torch.float64)
    words = torch.tensor([[[1, 3], [3, 4], [4, 7], [7, 8]], [[1, 2], [2, 4], [0, 0], [0, 0]]])
    logits, valid = head(features, words)
    w1, w2, w3 = head.token_proj.weight.split(5, dim=0)
    b1, b2, b3 = head.token_proj.bias.split(5)
    for b in range(2):
        for i in range(4):
            for w in range(3):
                if not valid[b, i, w]:
                    continue
                s, e = int(words[b, i, 0]), int(words[b, i + w, 1])
                x = features[b, s:e]
                attn = (torch.softmax(head.score(x).squeeze(-1), 0).unsqueeze(-1) * x).sum(0)
                h = (F.linear(x[0], w1, b1) + F.linear(x[-1], w2, b2) + F.linear(attn, w3, b3)
                     + head.width.weight[w])
                torch.testing.assert_close(logits[b, i, w], head.out_proj(F.gelu(h)))


def test_token_sf_head_matches_per_span_convolution():
    torch.manual_seed(0)
    head = SpanTokenTaggingHead(4, 3, kernel_size=3).double()
    features = torch.randn(2, 8, 4, dtype=torch.float64)
    spans = torch.tensor([[[1, 3], [3, 4], [4, 7]], [[1, 5], [5, 6], [0, 0]]])
    logits = head(features, spans)
    for b in range(2):
        within = torch.zeros(8, 4, dtype=torch.float64)
        for s, e in spans[b].tolist():
            if s < e:
                x = features[b, s:e].t().unsqueeze(0)
                within[s:e] = torch.relu(F.conv1d(x, head.conv.weight, head.conv.bias, padding=1))[0].t()
        torch.testing.assert_close(logits[b], head.out_proj(torch.cat([features[b], within], -1)))


def brute_force_best(gain, valid):
    """Largest total gain over all sets of disjoint candidates with gain > 0."""
    num_words, max_words = gain.shape
    cands = [(i, w) for i in range(num_words) for w in range(max_words)
             if valid[i, w] and gain[i, w] > 0]
    best, best_set = 0.0, set()
    for r in range(len(cands) + 1):
        for subset in itertools.combinations(cands, r):
            covered = [j for i, w in subset for j in range(i, i + w + 1)]
            if len(covered) != len(set(covered)):
                continue
            total = sum(float(gain[i, w]) for i, w in subset)
            if total > best + 1e-12:
                best, best_set = total, set(subset)
    return best, best_set


def test_decoding_is_the_best_non_overlapping_set():
    gen = torch.Generator().manual_seed(3)
    gain = torch.randn(6, 6, 3, generator=gen)
    valid = torch.ones(6, 6, 3, dtype=torch.bool)
    valid[:, 4:] &= torch.arange(3).view(1, 1, 3) < (6 - torch.arange(4, 6)).view(1, 2, 1)
    valid[5, 3:] = False  # a shorter example
    chosen = best_non_overlapping(gain, valid)
    for b in range(6):
        best, best_set = brute_force_best(gain[b], valid[b])
        got = {(i, w) for i, w in chosen[b].nonzero().tolist()}
        assert abs(sum(float(gain[b, i, w]) for i, w in got) - best) < 1e-9
        assert got == best_set
