"""The GPU benchmarks and options, as far as a CPU shows it: the benchmarks run (their quick
modes, so a refactoring cannot silently break them), and the span model's host work per
update stays within plain RoBERTa's synchronisations."""

import re

import pytest

from conftest import ROOT
from script_runner import run_scripts

pytestmark = pytest.mark.research  # the GPU benchmarks' quick modes and code (pytest.ini)

BENCHMARKS = ROOT / "benchmarks"
PAIRS = "{pairs}"  # in a run's argv: a folder of its own for the pairs it builds

# test -> the benchmark command it reads; those of the collected tests run one after
# another in one interpreter (tests/script_runner.py), once for the module
RUNS = {
    "test_span_model_synchronises_no_more_often_than_plain":
        ["host_work.py", "--quick", "--optimizers", "adam", "torch_adamw"],
    "test_gpu_throughput_without_a_gpu_says_so_and_exits_0": ["gpu_throughput.py", "--results", ""],
    "test_gpu_compile_check_quick_compiled_equals_eager": ["gpu_compile_check.py", "--quick", "--data", PAIRS],
    "test_gpu_throughput_quick_trains_every_variant": ["gpu_throughput.py", "--quick", "--data", PAIRS],
    "test_hf_peer_quick_trains_on_the_same_pairs": ["hf_peer.py", "--quick", "--data", PAIRS],
    "test_host_work_loop_counts_one_read_an_update": ["host_work.py", "--loop", "--quick"],
    "test_gpu_profile_quick_reports_each_phase": ["gpu_profile.py", "--quick", "--variants", "span", "--data", PAIRS],
    "test_gpu_head_quick_times_each_formulation": ["gpu_head.py", "--quick", "--top", "200"],
    "test_gpu_predict_without_a_gpu_says_so_and_exits_0": ["gpu_predict.py"],
    "test_gpu_predict_quick_runs_both_paths": ["gpu_predict.py", "--quick"],
    "test_gpu_graph_step_without_a_gpu_says_so_and_exits_0": ["gpu_graph_step.py"],
    "test_gpu_graph_step_quick_pads_and_updates": ["gpu_graph_step.py", "--quick"],
}


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    wanted = {item.originalname for item in request.session.items
              if getattr(item, "module", None) is request.module} & set(RUNS)
    root = tmp_path_factory.mktemp("gpu_benchmarks")
    argvs = {name: [BENCHMARKS / argv[0], *(str(root / name / "pairs") if a == PAIRS else a
                                             for a in argv[1:])]
             for name, argv in RUNS.items() if name in wanted}
    return run_scripts(argvs, root, cwd=ROOT)


@pytest.fixture
def out(runs, request):
    """The output of this test's benchmark command (RUNS), which exited 0."""
    run = runs[request.node.originalname]
    assert run.returncode == 0, f"{run.args} exited {run.returncode}:\n{run.stdout[-4000:]}"
    return run.stdout


def test_span_model_synchronises_no_more_often_than_plain(out):
    """fairseq's Trainer.train_step of a tiny span model against plain RoBERTa, counted
    by the torch profiler: no nonzero / item() of the plugin's own per update; with
    --optimizer torch_adamw fewer operators than with fairseq's adam, no more syncs."""
    rows = {(m, o): (float(ops), float(kernels), float(syncs), detail) for m, o, ops, kernels, syncs, detail in
            re.findall(r"^\s+tiny\s+(span|plain)\s+(\w+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*(.*)$", out, re.M)}
    assert set(rows) == {(m, o) for m in ("span", "plain") for o in ("adam", "torch_adamw")}, out
    for o in ("adam", "torch_adamw"):
        assert rows["span", o][2] <= rows["plain", o][2], out
        assert "nonzero" not in rows["span", o][3], out
        assert f"span / plain per update ({o}): tiny: operators x" in out
    for m in ("span", "plain"):
        assert rows[m, "torch_adamw"][0] < rows[m, "adam"][0], out
        assert rows[m, "torch_adamw"][2] <= rows[m, "adam"][2], out


