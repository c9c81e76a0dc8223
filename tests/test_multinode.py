"""Several nodes on this machine (docs/DISTRIBUTED.md): two launches of the same recipe,
NNODES=2 and NODE_RANK 0 and 1, each in its own folder (no shared disk), CPU ranks over
gloo. They train to the weights and dev figure of one process accumulating the same
batches (--update-freq), a rank killed mid-run restarts the group from checkpoint_last.pt
(MAX_RESTARTS) and ends where an uninterrupted run ends, and every way of not meeting ends
every node within DIST_TIMEOUT with one line naming it."""

import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest
import torch

from conftest import BIN, GLUE, GPT2_BPE, ROOT, run_cli

WNLI = ROOT / "recipes" / "glue" / "WNLI.sh"
TINY = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "2"]
# no dropout: the ranks and the one process would draw different masks
DETERMINISTIC = ["--dropout", "0", "--attention-dropout", "0", "--span-dropout", "0",
                 "--lr", "1e-4", "--batch-size", "4"]
BOUND = 120  # no test waits longer for a launch


def free_ports():
    """A free port whose next one is free too (the meeting and torchrun's store)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue


@pytest.fixture(scope="module")
def wnli(tmp_path_factory):
    """The first 80 train and 40 dev rows of real WNLI, binarized once."""
    root = tmp_path_factory.mktemp("wnli")
    (root / "glue" / "WNLI").mkdir(parents=True)
    for name, rows in (("train", 80), ("dev", 40)):
        lines = (GLUE / "WNLI" / f"{name}.tsv").read_text(encoding="utf-8").splitlines(True)
        (root / "glue" / "WNLI" / f"{name}.tsv").write_text("".join(lines[: rows + 1]))
    data = root / "data-bin" / "WNLI"
    run_cli("span-preprocess", "glue", "--task", "WNLI", "--glue-dir", root / "glue", "--out", data,
            "--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe", GPT2_BPE / "vocab.bpe",
            "--srcdict", GPT2_BPE / "dict.txt", "--workers", "1")
    return root


def recipe_env(wnli, **extra):
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "FROM_SCRATCH": "1",
            "GLUE_DIR": str(wnli / "glue"), "DATA_DIR": str(wnli / "data-bin" / "WNLI"),
            "BPE_DIR": str(GPT2_BPE), "WORKERS": "1", "TEST_PREDICTIONS": "0",
            "OMP_NUM_THREADS": "1", **{k: str(v) for k, v in extra.items()}}


def start(command, cwd, env):
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([str(c) for c in command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(procs, bound=BOUND):
    """(exit status, output) of each process, all ended within ``bound`` seconds."""
    deadline, out = time.monotonic() + bound, []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"a launch still ran after {bound} s") from None
        out.append((p.returncode, text))
    return out


def nodes(wnli, tmp_path, nproc, args, gpus=None, **env):
    """Two launches of the WNLI recipe, node ranks 0 and 1, each in its own folder: CPU
    ranks, or ``gpus`` (node rank r sees GPU gpus[r])."""
    port = free_ports()
    device = ["--cpu"] if gpus is None else []
    return [start(["bash", WNLI, *device, *TINY, *DETERMINISTIC, *args], tmp_path / f"node{rank}",
                  recipe_env(wnli, NNODES=2, NODE_RANK=rank, NPROC_PER_NODE=nproc,
                             MASTER_ADDR="127.0.0.1", MASTER_PORT=port, DIST_TIMEOUT=30,
                             **({} if gpus is None else {"CUDA_VISIBLE_DEVICES": gpus[rank]}), **env))
            for rank in (0, 1)]


def one_process(wnli, tmp_path, args, cpu=True, **env):
    """The recipe's single process (NNODES 1) in tmp_path/one: its run folder and log."""
    (tmp_path / "one").mkdir()
    log = run_cli("bash", WNLI, *(["--cpu"] if cpu else []), *TINY, *DETERMINISTIC, *args,
                  cwd=tmp_path / "one", env=recipe_env(wnli, **env)).stdout
    return tmp_path / "one" / "runs" / "WNLI", log


def weights(run):
    from span_plugin.convert.safe_load import load_checkpoint

    return load_checkpoint(run / "checkpoints" / "checkpoint_last.pt")["model"]


