"""Every benchmark of benchmarks/ runs in its quick mode (seconds) and prints its figure
lines, so a refactoring cannot silently break one (preprocess_speed.py once failed with
an ImportError that nothing ran into). They run one after another in one interpreter
(tests/script_runner.py: each as __main__ with its own argv and output, the environment
and working directory put back), since importing torch and fairseq in a process of its
own was most of each one's time; the processes each starts are its own as ever."""

import os
import re

import pytest

from conftest import ROOT
from script_runner import run_scripts

pytestmark = pytest.mark.research  # the benchmarks' quick modes (pytest.ini)

BENCHMARKS = ROOT / "benchmarks"
NUMBER = r"[-+]?[\d,]+(\.\d+)?"

# script -> the figure lines its quick run prints (regular expressions)
FIGURES = {
    "compile_speed.py": [
        rf"compiled: first step {NUMBER} s \(graph built\)",
        rf"step-time ratio compiled / eager \(process CPU time, median\): {NUMBER}"],
    "portable_inference.py": [
        rf"cold start portable \(torch encoder\) / hub: {NUMBER} \(goal <= 0.7\)",
        rf"cold start portable \(transformers encoder\) / hub: {NUMBER}",
        rf"pairs/s portable \(torch encoder\) / plain transformers: batch 1 {NUMBER}, "
        rf"batch 32 {NUMBER} \(goal >= 0.95\)",
        rf"pairs/s portable \(transformers encoder\) / plain transformers: batch 1 {NUMBER}, "
        rf"batch 32 {NUMBER}",
        rf"pairs/s ONNX Runtime / portable \(torch encoder\): batch 1 {NUMBER}, batch 32 {NUMBER}",
        rf"pairs/s span int8, ONNX Runtime / plain transformers, 1 thread\(s\): batch 1 {NUMBER}, "
        rf"batch 32 {NUMBER} \(goal >= 2.0\)",
        rf"pairs/s span int8, portable torch / plain int8, ONNX Runtime, 1 thread\(s\): batch 1 "
        rf"{NUMBER}, batch 32 {NUMBER} \(goal >= 0.95\)",
        rf"dev f1 \(onnx, \d+ examples\): float32 {NUMBER}, int8 {NUMBER}, drop {NUMBER}",
        rf"dev f1 \(portable, \d+ examples\): float32 {NUMBER}, int8 {NUMBER}, drop {NUMBER}"],
    "preprocess_speed.py": [
        rf"\| WikiText-2\+GLUE x N \| 300 \| {NUMBER} \|",
        rf"span preprocessing time / fairseq BPE\+preprocess time: {NUMBER}"],
    "head_overhead.py": [
        rf"^\s+32\s+\d+(\s+{NUMBER}){{6}}$",
        rf"step-time ratio roberta_span_base / roberta_base \(process CPU time, median\): "
        rf"T=32: {NUMBER}; max {NUMBER}"],
    "span_pretrain_speed.py": [
        rf"1\. masking span\s*: \d+ blocks of <= 64 tokens, {NUMBER} blocks/s",
        rf"masking \(slowest scheme\) / training: .* = {NUMBER}x",
        rf"SBO head: \+?{NUMBER}% of the masked-LM step"],
    "qa_speed.py": [
        rf"preprocess: \d+ questions, \d+ windows in {NUMBER} s",
        rf"sf / boundary = {NUMBER} .*span / boundary = {NUMBER}"],
    "convert_speed.py": [
        rf"import span_plugin.convert alone: peak RSS {NUMBER} MiB",
        rf"\| safetensors \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \|",
        rf"\| bin \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \|"],
    "span_pair_speed.py": [
        rf"full steps, sentential \+ phrasal / sentential \(CPU, median\): {NUMBER}",
        rf"phrasal head overhead = .*: {NUMBER}% \(target <= 10%\)"],
    "span_labeling_speed.py": [
        rf"full steps, span / token \(CPU time, median\): {NUMBER}",
        rf"span head overhead = .*: {NUMBER}%"],
    "wordpiece_speed.py": [
        rf"\| SST-2 train \| 300 \| {NUMBER} \| {NUMBER} \|",
        rf"WordPiece with spans / GPT-2 with spans, time: {NUMBER}"],
    "chunker_speed.py": [
        rf"CoNLL-2000 test, tagger POS: P {NUMBER} R {NUMBER} F1 {NUMBER}",
        rf"in-process encode, chunker: {NUMBER} sentences/s",
        rf"binarize CoLA train \(200 sentences\), 1 worker\(s\): greedy {NUMBER} s .* chunker "
        rf"{NUMBER} s"],
    "dense_span_head.py": [
        rf"speedup of packed cnn-cnn, wall \(cpu\): T=32: {NUMBER}x \({NUMBER}x cpu\) vs dense-gather"],
    "optimizer_step.py": [
        rf"update CPU time torch_adamw / adam \(median\): {NUMBER}"],
    "ngram_counting.py": [
        rf"ngram counting throughput: {NUMBER} tokens/s at 20,000 tokens"],
    "predict_large.py": [
        rf"tiny model 300 rows: sorted / file order {NUMBER}x rows/s, {NUMBER}x rows per CPU-second"],
    "onnx_graph_alone.py": [
        rf"1 thread\(s\), batch 1: peer {NUMBER} pairs/s \(1.000x the peer\), span {NUMBER} pairs/s "
        rf"\({NUMBER}x the peer\)",
        rf"1 thread\(s\), batch 32: peer {NUMBER} pairs/s"],
    "onnx_inference.py": [
        r"largest \|ONNX Runtime - torch\| logit over all pairs: [\d.]+e[-+]\d+",
        rf"ONNX Runtime / torch eager, pairs/s: batch 1: {NUMBER}x, batch 32: {NUMBER}x"],
}


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    """script -> its finished quick run (returncode, stdout with stderr); and whether
    benchmarks/RESULTS.md was left as it was (quick figures are not results)."""
    results_md = BENCHMARKS / "RESULTS.md"
    before = results_md.read_bytes()
    # one thread, as each benchmark's timings assume on a test worker's share of the cores
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # onnx_graph_alone.py times the graphs portable_inference.py built (one tiny model)
    shared = {"portable_inference.py": ["--work", tmp_path_factory.mktemp("portable_work")]}
    shared["onnx_graph_alone.py"] = shared["portable_inference.py"]
    order = sorted(FIGURES, key=lambda s: s != "portable_inference.py")
    runs = run_scripts({script: [BENCHMARKS / script, "--quick", *shared.get(script, [])]
                        for script in order},
                       tmp_path_factory.mktemp("quick_runs"), env=env, cwd=ROOT)
    return runs, results_md.read_bytes() == before


def test_every_benchmark_has_a_quick_mode_here():
    scripts = {p.name for p in BENCHMARKS.glob("*.py") if "--quick" in p.read_text()}
    # the GPU benchmarks' quick modes are run by tests/test_gpu_benchmarks.py, the
    # fine-tuning overhead's by tests/test_finetune_overhead.py
    elsewhere = {"gpu_throughput.py", "gpu_compile_check.py", "gpu_profile.py", "gpu_head.py", "host_work.py",
                 "hf_peer.py", "finetune_overhead.py", "gpu_predict.py", "gpu_graph_step.py"}
    assert scripts - elsewhere == set(FIGURES)


@pytest.mark.parametrize("script", list(FIGURES))
def test_quick_run_prints_its_figures(quick_runs, script):
    runs, _ = quick_runs
    run = runs[script]
    assert run.returncode == 0, f"{script} --quick exited {run.returncode}:\n{run.stdout[-4000:]}"
    for figure in FIGURES[script]:
        assert re.search(figure, run.stdout, re.M), f"{script}: no line {figure!r}:\n{run.stdout[-4000:]}"


def test_quick_runs_leave_the_results_file_alone(quick_runs):
    _, unchanged = quick_runs
    assert unchanged
