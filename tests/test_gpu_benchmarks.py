"""The GPU work of issue 40, as far as a CPU shows it: the benchmarks run (their quick
modes, so a refactoring cannot silently break them), and the span model's host work per
update stays within plain RoBERTa's synchronisations."""

import re
import sys

import pytest

from conftest import ROOT, run_cli

BENCHMARKS = ROOT / "benchmarks"


def bench(script, *args):
    return run_cli(sys.executable, BENCHMARKS / script, *args).stdout


def test_span_model_synchronises_no_more_often_than_plain():
    """fairseq's Trainer.train_step of a tiny span model against plain RoBERTa, counted
    by the torch profiler: no nonzero / item() of the plugin's own per update."""
    out = bench("host_work.py", "--quick")
    rows = {m: (float(ops), float(kernels), float(syncs), detail) for m, ops, kernels, syncs, detail in
            re.findall(r"^\s+tiny\s+(span|plain)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*(.*)$", out, re.M)}
    assert set(rows) == {"span", "plain"}, out
    assert rows["span"][2] <= rows["plain"][2], out
    assert "nonzero" not in rows["span"][3], out
    assert "span / plain per update: tiny: operators x" in out


def test_gpu_throughput_without_a_gpu_says_so_and_exits_0():
    out = bench("gpu_throughput.py", "--results", "")
    assert "no GPU on this machine" in out


def test_gpu_compile_check_quick_compiled_equals_eager(tmp_path):
    """The GPU check's own code, on the CPU with aot_eager: real batches of a long-pair
    folder it builds (Wikipedia paragraphs), compiled against eager within tolerance."""
    out = bench("gpu_compile_check.py", "--quick", "--data", tmp_path / "pairs")
    assert "compiled = eager within tolerance" in out, out[-2000:]


@pytest.mark.slow
def test_gpu_throughput_quick_trains_every_variant(tmp_path):
    """Builds its long-pair folder from the shared Wikipedia text, then fairseq-train of
    the span and plain tiny models through its own launch code."""
    out = bench("gpu_throughput.py", "--quick", "--data", tmp_path / "pairs")
    assert "quick check: every run trained" in out, out[-3000:]
    assert re.search(r"\| tiny \| span \| 1 \| [\d,]+ \|", out), out[-3000:]
