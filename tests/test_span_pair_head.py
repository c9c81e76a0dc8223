"""The span-pair heads against a plain loop reference (float64): values and gradients,
both feature sets, overlapping and nested phrases, any number of pairs per example."""

import pytest
import torch

from span_plugin.modules.span_pair_heads import PhrasePairHead, SpanPairHeads, pair_features


def random_batch(seed=0, batch=4, seq_len=11, dim=6):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, seq_len, dim, generator=g, dtype=torch.float64,
                           requires_grad=True)
    counts = [3, 0, 5, 1][:batch]  # an example with no pair too
    width = max(counts)
    phrases = torch.zeros(batch, width, 4, dtype=torch.long)
    for b, n in enumerate(counts):
        for k in range(n):
            for side in (0, 2):
                s = int(torch.randint(0, seq_len - 1, (1,), generator=g))
                e = int(torch.randint(s + 1, min(seq_len, s + 5) + 1, (1,), generator=g))
                phrases[b, k, side:side + 2] = torch.tensor([s, e])
    phrases[0, 1] = phrases[0, 0]  # a repeated pair
    phrases[2, 1, 0:2] = torch.tensor([2, 9])  # nests and overlaps others
    phrases[2, 2, 0:2] = torch.tensor([4, 5])
    valid = phrases[..., 1] > phrases[..., 0]
    return features, phrases, valid


def reference_features(features, phrases, valid, kind):
    rows = []
    for b in range(features.size(0)):
        for k in range(phrases.size(1)):
            if not valid[b, k]:
                continue
            s0, e0, s1, e1 = phrases[b, k].tolist()
            src, tgt = features[b, s0:e0], features[b, s1:e1]
            if kind == "max4":
                hs, ht = src.max(0).values, tgt.max(0).values
                rows.append(torch.cat([hs, ht, hs * ht, (hs - ht).abs()]))
            else:
                rows.append(torch.cat([src.mean(0), tgt.mean(0)]))
    return torch.stack(rows)


@pytest.mark.parametrize("kind", ["max4", "mean2"])
def test_pair_features_match_loop_reference(kind):
    features, phrases, valid = random_batch()
    got = pair_features(features, phrases, valid, kind)
    (grad_got,) = torch.autograd.grad((got * torch.linspace(-1, 2, got.numel(), dtype=got.dtype)
                                       .view_as(got)).sum(), features)
    want = reference_features(features, phrases, valid, kind)
    (grad_want,) = torch.autograd.grad((want * torch.linspace(-1, 2, want.numel(), dtype=want.dtype)
                                        .view_as(want)).sum(), features)
    assert got.shape == (int(valid.sum()), (4 if kind == "max4" else 2) * features.size(-1))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad_got, grad_want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["max4", "mean2"])
def test_head_logits_and_parameter_gradients_match_loop(kind):
    torch.manual_seed(0)
    features, phrases, valid = random_batch(seed=1)
    head = PhrasePairHead(features.size(-1), 3, kind, inner_dim=5, dropout=0.0).double()
    target = torch.tensor([0, 2, 1, 1, 0, 2, 1, 0, 2])[: int(valid.sum())]
    loss = torch.nn.functional.cross_entropy(head(features, phrases, valid), target)
    got = torch.autograd.grad(loss, [features, *head.parameters()])

    x = reference_features(features, phrases, valid, kind)
    ref = head.out_proj(torch.tanh(head.dense(x)))
    want = torch.autograd.grad(torch.nn.functional.cross_entropy(ref, target),
                               [features, *head.parameters()])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-12)


def test_both_heads_and_batch_order():
    """Packed rows follow (example, pair) order, the order of target[target != -100]."""
    features, phrases, valid = random_batch(seed=2)
    heads = SpanPairHeads(features.size(-1), 3, 2, dropout=0.0).double().eval()
    out = heads(features, phrases, valid)
    assert out["phrasal"].shape == (int(valid.sum()), 3)
    assert out["sentential"].shape == (features.size(0), 2)
    # Each example alone gives the same rows as in the batch.
    rows = [heads(features[b:b + 1], phrases[b:b + 1], valid[b:b + 1])["phrasal"]
            for b in range(features.size(0))]
    torch.testing.assert_close(out["phrasal"], torch.cat(rows), rtol=0, atol=1e-12)
    only_sentential = SpanPairHeads(features.size(-1), 0, 2).double()
    assert only_sentential(features, phrases, valid)["phrasal"] is None
