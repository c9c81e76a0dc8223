"""The span boundary head against a plain loop written from SpanBERT's definition:
values and gradients (float64)."""

import torch
import torch.nn.functional as F

from span_plugin.modules import SpanBoundaryHead, masked_runs


def reference(head, features, mask, weight):
    """Token by token: walk to the nearest unmasked neighbours, then the two layers."""
    rows = []
    B, T, _ = features.shape
    for b in range(B):
        for i in range(T):
            if not mask[b, i]:
                continue
            left = i
            while left > 0 and mask[b, left]:
                left -= 1
            right = i
            while right < T - 1 and mask[b, right]:
                right += 1
            rel = min(i - left - 1, head.max_positions - 1)
            h = torch.cat([features[b, left], features[b, right], head.position_embeddings.weight[rel]])
            h = F.layer_norm(F.gelu(h @ head.dense.weight.T + head.dense.bias), (head.dense.out_features,),
                             head.layer_norm1.weight, head.layer_norm1.bias, head.layer_norm1.eps)
            h = F.layer_norm(F.gelu(h @ head.out_proj.weight.T + head.out_proj.bias), (head.out_proj.out_features,),
                             head.layer_norm2.weight, head.layer_norm2.bias, head.layer_norm2.eps)
            rows.append(h @ weight.T + head.bias)
    return torch.stack(rows)


def test_head_matches_the_loop_reference_values_and_gradients():
    torch.manual_seed(0)
    B, T, D, V = 3, 17, 8, 11
    head = SpanBoundaryHead(D, V, max_positions=4).double()
    with torch.no_grad():
        head.bias.normal_()
        for ln in (head.layer_norm1, head.layer_norm2):
            ln.weight.normal_()
            ln.bias.normal_()
    features = torch.randn(B, T, D, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(V, D, dtype=torch.float64, requires_grad=True)
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[0, 2:5] = True          # a run of 3
    mask[0, 7] = True            # a run of 1
    mask[1, 1:8] = True          # longer than the position table (offsets clamped)
    mask[1, 9:11] = True
    mask[2, 15:] = True          # touches the end of the row (right boundary clamped)
    probe = torch.randn(int(mask.sum()), V, dtype=torch.float64)

    got = head(features, mask, weight)
    want = reference(head, features, mask, weight)
    torch.testing.assert_close(got, want)

    params = [features, weight] + list(head.parameters())
    g_got = torch.autograd.grad((got * probe).sum(), params)
    g_want = torch.autograd.grad((want * probe).sum(), params)
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b)


def test_masked_runs_gives_each_token_its_run_boundaries():
    mask = torch.tensor([[0, 1, 1, 0, 1, 0], [1, 0, 0, 0, 1, 1]], dtype=torch.bool)
    batch, position, left, right = masked_runs(mask)
    assert batch.tolist() == [0, 0, 0, 1, 1, 1]
    assert position.tolist() == [1, 2, 4, 0, 4, 5]
    assert left.tolist() == [0, 0, 3, 0, 3, 3]
    assert right.tolist() == [3, 3, 5, 1, 5, 5]


def test_head_in_half_precision_follows_the_features_dtype():
    head = SpanBoundaryHead(8, 5).to(torch.bfloat16)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[:, 2:4] = True
    out = head(torch.randn(2, 6, 8, dtype=torch.bfloat16), mask, torch.randn(5, 8, dtype=torch.bfloat16))
    assert out.shape == (4, 5) and out.dtype == torch.bfloat16
