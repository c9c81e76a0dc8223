"""fairseq-train across processes and nodes, through torchrun, that starts or says why.

``python -m span_plugin.cli.launch ARGS...`` (recipes/lib.sh ``train_resumably``)
trains with fairseq-train's ARGS on NPROC_PER_NODE processes on each of NNODES nodes
(docs/DISTRIBUTED.md):

- several nodes first meet at MASTER_ADDR:MASTER_PORT (node rank 0 listens): each
  names its node rank, NNODES and NPROC_PER_NODE; within DIST_TIMEOUT seconds either
  all ranks 0..NNODES-1 are there with the same settings, or every node ends with one
  line naming who joined, of how many, at which address (exit 2);
- then torchrun's static rendezvous (node rank N's processes are global ranks
  N x NPROC_PER_NODE + local rank, so global rank 0, the one that writes, is on node
  rank 0) on MASTER_PORT + 1, MAX_RESTARTS restarts of the group after a failure;
  torchrun runs in a process of this module (``torchrun``) that, on node rank 0, keeps
  the rendezvous store open until every other node's torchrun has left it;
- each process (``worker``) runs fairseq-train with its rank given explicitly (fairseq
  divides the rank by the CUDA device count when it infers it: no CPU ranks, and the
  wrong device when ranks are not node-contiguous): gloo on the CPU, NCCL on GPUs, the
  device its LOCAL_RANK, and every collective bounded by DIST_TIMEOUT seconds.
"""

import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

from span_plugin.requires import MissingPackageError, require_fairseq

PROG = "span_plugin.cli.launch"


def fail(message, status=2):
    print(f"{os.environ.get('RECIPE_NAME') or PROG}: {message}", file=sys.stderr, flush=True)
    raise SystemExit(status)


def settings(env=os.environ):
    """The launch settings from the environment, checked."""
    def number(name, default, least):
        text = env.get(name, "") or str(default)
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            fail(f"{name}={text}: expected a whole number of at least {least}")
        return value

    s = {
        "nnodes": number("NNODES", 1, 1),
        "node_rank": number("NODE_RANK", 0, 0),
        "nproc": number("NPROC_PER_NODE", 1, 1),
        "addr": env.get("MASTER_ADDR") or "127.0.0.1",
        "port": number("MASTER_PORT", 29500, 1),
        "timeout": number("DIST_TIMEOUT", 120, 1),
        "restarts": number("MAX_RESTARTS", 0, 0),
    }
    if s["node_rank"] >= s["nnodes"]:
        fail(f"NODE_RANK={s['node_rank']} with NNODES={s['nnodes']}: node ranks are 0 to {s['nnodes'] - 1}")
    return s


def _where(s):
    return f"MASTER_ADDR={s['addr']} MASTER_PORT={s['port']}"


def meet(s):
    """Every node rank 0..NNODES-1 at MASTER_ADDR:MASTER_PORT with the same NNODES and
    NPROC_PER_NODE within DIST_TIMEOUT seconds, or a one-line error (exit 2) on every
    node that got that far."""
    # TCPStore's failed tries print C++ stacks: this process says what failed itself
    # (torchrun and its processes get the environment as it was)
    saved = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    from torch.distributed import TCPStore

    if saved is None:
        del os.environ["TORCH_CPP_LOG_LEVEL"]
    else:
        os.environ["TORCH_CPP_LOG_LEVEL"] = saved
    host, timeout = s["node_rank"] == 0, s["timeout"]
    if not host and not _reachable(s["addr"], s["port"], timeout):
        fail(f"node rank {s['node_rank']} of {s['nnodes']} found no node rank 0 at {_where(s)} "
             f"within {timeout} s: start node rank 0, and give every node its address and port")
    try:
        store = TCPStore(s["addr"], s["port"], None, host, timedelta(seconds=timeout),
                         wait_for_workers=False)
    except Exception as err:  # DistNetworkError, RuntimeError: the cause is in its text
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if host:
            fail(f"node rank 0 cannot listen at {_where(s)}: {reason} (a port in use: "
                 f"choose another MASTER_PORT on every node)")
        fail(f"node rank {s['node_rank']} of {s['nnodes']} found no node rank 0 at {_where(s)} "
             f"within {timeout} s: start node rank 0, and give every node its address and port")
    me = {"node_rank": s["node_rank"], "nnodes": s["nnodes"], "nproc": s["nproc"], "round": s["round"],
          "host": socket.gethostname()}
    store.set(f"arrival/{store.add('count', 1)}", json.dumps(me))
    if host:
        verdict = _gather(store, s)
        store.set("verdict", json.dumps(verdict))
        # the others read the verdict before this store goes
        deadline = time.monotonic() + timeout
        while store.add("read", 0) < verdict["count"] - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        try:
            verdict = json.loads(store.get("verdict"))
        except Exception:
            fail(f"node rank {s['node_rank']} of {s['nnodes']}: node rank 0 at {_where(s)} "
                 f"gave no word within {timeout} s (it ended, or waits for other nodes)")
        store.add("read", 1)
    del store
    if verdict.get("error"):
        fail(verdict["error"])
    print(f"{PROG}: node rank {s['node_rank']}: all {s['nnodes']} nodes met at "
          f"{s['addr']}:{s['port']} ({s['nproc']} processes each)", flush=True)


