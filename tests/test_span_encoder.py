"""The efficient span encoders against a plain loop-per-example, loop-per-span
reference that shares their weights: values and gradients, edge cases, masking,
batch invariance, fp16/bf16, parameter count, clip_spans."""

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from span_plugin.modules import (SPAN_ENCODERS, build_span_encoder, clip_spans, segment_max, segment_relu_max,
                                 token_span_ids)

from conftest import ROOT

DIM = 12


# ---------------------------------------------------------------------------
# Reference: obviously correct, slow. One example, one span at a time, F.conv1d
# with zero padding on each span alone.
# ---------------------------------------------------------------------------

def nonempty_spans(row, seq_len):
    """The example's spans as python (start, end) pairs, empty ones dropped."""
    pairs = [(min(max(s, 0), seq_len), min(max(e, 0), seq_len)) for s, e in row.tolist()]
    return [(s, e) for s, e in pairs if s < e]


def conv_relu(conv, tokens):
    """tokens [n, H] -> ReLU(conv1d) [n, H], zero-padded at both ends."""
    out = F.conv1d(tokens.t().unsqueeze(0), conv.weight, conv.bias, padding=conv.kernel_size[0] // 2)
    return torch.relu(out[0].t())


def attentive(pooler, tokens):
    """tokens [n, H] -> softmax(score)-weighted sum [H]."""
    logits = pooler.score(tokens).squeeze(-1)
    weights = torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), 0)
    weights = weights.to(tokens.dtype)
    return (weights.unsqueeze(-1) * tokens).sum(0)


def reference_encode(encoder, kind, features, spans):
    outputs = []
    for b in range(features.size(0)):
        pairs = nonempty_spans(spans[b], features.size(1))
        if kind == "cnn":
            covered = torch.zeros(features.size(1), dtype=torch.bool)
            for s, e in pairs:
                covered[s:e] = True
            columns, t = [], 0
            while t < features.size(1):  # maximal runs of covered tokens
                if not covered[t]:
                    t += 1
                    continue
                u = t
                while u < features.size(1) and covered[u]:
                    u += 1
                hidden = conv_relu(encoder.first_conv, features[b, t:u])
                columns.append(conv_relu(encoder.second_conv, hidden))
                t = u
            outputs.append(torch.cat(columns).amax(0) if columns else features.new_zeros(features.size(2)))
            continue
        if not pairs:
            outputs.append(features.new_zeros(features.size(2)))
            continue
        vectors = []
        for s, e in pairs:
            tokens = features[b, s:e]
            if kind.startswith("cnn"):
                vectors.append(conv_relu(encoder.within_span.conv, tokens).amax(0))
            else:
                vectors.append(attentive(encoder.within_span, tokens))
        vectors = torch.stack(vectors)
        if kind == "cnn-cnn":
            outputs.append(conv_relu(encoder.across_spans.conv, vectors).amax(0))
        elif kind.endswith("-max"):
            outputs.append(vectors.amax(0))
        else:
            outputs.append(attentive(encoder.across_spans, vectors))
    return torch.stack(outputs)


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

def random_spans(lengths, generator, max_span=5, gap_prob=0.2):
    """Spans in the <s> A </s> ... layout: token 0 uncovered, random gaps of
    uncovered tokens, random span lengths, (0, 0) padding rows after them."""
    rows = []
    for length in lengths:
        row, t = [], 1
        while t < length - 1:
            if torch.rand((), generator=generator) < gap_prob:
                t += 1
                continue
            width = int(torch.randint(1, max_span + 1, (), generator=generator))
            end = min(t + width, length - 1)
            row.append((t, end))
            t = end
        rows.append(row)
    return pack(rows)


def pack(rows, extra_padding=1):
    width = max((len(r) for r in rows), default=0) + extra_padding
    spans = torch.zeros(len(rows), width, 2, dtype=torch.long)
    for b, row in enumerate(rows):
        if row:
            spans[b, : len(row)] = torch.tensor(row)
    return spans