def test_gpu_throughput_without_a_gpu_says_so_and_exits_0(out):
    assert "no GPU on this machine" in out


def test_gpu_compile_check_quick_compiled_equals_eager(out):
    """The GPU check's own code, on the CPU with aot_eager: real batches of a long-pair
    folder it builds (Wikipedia paragraphs), compiled against eager within tolerance."""
    assert "compiled = eager within tolerance" in out, out[-2000:]


@pytest.mark.slow
def test_gpu_throughput_quick_trains_every_variant(out):
    """Builds its long-pair folder from the shared Wikipedia text, then fairseq-train of
    the span and plain tiny models, and the span model with --amp and torch_adamw,
    through its own launch code."""
    assert "quick check: every run trained" in out, out[-3000:]
    for variant in ("span", "plain", "span\\+amp"):
        assert re.search(rf"\| tiny \| {variant} \| 1 \| [\d,]+ \|", out), out[-3000:]


@pytest.mark.slow
def test_hf_peer_quick_trains_on_the_same_pairs(out):
    """The peer benchmark's own code: Hugging Face's Trainer of a tiny
    RobertaForSequenceClassification on gpu_throughput's pairs, read back from fairseq's
    binarized folder, on the CPU."""
    assert re.search(r"HF Trainer RobertaForSequenceClassification tiny, batch 4: [\d.]+ updates/s", out), out[-3000:]


@pytest.mark.slow
def test_host_work_loop_counts_one_read_an_update(out):
    """fairseq-train's own loop (fairseq_cli.train.main) of a tiny span and plain model
    under --amp: fairseq's update reads the device several times an update, the plugin's
    once."""
    counts = re.search(r"fairseq -> plugin: tiny span amp: (\d+) -> (\d+); tiny plain amp: (\d+) -> (\d+)", out)
    assert counts, out[-3000:]
    span_before, span_after, plain_before, plain_after = map(int, counts.groups())
    assert span_after == plain_after == 1
    assert span_before > 1 and plain_before > 1


def test_gpu_profile_quick_reports_each_phase(out):
    """The profile's own code on the CPU (no device events there): fairseq's Trainer of
    the tiny span model, its phases found by their record_function names."""
    assert re.search(r"== span: [\d.]+ ms/update", out), out[-3000:]
    for phase in ("forward", "backward", "optimizer", "other"):
        assert re.search(rf"phase {phase}: [\d.]+ ms host", out), out[-3000:]
    # The host's own time by operator, the encoder's matmuls among them.
    listed = re.findall(r"^ +[\d.]+ ms +[\d.]+x  (\S.*)$", out.split("host, by self time per update:")[1], re.M)
    assert len(listed) == 15 and {"aten::mm", "aten::addmm"} & set(listed), out[-3000:]
    assert re.search(r"== span: [\d.]+ ms/update \([\d.]+ updates/s, \d+ tokens an update\)", out), out[-3000:]


def test_gpu_head_quick_times_each_formulation(out):
    """The head-only benchmark on the CPU: the packed and dense heads compute the same
    function on segmenter-like spans, each is timed against a transformer layer, and the
    packed head's largest operators are listed."""
    # Every operator listed (the ranking of tiny CPU operators is noise): the packed
    # head's within-span max is among them.
    gap = float(re.search(r"packed against dense output: max \|difference\| (\S+)", out).group(1))
    assert gap < 1e-5, out[-3000:]
    for name in ("transformer layer", "packed", "dense"):
        assert re.search(rf"^\| {name} \| [\d.]+ \| [\d.]+ \|$", out, re.M), out[-3000:]
    assert re.search(r"^ +[\d.]+ ms  aten::scatter_reduce", out.split("packed: largest")[1], re.M), out[-3000:]


def test_gpu_profile_counts_overlapping_kernels_once():
    from gpu_profile import busy_within, merged

    busy = merged([(5, 8), (0, 2), (1, 3), (7, 10), (20, 21)])
    assert busy == [[0, 3], [5, 10], [20, 21]]
    assert busy_within(busy, 2, 6) == 2  # 2-3 and 5-6
    assert busy_within(busy, 10, 20) == 0
    assert busy_within(busy, -5, 50) == 9


