"""What every resumable experiment grid of experiments/ shares: the results file (one
JSON line per finished run, committed), a recipe launch whose output goes to the run's
log, and the loop that skips finished runs and stops after ``--max-runs`` new ones."""

import json
import math
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_results(path):
    """The records of a results file; [] when it does not exist yet."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def append_result(path, record):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def run_recipe(recipe, env, extra, out_dir, what):
    """Run ``bash ROOT/recipe extra...`` with ``env`` added to the environment, its output
    appended to OUT_DIR/recipe.log; returns the minutes it took. A failure stops the grid
    naming ``what`` and the log."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(out_dir / "recipe.log", "a", encoding="utf-8") as log:
        proc = subprocess.run(["bash", str(ROOT / recipe), *map(str, extra)],
                              env=dict(os.environ, **{k: str(v) for k, v in env.items()}),
                              stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{what}: {recipe} failed; see {out_dir / 'recipe.log'}")
    return round((time.time() - start) / 60, 1)


FROM_SCRATCH = "from scratch (no --model-dir)"


def model_flags(model_dir):
    """The encoder a grid fine-tunes, as the fairseq-train flags of its converted
    checkpoint (sizes; BERT's segment B and pooler when the conversion kept them), or
    :data:`FROM_SCRATCH` without one (smoke runs from random weights). Run keys do not
    name the encoder, so every new record carries this, and :func:`check_model` holds a
    resumed grid to it: a smoke run is refused on a file of a real encoder's runs."""
    if not model_dir:
        return FROM_SCRATCH
    from span_plugin.convert.flags import checkpoint_train_flags

    return " ".join(checkpoint_train_flags(model_dir))


def check_model(results, flags):
    """Stop before a grid adds runs of one encoder to a results file holding another's
    (records from before the stamp carry none and pass)."""
    for line, r in enumerate(read_results(results), 1):
        if r.get("model_flags", flags) != flags:
            raise SystemExit(
                f"{results}:{line}: a run of a model with flags '{r['model_flags']}'; "
                f"--model-dir has '{flags}'. Resuming would pair runs of two encoders: "
                "give this model its own --results and --work-dir")


def run_grid(cells, done, run, results, max_runs=None, *, flags, name=str, show=str):
    """Run every cell whose key (``cells`` maps key -> cell) is not in ``done``, in
    order, appending each record to ``results``; at most ``max_runs`` new runs.
    ``flags`` (:func:`model_flags`): checked against the file's records, stamped on the
    new ones."""
    check_model(results, flags)
    todo = [(k, c) for k, c in cells.items() if k not in done]
    print(f"{len(cells) - len(todo)} of {len(cells)} runs already in {results}", flush=True)
    for n, (key, cell) in enumerate(todo):
        if max_runs is not None and n >= max_runs:
            break
        print(f"[{time.strftime('%H:%M:%S')}] {name(cell)} ...", flush=True)
        record = run(cell)
        record["model_flags"] = flags
        append_result(results, record)
        print(f"    {show(record)} ({record['minutes']} min)", flush=True)


HEADER_END = "\n---\n"


def write_report(path, text):
    """Write a generated report to ``path``, keeping the hand-written part of an existing
    file: everything above its first ``---`` line (status, verdict)."""
    header = ""
    if os.path.exists(path):
        old = Path(path).read_text(encoding="utf-8")
        if HEADER_END in old:
            header = old[: old.index(HEADER_END) + len(HEADER_END)] + "\n"
    Path(path).write_text(header + text, encoding="utf-8")


def resolve_device(device):
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def mean_sd(values):
    """Mean and sample standard deviation (0 for one value)."""
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1))


def paired_p(diffs):
    """Two-sided p of the paired t-test whose paired differences are ``diffs``; None
    below two pairs or when every difference is the same."""
    if len(diffs) < 2 or max(diffs) == min(diffs):
        return None
    from scipy.stats import ttest_1samp

    return float(ttest_1samp(diffs, 0.0).pvalue)


def paired_cell(diffs, digits):
    """A paired difference (same seed, minus the baseline): mean +- sample sd, and the
    seeds it won; no spread for one seed, "-" for none."""
    if not diffs:
        return "-"
    mean, sd = mean_sd(diffs)
    spread = f" +- {sd:.{digits}f}" if len(diffs) > 1 else ""
    return f"{mean:+.{digits}f}{spread} ({sum(d > 0 for d in diffs)} of {len(diffs)})"


def paired_cell_p(diffs, digits):
    """:func:`paired_cell` with the paired t-test's p inside its brackets (when there is one)."""
    cell, p = paired_cell(diffs, digits), paired_p(diffs)
    return cell if p is None else cell[:-1] + f"; p={p:.2g})"