def edge_case_spans():
    """T = 24. One-token spans only; one long span (20 tokens, longer than l=16);
    a single span; an all-padding row; adjacent spans with gaps; an empty row
    between real ones (must be skipped, not treated as a gap)."""
    rows = [
        [(t, t + 1) for t in range(1, 9)],
        [(1, 21)],
        [(3, 7)],
        [],
        [(1, 3), (3, 4), (6, 10), (10, 11), (13, 23)],
    ]
    spans = pack(rows, extra_padding=2)
    spans = torch.cat([spans, torch.zeros(1, spans.size(1), 2, dtype=torch.long)])
    spans[5, 0] = torch.tensor([2, 5])
    spans[5, 1] = torch.tensor([7, 7])  # empty row in the middle
    spans[5, 2] = torch.tensor([9, 12])
    return spans, 24


def make_inputs(case, dtype=torch.float64):
    generator = torch.Generator().manual_seed(1234)
    if case == "random":
        lengths = [30, 17, 9, 24]
        spans = random_spans(lengths, generator)
        seq_len = max(lengths)
    else:
        spans, seq_len = edge_case_spans()
    features = torch.randn(spans.size(0), seq_len, DIM, generator=generator, dtype=dtype)
    return features, spans


def make_encoder(kind, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    encoder = build_span_encoder(kind, DIM).to(dtype)
    # Random biases of both signs so ReLU zeros and ReLU(bias) leaks would show.
    with torch.no_grad():
        for name, param in encoder.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.5)
    return encoder


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["random", "edge"])
@pytest.mark.parametrize("kind", SPAN_ENCODERS)
def test_matches_reference_values_and_gradients(kind, case):
    encoder = make_encoder(kind)
    features, spans = make_inputs(case)
    upstream = torch.randn(features.size(0), DIM, dtype=features.dtype)

    results = []
    for encode in (lambda f: encoder(f, spans), lambda f: reference_encode(encoder, kind, f, spans)):
        encoder.zero_grad()
        leaf = features.clone().requires_grad_(True)
        output = encode(leaf)
        (output * upstream).sum().backward()
        grads = {name: p.grad.clone() for name, p in encoder.named_parameters()}
        results.append((output.detach(), leaf.grad.clone(), grads))

    (out, feat_grad, grads), (ref_out, ref_feat_grad, ref_grads) = results
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(feat_grad, ref_feat_grad, rtol=1e-10, atol=1e-10)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-10, atol=1e-10, msg=name)


@pytest.mark.parametrize("kind", SPAN_ENCODERS)
def test_gradcheck(kind):
    torch.manual_seed(0)
    encoder = build_span_encoder(kind, 3).double()
    features = torch.randn(2, 7, 3, dtype=torch.float64, requires_grad=True)
    spans = torch.tensor([[[1, 3], [3, 4], [4, 6]], [[2, 6], [0, 0], [0, 0]]])
    assert torch.autograd.gradcheck(lambda f: encoder(f, spans), (features,))
    assert torch.autograd.gradgradcheck(lambda f: encoder(f, spans), (features,))


@pytest.mark.parametrize("kind", SPAN_ENCODERS)
def test_all_padding_example_gives_zeros_and_finite_gradients(kind):
    encoder = make_encoder(kind)
    features, spans = make_inputs("edge")
    features.requires_grad_(True)
    output = encoder(features, spans)
    assert torch.equal(output[3], torch.zeros(DIM, dtype=features.dtype))
    output.sum().backward()
    assert torch.isfinite(features.grad).all()
    assert torch.equal(features.grad[3], torch.zeros_like(features.grad[3]))
    for name, param in encoder.named_parameters():
        assert torch.isfinite(param.grad).all(), name


@pytest.mark.parametrize("kind", SPAN_ENCODERS)
def test_batch_without_any_span(kind):
    encoder = make_encoder(kind)
    features = torch.randn(3, 7, DIM, dtype=torch.float64, requires_grad=True)
    for spans in (torch.zeros(3, 0, 2, dtype=torch.long), torch.zeros(3, 2, 2, dtype=torch.long)):
        output = encoder(features, spans)
        assert torch.equal(output, torch.zeros(3, DIM, dtype=torch.float64))
        encoder.zero_grad(set_to_none=True)
        output.sum().backward()
        for name, param in encoder.named_parameters():  # DDP needs every one in the graph
            assert param.grad is not None and torch.isfinite(param.grad).all(), name