def test_gpu_profile_interleaves_variants_and_pairs_them_by_round():
    """Every variant warms up, then the variants take turns round by round; the span /
    plain ratio is plain's median ms over span's within each round."""
    from gpu_profile import paired_ratios, timed_rounds

    calls = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def train_step(self, samples):
            calls.append((self.name, samples[0]["ntokens"]))

    def batches(tokens):
        while True:
            yield {"ntokens": tokens}

    runs = {"span": (Recorder("span"), batches(10)), "plain": (Recorder("plain"), batches(12))}
    out = timed_rounds(runs, warmup=1, timed=4, rounds=2, device="cpu")
    assert [name for name, _ in calls] == ["span", "plain"] + ["span"] * 2 + ["plain"] * 2 + ["span"] * 2 + ["plain"] * 2
    assert out["span"]["tokens"] == 10 and out["plain"]["tokens"] == 12
    assert len(out["span"]["ms"]) == 4 and len(out["span"]["round_ms"]) == 2

    timings = {"span": {"round_ms": [10.0, 20.0, 12.0]}, "plain": {"round_ms": [9.0, 19.0, 12.0]},
               "span+compile": {"round_ms": [5.0]}}
    median, low, high = paired_ratios(timings)[("span", "plain")]
    assert (median, low, high) == (0.95, 0.9, 1.0)
    assert ("span+compile", "plain+compile") not in paired_ratios(timings)
    # --amp variants are paired with their plain twins and with themselves without --amp
    timings.update({"span+compile+amp": {"round_ms": [4.0]}, "plain+compile+amp": {"round_ms": [3.8]}})
    assert set(paired_ratios(timings)) == {("span", "plain"), ("span+compile+amp", "plain+compile+amp"),
                                           ("span+compile+amp", "span+compile")}
    assert paired_ratios(timings)[("span+compile+amp", "span+compile")] == (1.25, 1.25, 1.25)


def test_gpu_results_keep_earlier_runs_notes(tmp_path):
    """A new GPU table replaces the section's opening, not its subsections."""
    from gpu_throughput import SECTION, write_results

    path = tmp_path / "RESULTS.md"
    path.write_text(f"# R\n\n{SECTION}\n\nold table\n\n### Second run\n\nnotes\n\n## Next\n\nx\n")
    write_results(path, "new table", "python benchmarks/gpu_throughput.py")
    text = path.read_text()
    assert "new table" in text and "old table" not in text
    assert "### Second run\n\nnotes" in text and "## Next\n\nx" in text


def test_gpu_predict_without_a_gpu_says_so_and_exits_0(out):
    assert "gpu_predict: no GPU on this machine" in out


def test_gpu_predict_quick_runs_both_paths(out):
    """The portable predictor (its network cast to bf16, sorted batches) and the
    transformers pipeline of a plain encoder, on real rows, at two batch sizes."""
    rows = re.findall(rf"^bfloat16\s+(4|16)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", out, re.M)
    assert [r[0] for r in rows] == ["4", "16"], out[-3000:]
    assert all(float(x) > 0 for r in rows for x in r[1:]), out[-3000:]


def test_gpu_graph_step_without_a_gpu_says_so_and_exits_0(out):
    assert "gpu_graph_step: no GPU on this machine" in out


def test_gpu_graph_step_quick_pads_and_updates(out):
    """The update the graph would capture, run eagerly on the CPU on real long pairs: a
    batch padded to a longer static shape keeps its loss, and the update lowers it."""
    losses = re.search(r"loss of a batch ([\d.]+), padded by 5 tokens to a static shape "
                       r"([\d.]+)", out)
    assert losses and abs(float(losses[1]) - float(losses[2])) < 1e-4, out[-3000:]
    steps = re.search(r"loss over 4 eager updates on one batch \(eval mode, lr 1e-3\): "
                      r"([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+)", out)
    assert steps and float(steps[4]) < float(steps[1]), out[-3000:]
