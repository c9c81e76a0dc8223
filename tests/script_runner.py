"""Run Python scripts one after another in this one interpreter, each as ``__main__``
with its own argv, its output (file descriptors 1 and 2, so its child processes' too) in
OUT/<script>.log and its exit status in OUT/<script>.status; the environment, sys.path,
working directory and torch's thread count are put back between scripts. Imports stay:
that is the point (importing torch and fairseq is most of a quick benchmark's time).

    python tests/script_runner.py OUT ARG -- script.py [script.py ...]

runs each ``script.py ARG`` (ARG: the one option every script gets, e.g. --quick).
"""

import os
import runpy
import sys
import traceback
from pathlib import Path


def run_one(script, arg, log):
    """``script arg`` as __main__, output to ``log``; its exit status."""
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
    sys.argv = [str(script), arg]
    sys.path.insert(0, str(Path(script).parent))  # as python puts a script's folder first
    try:
        runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
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
    out, arg, sep, *scripts = argv
    assert sep == "--", "usage: script_runner.py OUT ARG -- script.py [script.py ...]"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for script in scripts:
        name = Path(script).name
        code = run_one(script, arg, out / f"{name}.log")
        (out / f"{name}.status").write_text(str(code))


if __name__ == "__main__":
    main(sys.argv[1:])