@pytest.mark.parametrize("kind", SPAN_ENCODERS)
@pytest.mark.parametrize("fill", [1e30, -1e30])
def test_padding_never_wins(kind, fill):
    """Uncovered positions (specials, separators, padding) cannot change anything."""
    encoder = make_encoder(kind)
    features, spans = make_inputs("random")
    span_ids, _ = token_span_ids(spans, features.size(1))
    poisoned = features.masked_fill((span_ids < 0).unsqueeze(-1), fill)
    torch.testing.assert_close(encoder(poisoned, spans), encoder(features, spans), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", SPAN_ENCODERS)
def test_batch_invariance(kind):
    """An example's vector does not depend on what it is batched with."""
    encoder = make_encoder(kind)
    features, spans = make_inputs("random")
    batched = encoder(features, spans)
    for b in range(features.size(0)):
        alone_spans = spans[b : b + 1, : int((spans[b, :, 0] < spans[b, :, 1]).sum())]
        last = int(alone_spans[0, :, 1].max()) + 1 if alone_spans.numel() else 1
        alone = encoder(features[b : b + 1, :last], alone_spans)
        torch.testing.assert_close(alone[0], batched[b], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", SPAN_ENCODERS)
def test_time_major_features(kind):
    """fairseq hands over features as a transposed [T, B, H] tensor (a non-contiguous
    view); the result must not depend on the memory layout."""
    encoder = make_encoder(kind)
    features, spans = make_inputs("random")
    time_major = features.transpose(0, 1).contiguous().transpose(0, 1)
    assert not time_major.is_contiguous()
    torch.testing.assert_close(encoder(time_major, spans), encoder(features, spans), rtol=0, atol=0)


# Half precision on CPU: outputs are O(1); the tolerances are what rounding of
# H=12-term dot products in fp16 (10-bit mantissa) / bf16 (7-bit) allows.
HALF_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 6e-2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", SPAN_ENCODERS)
def test_half_precision_close_to_float32(kind, dtype):
    reference = make_encoder(kind, torch.float32)
    half = make_encoder(kind, torch.float32).to(dtype)
    features, spans = make_inputs("edge", torch.float32)
    expected = reference(features, spans)

    leaf = features.to(dtype).requires_grad_(True)
    output = half(leaf, spans)
    assert output.dtype == dtype
    assert torch.isfinite(output).all()
    tol = HALF_TOLERANCE[dtype]
    torch.testing.assert_close(output.float(), expected, rtol=tol, atol=tol)
    output.float().sum().backward()
    assert torch.isfinite(leaf.grad).all()
    for name, param in half.named_parameters():
        assert torch.isfinite(param.grad).all(), name


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", SPAN_ENCODERS)
def test_half_precision_padding_at_dtype_extremes(kind, dtype):
    """Padding at the dtype's largest magnitudes neither wins nor makes inf/nan."""
    encoder = make_encoder(kind, torch.float32).to(dtype)
    with torch.no_grad():  # large enough weights that padding * weight overflows
        for param in encoder.parameters():
            param.mul_(4)
    features, spans = make_inputs("edge", torch.float32)
    features = features.to(dtype)
    span_ids, _ = token_span_ids(spans, features.size(1))

    def forward_backward(inputs):
        encoder.zero_grad()
        leaf = inputs.clone().requires_grad_(True)
        output = encoder(leaf, spans)
        output.float().sum().backward()
        return output.detach(), leaf.grad, [p.grad.clone() for p in encoder.parameters()]

    clean, clean_grad, clean_param_grads = forward_backward(features)
    for fill in (torch.finfo(dtype).max, torch.finfo(dtype).min):
        poisoned = features.masked_fill((span_ids < 0).unsqueeze(-1), fill)
        output, grad, param_grads = forward_backward(poisoned)
        assert torch.isfinite(output).all()
        torch.testing.assert_close(output, clean, rtol=0, atol=0)
        torch.testing.assert_close(grad, clean_grad, rtol=0, atol=0)
        for got, expected in zip(param_grads, clean_param_grads):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["cnn-cnn", "cnn"])
def test_cnn_parameter_count(kind):
    for dim in (8, 768):
        encoder = build_span_encoder(kind, dim)
        assert sum(p.numel() for p in encoder.parameters()) == 6 * dim * dim + 2 * dim


def test_unknown_kind_and_even_kernel_are_refused():
    with pytest.raises(ValueError, match="unknown span encoder"):
        build_span_encoder("lstm", 8)
    with pytest.raises(ValueError, match="odd"):
        build_span_encoder("cnn-cnn", 8, kernel_size=4)


def test_kernel_size_five_matches_reference():
    torch.manual_seed(0)
    encoder = build_span_encoder("cnn-cnn", DIM, kernel_size=5).double()
    features, spans = make_inputs("edge")
    torch.testing.assert_close(encoder(features, spans), reference_encode(encoder, "cnn-cnn", features, spans))


def test_token_span_ids():
    spans = torch.tensor([[[1, 3], [3, 4], [0, 0], [6, 8]], [[0, 0], [0, 0], [0, 0], [0, 0]]])
    span_ids, num_spans = token_span_ids(spans, 9)
    assert span_ids.tolist() == [[-1, 0, 0, 1, -1, -1, 2, 2, -1], [-1] * 9]
    assert num_spans.tolist() == [3, 0]
    # Offsets past the end are clamped; int32 spans are accepted.
    span_ids, num_spans = token_span_ids(torch.tensor([[[2, 40], [40, 50]]], dtype=torch.int32), 4)
    assert span_ids.tolist() == [[-1, -1, 0, 0]] and num_spans.tolist() == [1]


def test_segment_max_ties_share_the_gradient():
    """Tied maxima split the gradient evenly (as Tensor.amax), and it sums to the
    upstream gradient; positions in no segment get none."""
    values = torch.tensor([[[2.0], [2.0], [1.0], [9.0]]], requires_grad=True)
    pooled = segment_max(values, torch.tensor([[0, 0, 0, -1]]), 1)
    pooled.sum().backward()
    assert pooled.item() == 2.0
    assert values.grad.flatten().tolist() == [0.5, 0.5, 0.0, 0.0]


# --- clip_spans --------------------------------------------------------------

def reference_clip(spans, max_spans, max_span_tokens):
    rows = []
    for row in spans.tolist():
        kept = [(s, e) for s, e in row if s < e][: max_spans or None]
        if max_span_tokens:
            kept = [(s, min(e, s + max_span_tokens)) for s, e in kept]
        rows.append(kept)
    return pack(rows, extra_padding=0)


@pytest.mark.parametrize("max_spans", [None, 0, 1, 3, 100])
@pytest.mark.parametrize("max_span_tokens", [None, 0, 1, 2, 16])
def test_clip_spans_matches_reference(max_spans, max_span_tokens):
    spans, _ = edge_case_spans()
    generator = torch.Generator().manual_seed(5)
    random = random_spans([40, 12, 3], generator, max_span=8)
    for case in (spans, random):
        clipped = clip_spans(case, max_spans, max_span_tokens)
        assert clipped.dtype == case.dtype
        assert torch.equal(clipped, reference_clip(case, max_spans, max_span_tokens))
        one = clip_spans(case[0], max_spans, max_span_tokens)  # one example: [S, 2]
        assert torch.equal(one, reference_clip(case[:1], max_spans, max_span_tokens)[0])


def test_clip_spans_examples():
    spans = torch.tensor([[[1, 3], [3, 30], [30, 31], [0, 0]], [[0, 0], [0, 0], [0, 0], [0, 0]]])
    assert clip_spans(spans, 2, 16).tolist() == [[[1, 3], [3, 19]], [[0, 0], [0, 0]]]
    assert torch.equal(clip_spans(spans, None, None), spans[:, :3])
    # 0 keeps all, as --max-spans 0 / --max-span-tokens 0 do
    assert torch.equal(clip_spans(spans, 0, 0), spans[:, :3])
    assert clip_spans(spans[0], 1, 1).tolist() == [[1, 2]]
    assert clip_spans(torch.zeros(2, 0, 2, dtype=torch.long), 4, 4).shape == (2, 0, 2)
    for limits in ((-1, None), (None, -1)):
        with pytest.raises(ValueError):
            clip_spans(spans, *limits)


def test_modules_do_not_import_fairseq():
    """span_plugin/__init__ loads fairseq compat fixes; the modules themselves must
    not, so they are imported here under a stub parent package."""
    code = textwrap.dedent(
        f"""
        import sys, types
        parent = types.ModuleType("span_plugin")
        parent.__path__ = [{str(ROOT / "span_plugin")!r}]
        sys.modules["span_plugin"] = parent
        import span_plugin.modules as modules
        assert "fairseq" not in sys.modules, sorted(m for m in sys.modules if "fairseq" in m)
        assert modules.build_span_encoder("cnn-cnn", 4) is not None
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_segment_max_with_one_segment_equals_a_loop_and_the_scatter_path(dtype):
    """The one-segment fast path (a masked amax) against a per-row loop and against the
    general scatter path (two segments, the second unused): values with ties (small
    integers), rows without members, padding at the dtype's extremes; forward and
    gradient exact."""
    generator = torch.Generator().manual_seed(3)
    values = torch.randint(-3, 4, (4, 9, 5), generator=generator).to(dtype)
    values[:, -2:] = torch.finfo(dtype).max  # padding that must never win
    ids = torch.randint(-1, 1, (4, 9), generator=generator)
    ids[:, -2:] = -1
    ids[2] = -1  # a row without members
    upstream = torch.randn(4, 1, 5, generator=generator).to(dtype)

    def pooled_and_grad(fn):
        x = values.clone().requires_grad_(True)
        out = fn(x)
        out.backward(upstream)
        return out.detach(), x.grad

    fast, fast_grad = pooled_and_grad(lambda x: segment_max(x, ids, 1))
    scatter, scatter_grad = pooled_and_grad(lambda x: segment_max(x, ids, 2)[:, :1])
    assert torch.equal(fast, scatter) and torch.equal(fast_grad, scatter_grad)
    for b in range(4):
        members = (ids[b] >= 0).nonzero().flatten()
        if len(members) == 0:
            assert torch.equal(fast[b, 0], torch.zeros(5, dtype=dtype))
            assert not fast_grad[b].any()
            continue
        top = values[b, members].amax(0)
        assert torch.equal(fast[b, 0], top)
        for h in range(5):
            winners = [int(i) for i in members if values[b, i, h] == top[h]]
            for i in range(9):
                share = upstream[b, 0, h].float() / len(winners) if i in winners else 0.0
                assert float(fast_grad[b, i, h]) == pytest.approx(float(share), rel=1e-2, abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("num_segments", [1, 3])
def test_segment_relu_max_equals_segment_max_of_the_relu(dtype, num_segments):
    """The one-scatter max of ReLU outputs (the conv span extractor's) against the
    general path on ``relu(values)``: small integers (ties, zeros, negatives), padding at
    the dtype's extremes, a row without members; forward and gradient exactly equal."""
    generator = torch.Generator().manual_seed(5)
    values = torch.randint(-3, 4, (4, 11, 6), generator=generator).to(dtype)
    values[:, -2:] = torch.finfo(dtype).max
    ids = torch.randint(-1, num_segments, (4, 11), generator=generator)
    ids[:, -2:] = -1
    ids[1] = -1
    upstream = torch.randn(4, num_segments, 6, generator=generator).to(dtype)

    def pooled_and_grad(fn):
        x = values.clone().requires_grad_(True)
        out = fn(x)
        out.backward(upstream)
        return out.detach(), x.grad

    fast, fast_grad = pooled_and_grad(lambda x: segment_relu_max(x, ids, num_segments))
    plain, plain_grad = pooled_and_grad(lambda x: segment_max(torch.relu(x), ids, num_segments))
    assert torch.equal(fast, plain) and torch.equal(fast_grad, plain_grad)
    assert not fast[1].any() and (fast >= 0).all()


def test_segment_max_of_zero_gives_its_member_the_whole_gradient():
    """torch's scatter_reduce backward counts the initial value among the tied maxima
    even with include_self=False: a segment whose max was exactly 0 (the zeros it
    started from) gave its arg-max half the gradient. Regression test."""
    values = torch.tensor([[[-1.0], [0.0], [2.0], [5.0]]], requires_grad=True)
    pooled = segment_max(values, torch.tensor([[0, 0, 1, -1]]), 2)
    pooled.sum().backward()
    assert pooled.flatten().tolist() == [0.0, 2.0]
    assert values.grad.flatten().tolist() == [0.0, 1.0, 1.0, 0.0]