def same_training(nodes_run, one_run, log0, log1, clean=True, within=1e-5):
    """Node rank 0 holds the single process's weights (within 1e-5) and dev figure;
    node rank 1 wrote nothing but its log."""
    a, b = weights(nodes_run), weights(one_run)
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in b)
    print(f"largest parameter difference, nodes vs one process: {worst:.2e}")
    assert a.keys() == b.keys() and worst < within
    dev = json.loads((nodes_run / "results.json").read_text())["dev"]["dev"]
    one_dev = json.loads((one_run / "results.json").read_text())["dev"]["dev"]
    assert (dev if within <= 1e-5 else dev["accuracy"]) == (one_dev if within <= 1e-5 else one_dev["accuracy"])
    assert "node rank 1 of 2 done; node rank 0 writes the checkpoints" in log1
    assert re.search(r"distributed init \(rank [1-9]\)", log1)
    assert not clean or "Traceback" not in log0 + log1


@pytest.mark.slow
def test_two_nodes_of_two_processes_train_as_one_process_with_update_freq_4(wnli, tmp_path):
    args = ["--batch-size", "8", "--max-update", "6"]
    a, b = finish(nodes(wnli, tmp_path, 2, args))
    assert a[0] == 0 and b[0] == 0, (a[1][-3000:], b[1][-3000:])
    one, log = one_process(wnli, tmp_path, [*args, "--update-freq", "4"])
    # both count 8 rows x 4 processes (or 4 steps) an update, not the recipe's 16
    schedule = re.search(r"schedule: .*", a[1]).group(0)
    assert "(10 epochs of 80 train rows, 32 rows per update)" in schedule, schedule
    assert schedule in log
    same_training(tmp_path / "node0" / "runs" / "WNLI", one, a[1], b[1])
    assert sorted(p.name for p in (tmp_path / "node1" / "runs" / "WNLI").iterdir()) == ["train.node1.log"]


