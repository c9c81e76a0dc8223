"""What every resumable experiment grid of experiments/ shares: the results file (one
JSON line per finished run, committed), a recipe launch whose output goes to the run's
log, and the loop that skips finished runs and stops after ``--max-runs`` new ones."""

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

# The checkout's paths and the real data come from benchmarks/common.py, which the
# benchmarks and the tests share; the studies import them from here.
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))
from common import DATA, GLUE, GPT2_BPE, ROOT  # noqa: E402,F401


def read_results(path):
    """The records of a results file; [] when it does not exist yet."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def cpu_model():
    """The CPU's model name (/proc/cpuinfo), for a record: one seeded single-thread run
    gives the same floats again only on the same kind of CPU (each picks its own kernels),
    so a re-made run on another can differ in the last digits. None where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def append_result(path, record):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    line = (json.dumps(record) + "\n").encode("utf-8")
    # one write(2) on an O_APPEND descriptor: two chains appending to one results file
    # (experiments/spanbert_qa.py on two work folders) never interleave their lines
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if os.write(fd, line) != len(line):
            raise OSError(f"{path}: short write of a result line (disk full?)")
    finally:
        os.close(fd)


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
    order, appending each record to ``results``; at most ``max_runs`` new runs (returns
    how many it made). ``flags`` (:func:`model_flags`): checked against the file's
    records, stamped on the new ones."""
    check_model(results, flags)
    todo = [(k, c) for k, c in cells.items() if k not in done]
    print(f"{len(cells) - len(todo)} of {len(cells)} runs already in {results}", flush=True)
    made = 0
    for key, cell in todo:
        if max_runs is not None and made >= max_runs:
            break
        print(f"[{time.strftime('%H:%M:%S')}] {name(cell)} ...", flush=True)
        record = run(cell)
        record["model_flags"] = flags
        append_result(results, record)
        made += 1
        print(f"    {show(record)} ({record['minutes']} min)", flush=True)
    return made


# ---- what a run trained on: its data folder's record and the model settings that matter

# Model and task settings a record keeps: the heads, every dropout, the span encoder and
# its <s> concatenation (not the heads' *names*, e.g. classification_head_name).
SETTING = re.compile(r"(^|_)head($|_)|dropout|span_encoder|span_cls_concat")


def data_record(folder):
    """The record of the data folder a run trained on, for its result line: the
    encoder entry of its provenance.json as written (tokenizer kind and file hashes,
    dictionary with its sha256 and the header of its counts, segmentation), task, rows,
    and the sha256 of the whole provenance.json (which hashes every file of the folder).
    A folder without one (recipes/pretrain's binarized text) gives what it tells: its
    ``segmentation`` file."""
    folder = Path(folder)
    path = folder / "provenance.json"
    if not path.exists():
        seg = folder / "segmentation"
        encoder = {"segmentation": seg.read_text().strip()} if seg.exists() else {}
        return {"folder": str(folder), "provenance_sha256": None, "encoder": encoder}
    record = json.loads(path.read_text(encoding="utf-8"))
    return {"folder": str(folder),
            "provenance_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            **{k: record.get(k) for k in ("plugin_version", "task", "rows", "encoder")}}


def model_settings(checkpoint):
    """The settings of a trained checkpoint that change what the model is beyond the
    encoder (which :func:`model_flags` names): architecture, heads, every dropout (head
    dropout included), span encoder, from the cfg fairseq saved in it."""
    from span_plugin.convert.safe_load import load_torch_file

    state = load_torch_file(str(checkpoint), mmap=True)
    cfg = state.get("cfg") or {}
    out = {}
    for section in (cfg.get("model"), cfg.get("task"), state.get("args")):
        if isinstance(section, argparse.Namespace):  # legacy models keep a Namespace
            section = vars(section)
        for key, value in (section or {}).items():
            if key in ("_name", "arch") and "arch" not in out:
                out["arch"] = value
            elif SETTING.search(key) and not key.endswith("_name"):
                out.setdefault(key, value)
    return dict(sorted(out.items()))


def trained_on(data_dir, checkpoint):
    """The fields every new result record carries (old records lack them: readers use
    ``.get``): ``data_record`` (:func:`data_record`) and ``model_settings``
    (:func:`model_settings`, None when the checkpoint is gone)."""
    checkpoint = Path(checkpoint)
    return {"data_record": data_record(data_dir),
            "model_settings": model_settings(checkpoint) if checkpoint.exists() else None}


def dictionary_of(record):
    """A result record's n-gram dictionary in words: name (the packaged one's name or
    its path), the first 12 hex digits of its sha256 and the corpus it was counted on;
    "not recorded" for records from before data records (unless their recipe settings
    name a dictionary file: then that path, without a hash)."""
    data = record.get("data_record")
    if data is None:
        given = (record.get("settings") or {}).get("NGRAMS")
        return f"{given} (sha256 not recorded)" if given else "not recorded"
    encoder = data.get("encoder") or {}
    ngrams = encoder.get("ngrams")
    if not ngrams:
        return f"none (segmentation {encoder.get('segmentation') or 'not recorded'})"
    corpus = (ngrams.get("built") or {}).get("corpus") or "a corpus its header does not name"
    return (f"{ngrams.get('packaged') or ngrams.get('path')} sha256 "
            f"{(ngrams.get('sha256') or '?')[:12]}, counted on {corpus}")


def dictionary_lines(records, label=None):
    """One line per n-gram dictionary the records used, with how many runs (and, with
    ``label``, which: ``label(record)`` names a run's kind, e.g. its variant)."""
    groups = {}
    for r in records:
        groups.setdefault(dictionary_of(r), []).append(label(r) if label else None)
    lines = []
    for text, labels in groups.items():
        which = ", ".join(sorted({str(x) for x in labels if x is not None}))
        lines.append(f"n-gram dictionary: {text} ({len(labels)} run{'s' * (len(labels) != 1)}"
                     f"{': ' + which if which else ''})")
    return lines


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


def paired_interval(diffs, level=0.95):
    """The paired t interval of the mean of ``diffs`` as ``[lo, hi]`` text; "" below two."""
    if len(diffs) < 2:
        return ""
    from scipy.stats import t

    mean, sd = mean_sd(diffs)
    half = t.ppf((1 + level) / 2, len(diffs) - 1) * sd / len(diffs) ** 0.5
    return f"[{mean - half:+.2f}, {mean + half:+.2f}]"


def paired_line(what, diffs):
    """A paragraph: the paired differences' mean +- sd, wins, 95% interval and p."""
    p = paired_p(diffs)
    ci = paired_interval(diffs)
    return (f"\n{what}: {paired_cell(diffs, 2)}" + (f", 95% CI {ci}" if ci else "")
            + (f", paired t p = {p:.2g}" if p is not None else ""))


def paired_cell_p(diffs, digits):
    """:func:`paired_cell` with the paired t-test's p inside its brackets (when there is one)."""
    cell, p = paired_cell(diffs, digits), paired_p(diffs)
    return cell if p is None else cell[:-1] + f"; p={p:.2g})"
