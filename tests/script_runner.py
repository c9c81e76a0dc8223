"""Run Python scripts one after another in this one interpreter, each as ``__main__``
with its own argv, its output (file descriptors 1 and 2, so its child processes' too) in
OUT/<name>.log and its exit status in OUT/<name>.status; the environment, sys.path,
working directory and torch's thread count are put back between scripts. Imports stay:
that is the point (importing torch and fairseq is most of a quick benchmark's time).

    python tests/script_runner.py RUNS.json OUT

RUNS.json: ``{name: [script.py, arg, ...], ...}``, run in that order.
"""

import json
import os
import runpy
import sys
import traceback
from pathlib import Path


def exit_status(stop):
    """The status the interpreter ends with on SystemExit ``stop``: its code, 0 for None;
    any other object is printed to stderr and gives 1."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1


def run_one(argv, log):
    """``argv`` (a script and its arguments) as __main__, output to ``log``; its exit
    status."""
    env, path, cwd = dict(os.environ), list(sys.path), os.getcwd()
    threads = None
    if "torch" in sys.modules:
        threads = sys.modules["torch"].get_num_threads()
    saved = os.dup(1), os.dup(2)
    sys.stdout.flush()
    sys.stderr.flush()
    with open(log, "wb") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    script = str(argv[0])
    sys.argv = [script, *map(str, argv[1:])]
    sys.path.insert(0, str(Path(script).parent))  # as python puts a script's folder first
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = exit_status(stop)
    except BaseException:  # noqa: BLE001 -- reported as the interpreter would
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        sys.path[:] = path
        os.chdir(cwd)
        if threads is not None:
            sys.modules["torch"].set_num_threads(threads)
    return code


def main(argv):
    runs, out = argv
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, script_argv in json.loads(Path(runs).read_text()).items():
        code = run_one(script_argv, out / f"{name}.log")
        (out / f"{name}.status").write_text(str(code))


def run_scripts(runs, out, env=None, cwd=None):
    """``runs`` ({name: [script, arg, ...]}) through this file in a fresh interpreter;
    {name: CompletedProcess} (returncode, stdout with stderr) of each."""
    import subprocess

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "runs.json"
    spec.write_text(json.dumps({name: [str(a) for a in argv] for name, argv in runs.items()}))
    subprocess.run([sys.executable, __file__, spec, out], env=env, cwd=cwd,
                   stdin=subprocess.DEVNULL, check=True, timeout=1800)
    done = {}
    for name, argv in runs.items():
        status = out / f"{name}.status"
        assert status.is_file(), f"{name} never finished (tests/script_runner.py stopped before it)"
        done[name] = subprocess.CompletedProcess(
            argv, int(status.read_text()),
            (out / f"{name}.log").read_text(encoding="utf-8", errors="replace"))
    return done


if __name__ == "__main__":
    main(sys.argv[1:])
