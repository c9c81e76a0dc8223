"""Every rank compares its data, code and arguments with the others before training
(span_plugin/runtime/rank_agreement.py): two CPU "nodes" (two torchrun launches of one
process each, gloo) where node rank 1's copy of the data folder differs from node rank
0's by one label, one dictionary line, or one missing file; both stop before training
with the line that names the node, the file and both values."""

import os
import shutil
import subprocess
import time

import pytest

from conftest import BIN, GLUE, ROOT, run_cli
from test_distributed import free_port
from test_task_data import spec_args
from test_task_train import span_args

from span_plugin.runtime.rank_agreement import disagreement, node_rank


def _digest(files, host="h", **extra):
    return {"about": {"folders": ["/data/SST"], "host": host},
            "compared": {"versions": {"torch": "2"}, "arguments": {"model": {"arch": "a", **extra}},
                         "data": {"0": {"record": {"labels": {"names": ["0", "1"]}},
                                        "files": files}}}}


def test_the_line_names_the_odd_node_the_file_and_both_values():
    same = {"input0/dict.txt": "a" * 64, "label/train.bin": "b" * 64}
    stale = dict(same, **{"label/train.bin": "c" * 64})
    assert disagreement([_digest(same), _digest(same)], [0, 1]) is None
    line = disagreement([_digest(same, "n0"), _digest(same, "n0"), _digest(stale, "n1"),
                         _digest(stale, "n1")], [0, 0, 1, 1])
    assert line.startswith("the ranks differ before training: file label/train.bin of data "
                           "folder /data/SST: node rank 1 (global ranks 2, 3; n1) has sha256 "
                           "cccccccccccc, node rank 0 (global ranks 0, 1; n0) have sha256 "
                           "bbbbbbbbbbbb. Every rank stops"), line
    # the odd one out is the rank whose value the others do not share, rank 0 included
    gone = dict(same)
    del gone["input0/dict.txt"]
    gone["input0/dict.txt"] = "missing"
    line = disagreement([_digest(gone, "n0"), _digest(same, "n1"), _digest(same, "n2")], [0, 1, 2])
    assert "node rank 0 (global rank 0; n0) has no such file, node rank 1 (global rank 1; n1) " \
           "and node rank 2 (global rank 2; n2) have sha256 aaaaaaaaaaaa" in line, line
    # an argument, and more than one difference
    line = disagreement([_digest(same, max_positions=128), _digest(stale, max_positions=64)],
                        [0, 1])
    assert "model argument max_positions: node rank 1 (global rank 1; h) has 64, node rank 0 " \
           "(global rank 0; h) has 128 (and 1 more difference: file label/train.bin" in line, line


def test_arguments_compared_leave_out_what_differs_from_node_to_node():
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from span_plugin.runtime.rank_agreement import arguments

    def parsed(data, save, *extra):
        argv = [data, "--user-dir", str(ROOT / "span_plugin"), "--task", "spanbert_masked_lm",
                "--criterion", "spanbert_masked_lm", "--arch", "roberta_spanbert_base", "--cpu",
                "--save-dir", save, "--tensorboard-logdir", save, "--device-id", "0",
                "--max-positions", "64", *extra]
        args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
        return arguments(convert_namespace_to_omegaconf(args))

    node0 = parsed("/a/data-bin", "/a/runs", "--distributed-rank", "0", "--num-workers", "1")
    node1 = parsed("/b/data-bin", "/b/runs", "--distributed-rank", "1", "--num-workers", "4",
                   "--encoder-json", "/b/encoder.json")
    assert node0 == node1
    assert node0["model"]["max_positions"] == 64 and node0["task"]["masking"] == "span"
    assert parsed("/a/data-bin", "/a/runs", "--dropout", "0.3") != node0
    assert parsed("/a/data-bin", "/a/runs", "--sbo-weight", "0") != node0


def test_node_rank_from_torchrun_or_local_world_size():
    assert node_rank(5, {"GROUP_RANK": "2", "LOCAL_WORLD_SIZE": "4"}) == 2
    assert node_rank(5, {"LOCAL_WORLD_SIZE": "2"}) == 2
    assert node_rank(5, {}) == 5


def _table(folder, flip=False):
    """A span-preprocess table folder of 40 real SST-2 rows (one label flipped)."""
    rows = (GLUE / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()[:41]
    if flip:
        text, label = rows[5].rsplit("\t", 1)
        rows[5] = f"{text}\t{1 - int(label)}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    tsv = folder.parent / f"{folder.name}.tsv"
    tsv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    run_cli("span-preprocess", "table", "--out", folder, "--name", "SST", "--train", tsv,
            "--valid", tsv, "--text-columns", "sentence", "--label-column", "label", *spec_args())
    return folder


def _two_nodes(tmp_path, data0, data1, timeout=240):
    """Node ranks 0 and 1 (one CPU process each) of one torchrun run, each on its own
    data folder: (exit status, output) of each."""
    port = free_port()
    procs = []
    for node, data in enumerate((data0, data1)):
        args = span_args(data, tmp_path / f"save{node}", "--batch-size", "8", max_update=2)
        env = dict(os.environ, OMP_NUM_THREADS="1", PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        procs.append(subprocess.Popen(
            [str(BIN / "torchrun"), "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node",
             "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
             str(ROOT / "tests" / "dist_worker.py"), str(tmp_path / f"params{node}"),
             *map(str, args)],
            env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    start, out = time.monotonic(), []
    for p in procs:
        try:
            out.append(p.communicate(timeout=max(1, timeout - (time.monotonic() - start)))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"the two nodes still ran after {timeout} s")
    return [(p.returncode, o) for p, o in zip(procs, out)], time.monotonic() - start


def _error_lines(out):
    return [line for line in out.splitlines() if "the ranks differ before training" in line]


@pytest.mark.slow
@pytest.mark.parametrize("change", ["label", "dictionary line", "missing file"])
def test_a_node_with_other_data_stops_every_rank_before_training(tmp_path, change):
    data0 = _table(tmp_path / "node0" / "SST-bin")
    if change == "label":
        data1 = _table(tmp_path / "node1" / "SST-bin", flip=True)
        name = "label/train.bin"
    else:
        data1 = tmp_path / "node1" / "SST-bin"
        shutil.copytree(data0, data1)
        if change == "dictionary line":
            name = "input0/dict.txt"
            lines = (data1 / name).read_text(encoding="utf-8").splitlines(keepends=True)
            symbol, count = lines[100].split(" ", 1)
            lines[100] = f"{symbol} {int(count) + 1}\n"
            (data1 / name).write_text("".join(lines), encoding="utf-8")
        else:
            name = "input0/valid.spans.bin"
            (data1 / name).unlink()
    results, seconds = _two_nodes(tmp_path, data0, data1)
    for node, (status, out) in enumerate(results):
        assert status != 0, f"node {node} went on:\n{out[-3000:]}"
        lines = _error_lines(out)
        assert len(lines) == 1, f"node {node}:\n{out[-4000:]}"
        line = lines[0]
        assert f"file {name} of data folder {data1}" in line, line
        assert "node rank 1 (global rank 1;" in line and "node rank 0 (global rank 0;" in line, line
        assert ("has no such file" if change == "missing file" else "has sha256 ") in line, line
        assert line.count("sha256 ") == (1 if change == "missing file" else 2), line
        assert "begin training epoch" not in out and "num_updates" not in out, out[-3000:]
    assert not list(tmp_path.glob("params*.pt"))  # no rank got to the end
    print(f"{change}: both nodes stopped after {seconds:.1f} s: {line}")
    assert seconds < 120