def workers(folder):
    """The pids of the training processes started in ``folder`` (torchrun's children and
    their data loaders)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            # ``-m span_plugin.cli.launch worker`` (not the torchrun that names it)
            if b"span_plugin.cli.launch" in cmd and cmd[cmd.index(b"span_plugin.cli.launch") + 1:][:1] == [b"worker"] \
                    and os.readlink(f"/proc/{pid}/cwd") == str(folder):
                out.append(int(pid))
        except OSError:
            continue
    return out


@pytest.mark.slow
def test_a_rank_killed_mid_run_restarts_the_group_from_the_last_checkpoint(wnli, tmp_path):
    """Two nodes of one process each, node rank 1's process SIGKILLed after the first
    checkpoint: both nodes meet again, resume checkpoint_last.pt (node rank 1 has none:
    rank 0's is broadcast) and end with the weights of one process with --update-freq 2."""
    args = ["--max-update", "24", "--save-interval-updates", "4"]
    procs = nodes(wnli, tmp_path, 1, args, MAX_RESTARTS=1)
    last = tmp_path / "node0" / "runs" / "WNLI" / "checkpoints" / "checkpoint_last.pt"
    deadline = time.monotonic() + BOUND
    while not last.exists() and time.monotonic() < deadline and procs[1].poll() is None:
        time.sleep(0.02)
    killed = workers(tmp_path / "node1")
    assert killed, "node rank 1 had no training process"
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    a, b = finish(procs)
    assert a[0] == 0 and b[0] == 0, (a[1][-3000:], b[1][-3000:])
    for rank, (_, log) in enumerate((a, b)):
        assert f"on node rank {rank} of 2 (1 processes, MASTER_ADDR=127.0.0.1" in log
        assert "restart 1 of MAX_RESTARTS=1, from the last checkpoint" in log, log[-3000:]
    assert re.search(r"Loaded checkpoint \S+checkpoint_last.pt \(epoch \d+ @ [1-9]\d* updates\)", a[1])
    # both starts compared the ranks' data (docs/DISTRIBUTED.md) before training
    assert a[1].count("2 ranks agree on their data, code and arguments") == 2, a[1][-3000:]
    one, _ = one_process(wnli, tmp_path, [*args, "--update-freq", "2"])
    same_training(tmp_path / "node0" / "runs" / "WNLI", one, a[1], b[1], clean=False)


def launch(rank, port, *args, cwd=None, **env):
    """The launcher alone (what train_resumably runs), DIST_TIMEOUT 5 s."""
    settings = {**os.environ, "NNODES": "2", "NODE_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "NPROC_PER_NODE": "1", "DIST_TIMEOUT": "5",
                "RECIPE_NAME": "recipes/glue/WNLI.sh", "OMP_NUM_THREADS": "1",
                **{k: str(v) for k, v in env.items()}}
    if cwd is not None:
        cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([str(BIN / "python"), "-m", "span_plugin.cli.launch", "--cpu", *args],
                            cwd=cwd, env=settings, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_nodes_that_do_not_meet_end_within_the_bound_naming_what_is_missing():
    """A node that never comes, node rank 0 not there (or at another port), NNODES or
    NPROC_PER_NODE that differ: each launch ends with exit 2 and one line, within
    DIST_TIMEOUT (5 s) and the start of Python."""
    alone, elsewhere, nnodes, nproc = free_ports(), free_ports(), free_ports(), free_ports()
    began = time.monotonic()
    procs = [launch(0, alone), launch(1, elsewhere),
             launch(0, nnodes), launch(1, nnodes, NNODES=3),
             launch(0, nproc), launch(1, nproc, NPROC_PER_NODE=2)]
    out = finish(procs, bound=60)
    assert time.monotonic() - began < 40
    name = "recipes/glue/WNLI.sh: "
    expected = [
        f"only node rank 0 of 2 joined at 127.0.0.1:{alone} within 5 s; missing node rank 1",
        f"node rank 1 of 2 found no node rank 0 at MASTER_ADDR=127.0.0.1 MASTER_PORT={elsewhere} within 5 s",
        "node rank 1 (", "node rank 1 (", "node rank 1 (", "node rank 1 (",
    ]
    for (status, text), line in zip(out, expected):
        assert status == 2 and text.count("\n") == 1 and text.startswith(name + line), text
    for status, text in out[2:4]:
        assert "has NNODES=3, node rank 0 has NNODES=2: give every node the same NNODES" in text
    for status, text in out[4:]:
        assert "has NPROC_PER_NODE=2, node rank 0 has NPROC_PER_NODE=1" in text


@pytest.mark.slow
def test_a_rank_that_dies_at_start_or_mid_run_ends_every_node_within_the_bound(wnli, tmp_path):
    """Two pairs of nodes at once. In one, node rank 1's fairseq-train stops on its
    arguments before the process group forms; in the other, node rank 1's process is
    SIGKILLed after node rank 0's first checkpoint (MAX_RESTARTS=0). Every launch ends
    non-zero naming its node, node rank 0 waiting no longer than DIST_TIMEOUT."""
    data = wnli / "data-bin" / "WNLI"
    common = [data, "--user-dir", ROOT / "span_plugin", "--task", "span_classification",
              "--criterion", "span_classification", "--arch", "roberta_span_base", *TINY,
              "--num-classes", "2", "--batch-size", "4", "--optimizer", "adam", "--lr", "1e-4",
              "--find-unused-parameters", "--save-dir", "checkpoints"]
    at_start, mid_run = free_ports(), free_ports()
    began = time.monotonic()
    procs = [launch(0, at_start, *common, "--max-update", "2", cwd=tmp_path / "a0", DIST_TIMEOUT=10),
             launch(1, at_start, *common, "--max-update", "2", "--lr-scheduler", "nope",
                    cwd=tmp_path / "a1", DIST_TIMEOUT=10),
             launch(0, mid_run, *common, "--max-update", "200", "--save-interval-updates", "2",
                    cwd=tmp_path / "b0", DIST_TIMEOUT=10),
             launch(1, mid_run, *common, "--max-update", "200", "--save-interval-updates", "2",
                    cwd=tmp_path / "b1", DIST_TIMEOUT=10)]
    while not (tmp_path / "b0" / "checkpoints" / "checkpoint_last.pt").exists() \
            and time.monotonic() - began < BOUND and procs[3].poll() is None:
        time.sleep(0.02)
    killed = workers(tmp_path / "b1")
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    out = finish(procs, bound=BOUND)
    assert killed, ("node rank 1 had no training process", out[2][1][-3000:], out[3][1][-3000:])
    took = time.monotonic() - began
    for (status, text), rank, port in zip(out, (0, 1, 0, 1), (at_start, at_start, mid_run, mid_run)):
        assert status != 0, text[-3000:]
        assert (f"training ended with exit status {status} on node rank {rank} of 2 (1 processes, "
                f"MASTER_ADDR=127.0.0.1 MASTER_PORT={port})") in text.splitlines()[-1], text[-3000:]
    assert "invalid choice: 'nope'" in out[1][1]
    assert "num_updates 200" not in out[2][1]
    print(f"all four launches ended {took:.0f} s after they began")
    assert took < 90


def settings_of(env, *args):
    """NNODES ... WORLD_SIZE and ROWS_PER_UPDATE as recipes/lib.sh sets them."""
    script = (f"RECIPE_NAME=recipes/glue/WNLI.sh; source {ROOT}/recipes/lib.sh; count_gpus {' '.join(args)}; "
              "EPOCHS=10 BATCH_SIZE=4; rows_per_update --update-freq 2; "
              "echo $NNODES $NODE_RANK $MASTER_ADDR $MASTER_PORT $NPROC_PER_NODE $WORLD_SIZE $ROWS_PER_UPDATE")
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)


def test_world_size_and_schedule_come_from_nodes_and_processes_and_from_slurm(tmp_path):
    base = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path)}
    proc = settings_of({**base, "NNODES": "3", "NODE_RANK": "2", "NPROC_PER_NODE": "2"}, "--cpu")
    assert proc.stdout.split() == ["3", "2", "127.0.0.1", "29500", "2", "6", "48"], proc.stderr
    # SLURM: one task per node; the first host of the job's nodes (a stand-in scontrol)
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames gpu[07-08]" ] && printf "gpu07\\ngpu08\\n"\n')
    scontrol.chmod(0o755)
    slurm = {**base, "PATH": f"{scontrol.parent}{os.pathsep}{base['PATH']}", "SLURM_JOB_ID": "4242",
             "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[07-08]"}
    proc = settings_of(slurm, "--cpu")
    assert proc.stdout.split() == ["2", "1", "gpu07", str(20000 + 4242 % 20000), "1", "2", "16"], proc.stderr
    proc = settings_of({**slurm, "SLURM_NTASKS_PER_NODE": "4"}, "--cpu")
    assert proc.returncode == 2 and "launch one task per node (srun --ntasks-per-node=1)" in proc.stderr
    proc = settings_of({**base, "NNODES": "2", "NODE_RANK": "2"}, "--cpu")
    assert proc.returncode == 2 and "NODE_RANK=2 with NNODES=2: node ranks are 0 to 1" in proc.stderr