def _reachable(addr, port, timeout):
    """Whether something listens at addr:port within ``timeout`` seconds (asked here:
    TCPStore's own retries print a C++ stack on every try)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((addr, port), timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)


def _gather(store, s):
    """Node rank 0: the arrivals until all are there, one disagrees, or time is up."""
    deadline = time.monotonic() + s["timeout"]
    where = f"{s['addr']}:{s['port']}"
    while True:
        count = store.add("count", 0)
        nodes = [json.loads(store.get(f"arrival/{i}")) for i in range(1, count + 1)]
        ranks = sorted(n["node_rank"] for n in nodes)
        for n in nodes:
            for key, name in (("nnodes", "NNODES"), ("nproc", "NPROC_PER_NODE")):
                if n[key] != s[key]:
                    return {"count": count, "error": (
                        f"node rank {n['node_rank']} ({n['host']}) has {name}={n[key]}, node rank 0 "
                        f"has {name}={s[key]}: give every node the same {name}")}
            if n["round"] != s["round"]:
                return {"count": count, "error": (
                    f"node rank {n['node_rank']} ({n['host']}) comes for start {n['round'] + 1}, node "
                    f"rank 0 for start {s['round'] + 1}: launch every node again")}
        twice = sorted({r for r in ranks if ranks.count(r) > 1})
        if twice:
            return {"count": count, "error": (
                f"node rank {twice[0]} came twice to {where}: give each node its own NODE_RANK")}
        if ranks == list(range(s["nnodes"])):
            return {"count": count}
        if time.monotonic() > deadline:
            missing = [r for r in range(s["nnodes"]) if r not in ranks]
            return {"count": count, "error": (
                f"only node rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} of "
                f"{s['nnodes']} joined at {where} within {s['timeout']} s; missing node "
                f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} (not "
                f"started, or given another MASTER_ADDR or MASTER_PORT; DIST_TIMEOUT sets the wait)")}
        time.sleep(0.1)


def torchrun_command(s, args):
    """torchrun's command line for these settings, each process running ``worker``."""
    # one node: torchrun restarts its processes; several: this launcher does (launch)
    restarts = s["restarts"] if s["nnodes"] == 1 else 0
    command = [sys.executable, "-m", PROG, "torchrun", "--nproc-per-node", str(s["nproc"]),
               "--max-restarts", str(restarts), "--monitor-interval", "1"]
    if s["nnodes"] == 1:
        command += ["--standalone", "--rdzv-conf", f"join_timeout={s['timeout']}"]
    else:
        command += ["--nnodes", str(s["nnodes"]), "--node-rank", str(s["node_rank"]),
                    "--master-addr", s["addr"], "--master-port", str(s["port"] + 1),
                    "--rdzv-conf", f"timeout={s['timeout']}"]
    return command + ["-m", PROG, "worker", *args]


