"""The benchmark's dense [B, r, l, H] formulations compute what the packed cnn-cnn
encoder computes on clip_spans(spans, r, l), so timing them compares like with like."""

import importlib.util

import pytest
import torch

from span_plugin.modules import build_span_encoder, clip_spans

from conftest import ROOT

pytestmark = pytest.mark.research  # the benchmark's reference formulations (pytest.ini)


def load_benchmark():
    spec = importlib.util.spec_from_file_location("dense_span_head", ROOT / "benchmarks" / "dense_span_head.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("r, l", [(64, 16), (3, 2), (1, 1)])
def test_dense_formulations_match_packed_encoder(r, l):
    bench = load_benchmark()
    torch.manual_seed(0)
    encoder = build_span_encoder("cnn-cnn", 16).double()
    with torch.no_grad():
        encoder.within_span.conv.bias.normal_()  # ReLU(bias) leaks would show
        encoder.across_spans.conv.bias.normal_()
    generator = torch.Generator().manual_seed(3)
    spans = bench.segmentation_like_spans(4, 40, generator)
    spans[1, 2:] = 0  # an example with two spans
    spans[2] = 0  # an all-padding example
    spans[3, 0] = torch.tensor([1, 30])  # a span longer than l
    spans[3, 1:] = 0
    features = torch.randn(4, 40, 16, dtype=torch.float64, generator=generator)

    upstream = torch.randn(4, 16, dtype=torch.float64, generator=generator)
    results = []
    for encode in (
        lambda f: encoder(f, clip_spans(spans, r, l)),
        lambda f: bench.dense_span_encoder(encoder, f, spans, r, l),
        lambda f: bench.dense_span_encoder_loop_filled(encoder, f, spans, r, l),
    ):
        leaf = features.clone().requires_grad_(True)
        output = encode(leaf)
        (output * upstream).sum().backward()
        results.append((output.detach(), leaf.grad))
    for output, grad in results[1:]:
        torch.testing.assert_close(output, results[0][0])
        torch.testing.assert_close(grad, results[0][1])