# On GPUs (NCCL): run where the machine has them (docs/DISTRIBUTED.md, "On GPUs"); the
# recipes train in fp16 there, so the figures may differ in the last bits.
GPUS = torch.cuda.device_count()


@pytest.mark.slow
@pytest.mark.skipif(GPUS < 1, reason="needs a GPU")
def test_one_gpu_through_torchrun_over_nccl_trains_as_without_it(wnli, tmp_path):
    args = ["--max-update", "6"]
    env = {"NPROC_PER_NODE": 1, "CUDA_VISIBLE_DEVICES": 0, "DIST_TIMEOUT": 60}
    (tmp_path / "torchrun").mkdir()
    log = run_cli("bash", WNLI, *TINY, *DETERMINISTIC, *args, cwd=tmp_path / "torchrun",
                  env=recipe_env(wnli, TORCHRUN=1, **env)).stdout
    assert "distributed init (rank 0): env://" in log and "'distributed_backend': 'nccl'" in log
    one, one_log = one_process(wnli, tmp_path, args, cpu=False, **env)
    assert "distributed init" not in one_log
    a, b = weights(tmp_path / "torchrun" / "runs" / "WNLI"), weights(one)
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in b)
    print(f"largest parameter difference, torchrun (NCCL) vs fairseq-train: {worst:.2e}")
    assert worst < 1e-4


@pytest.mark.slow
@pytest.mark.skipif(GPUS < 2, reason="needs two GPUs")
def test_two_gpu_nodes_over_nccl_train_as_one_gpu_with_update_freq_2(wnli, tmp_path):
    args = ["--max-update", "6"]
    a, b = finish(nodes(wnli, tmp_path, 1, args, gpus=["0", "1"]))
    assert a[0] == 0 and b[0] == 0, (a[1][-3000:], b[1][-3000:])
    assert "'distributed_backend': 'nccl'" in a[1]
    one, _ = one_process(wnli, tmp_path, [*args, "--update-freq", "2"], cpu=False,
                         NPROC_PER_NODE=1, CUDA_VISIBLE_DEVICES=0)
    same_training(tmp_path / "node0" / "runs" / "WNLI", one, a[1], b[1], within=1e-3)