def launch(args):
    try:
        require_fairseq("training")
    except MissingPackageError as err:
        fail(str(err))
    s = settings()
    if "--cpu" not in args:
        import torch

        gpus = torch.cuda.device_count()
        if 0 < gpus < s["nproc"]:
            fail(f"NPROC_PER_NODE={s['nproc']} processes, but node rank {s['node_rank']} has "
                 f"{gpus} GPU{'s' if gpus > 1 else ''}: one process a GPU (or --cpu for CPU ranks)")
    s["round"] = 0
    while True:
        if s["nnodes"] > 1:
            meet(s)
        status = subprocess.call(torchrun_command(s, args))
        if status == 0:
            return
        where = (f"node rank {s['node_rank']} of {s['nnodes']} ({s['nproc']} processes, "
                 f"{_where(s)})")
        if s["nnodes"] == 1 or s["round"] >= s["restarts"]:
            fail(f"training ended with exit status {status} on {where}: a process failed or "
                 f"lost a peer (the first error above names it)", status=status if 0 < status < 128 else 1)
        # Several nodes restart together: each one's torchrun ends (its processes fail,
        # or lose the failed one), then all meet again and start from checkpoint_last.pt.
        s["round"] += 1
        print(f"{PROG}: training failed (exit status {status}) on {where}: restart "
              f"{s['round']} of MAX_RESTARTS={s['restarts']}, from the last checkpoint", flush=True)


def torchrun(args):
    """torch.distributed.run with ``args`` in this process. Across nodes, node rank 0
    holds the rendezvous store (MASTER_PORT + 1) open until every other node's torchrun
    has passed its exit barrier: torchrun's own store closes with its process, and a node
    still waiting at the barrier then logs a traceback (pytorch/pytorch#69520)."""
    from torch.distributed import TCPStore
    from torch.distributed.run import main as torchrun_main

    s = settings()
    if s["nnodes"] == 1:
        return torchrun_main(args)
    bound = timedelta(seconds=s["timeout"])
    host = s["node_rank"] == 0
    # one server per port in a process (multi_tenant): torchrun's agent shares this one
    store = TCPStore(s["addr"], s["port"] + 1, is_master=True, timeout=bound, multi_tenant=True,
                     wait_for_workers=False) if host else None
    try:
        torchrun_main(args)
    finally:
        try:
            if host and sys.exc_info()[0] is None:
                store.wait([f"left/{n}" for n in range(1, s["nnodes"])], bound)
            elif not host:
                TCPStore(s["addr"], s["port"] + 1, is_master=False, timeout=timedelta(seconds=5),
                         wait_for_workers=False).set(f"left/{s['node_rank']}", "1")
        except Exception:  # a node that failed or has gone: torchrun already said so
            pass


def worker(args):
    """One torchrun process: fairseq-train with this process's rank and device."""
    import torch
    import torch.distributed as dist

    env = os.environ
    cpu = "--cpu" in args or not torch.cuda.is_available()
    sys.argv = [
        "fairseq-train", "--distributed-init-method", "env://", "--distributed-no-spawn",
        "--distributed-world-size", env["WORLD_SIZE"], "--distributed-rank", env["RANK"],
        "--device-id", env["LOCAL_RANK"], "--distributed-backend", "gloo" if cpu else "nccl",
        *args,
    ]
    bound = timedelta(seconds=int(env.get("DIST_TIMEOUT") or 120))
    init = dist.init_process_group

    def init_process_group(*a, **kw):  # fairseq gives no timeout: torch's is 10-30 min
        kw.setdefault("timeout", bound)
        return init(*a, **kw)

    dist.init_process_group = init_process_group
    from fairseq_cli.train import cli_main

    import span_plugin

    # span_plugin was imported before fairseq (this module): fairseq's --user-dir would
    # not register its tasks and models
    span_plugin.register()
    cli_main()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        worker(argv[1:])
    elif argv[:1] == ["torchrun"]:
        torchrun(argv[1:])
    else:
        launch(argv[1:] if argv[:1] == ["--"] else argv)


if __name__ == "__main__":
    main()
