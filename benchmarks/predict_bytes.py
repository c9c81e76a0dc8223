"""A check, not a speed benchmark: ``span-predict`` of this tree against the tree of an
earlier commit checked out beside it (8007bc6, the last before the predictors served
checkpoints), byte for byte, on tiny models of every task trained here for 2 updates on
real rows.

    git -C . worktree add /tmp/old_tree 8007bc6
    .venv/bin/python benchmarks/predict_bytes.py --old-tree /tmp/old_tree

Both trees run as ``python -m span_plugin.cli.<command>`` with ``PYTHONPATH`` set to
their checkout, the same arguments, outputs in separate folders; each run checks at exit
that every ``span_plugin`` module it imported came from its tree. Result files (--results,
whose JSON may hold paths) are compared as JSON with each side's output folder replaced by
one placeholder; every other file by its bytes. One line per output, and one JSON line per
run appended to benchmarks/predict_bytes.jsonl.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import DATA, GLUE, GPT2_BPE, ROOT

sys.path.insert(0, str(ROOT / "tests"))
from conftest import conll_sentences, converted_minilm, pair_folders, qa_folder  # noqa: E402
from test_export_onnx import qa_checkpoint_of, sentence_checkpoint, tagging_checkpoint  # noqa: E402
from test_span_pair_train import pair_args  # noqa: E402
from test_task_data import glue_folder  # noqa: E402
from conftest import run_main  # noqa: E402

# Runs a command module of the tree on PYTHONPATH and refuses, at exit, a run that
# imported any span_plugin module from elsewhere (a checkpoint's --user-dir, the cwd).
RUNNER = """import atexit, os, runpy, sys
tree = os.path.realpath(os.environ["PYTHONPATH"]) + os.sep
def _check():
    bad = [m.__file__ for n, m in list(sys.modules.items())
           if n.split(".")[0] == "span_plugin" and getattr(m, "__file__", None)
           and not os.path.realpath(m.__file__).startswith(tree)]
    if bad:
        sys.stderr.write("span_plugin imported from outside %s: %s\\n" % (tree, bad[:3]))
        os._exit(3)
atexit.register(_check)
sys.argv = [sys.argv[1], *sys.argv[2:]]
sys.exit(runpy.run_module("span_plugin.cli." + sys.argv[0], run_name="__main__"))
"""


class Tmp:
    """What the tests' fixtures take as tmp_path_factory."""

    def __init__(self, root):
        self.root = Path(root)

    def mktemp(self, name):
        return Path(tempfile.mkdtemp(prefix=name, dir=self.root))


GLUE_MODELS = {"MRPC": "mrpc-span", "SST-2": "sst2-plain", "STS-B": "stsb-plain-regression"}


def conll_folder(root, n_train=64, n_valid=300):
    """A tagging folder ``root/bin`` of real CoNLL-2003 sentences as the tests' (GPT-2
    BPE, greedy segmentation), with more valid sentences to predict."""
    from span_plugin.preprocess.folders.conll import prepare_conll
    from span_plugin.preprocess.folders.options import FolderOptions
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec

    files = {}
    for split, n in (("train", n_train), ("valid", n_valid)):
        files[split] = str(root / f"{split}.txt")
        Path(files[split]).write_text(conll_sentences(DATA / "conll2003" / f"{split}.txt", n))
    spec = EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
    prepare_conll(root / "bin", files,
                  FolderOptions(spec, str(GPT2_BPE / "dict.txt"), name="conll2003"))
    return root / "bin"


def run_tree(tree, module, args, cwd):
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", RUNNER, module, *map(str, args)], cwd=cwd,
                          env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: {module} {' '.join(map(str, args))} exited "
                         f"{proc.returncode}:\n{proc.stdout[-4000:]}")


def first_difference(a, b):
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}: {x[:200]!r} != {y[:200]!r}"
    return f"{len(la)} lines != {len(lb)} lines"


def compare(name, new, old, new_dir, old_dir):
    """'equal' or 'differs: ...' for one output file of both runs."""
    a, b = new.read_bytes(), old.read_bytes()
    if name.endswith("results.json"):
        ja = json.loads(a.decode().replace(json.dumps(str(new_dir))[1:-1], "<out>"))
        jb = json.loads(b.decode().replace(json.dumps(str(old_dir))[1:-1], "<out>"))
        if ja == jb:
            return "equal (as JSON)"
        a, b = (json.dumps(j, indent=1, sort_keys=True).encode() for j in (ja, jb))
        return "differs (as JSON): " + first_difference(a.decode(), b.decode())
    if a == b:
        return "equal"
    try:
        return "differs: " + first_difference(a.decode(), b.decode())
    except UnicodeDecodeError:
        return f"differs (binary, {len(a)} and {len(b)} bytes)"


def train_models(tmp):
    """name -> (checkpoint, span-predict arguments with {out} for the output folder)."""
    models = {}
    glue = ["--split", "valid", "test", "--output", "{out}/valid.tsv",
            "{out}/test.tsv"]
    # Submissions hold labels only: 2 updates at the tests' lr give one label for every row,
    # a smaller lr leaves MRPC's labels mixed. STS-B writes values, of each head kind.
    models["mrpc-span"] = (sentence_checkpoint(tmp.mktemp("mrpc"), "MRPC", "--lr", "1e-5"), glue)
    models["sst2-plain"] = (sentence_checkpoint(tmp.mktemp("sst2"), "SST-2", "--sentence-head",
                                                "plain"), glue)
    models["stsb-regression"] = (sentence_checkpoint(tmp.mktemp("stsb"), "STS-B",
                                                     "--regression-target", "--bert-pooler",
                                                     "--bert-token-types", num_classes=1),
                                 glue)
    models["stsb-plain-regression"] = (sentence_checkpoint(tmp.mktemp("stsbplain"), "STS-B",
                                                           "--regression-target", "--sentence-head",
                                                           "plain", num_classes=1), glue)
    for task in ("MRPC", "SST-2", "STS-B"):  # every row of the real dev and test files
        models[f"{task}-glue-dir"] = (models[GLUE_MODELS[task]][0], [
            "--glue-dir", GLUE, "--task", task, "--split", "dev", "test",
            "--output", "{out}/dev.tsv", "{out}/test.tsv"])
    models["MRPC-glue-dir-file-order"] = (models["mrpc-span"][0], [
        *models["MRPC-glue-dir"][1], "--batch-order", "file", "--batch-size", "7"])
    conll = conll_folder(tmp.mktemp("conll"))
    tagged = ["--split", "valid", "--conll-out", "{out}/valid.conll", "--spans-out",
              "{out}/valid.jsonl", "--results", "{out}/results.json"]
    models["conll-tagging"] = (tagging_checkpoint(tmp.mktemp("tag"), conll, "span_tagging"), tagged)
    models["conll-tagging-sf"] = (tagging_checkpoint(tmp.mktemp("tagsf"), conll, "span_tagging",
                                                     "--tagging-head", "sf"), tagged)
    models["conll-tagging-sf-viterbi"] = (models["conll-tagging-sf"][0],
                                          [*tagged, "--token-decoding", "viterbi"])
    labeling = tagging_checkpoint(tmp.mktemp("lab"), conll, "span_labeling",
                                  "--max-span-words", "4")
    models["conll-span-labeling"] = (labeling, tagged)
    models["conll-span-labeling-nested"] = (labeling, [
        "--split", "valid", "--overlap", "nested", "--span-threshold", "0.2",
        "--spans-out", "{out}/valid.jsonl", "--results", "{out}/results.json"])
    qa = qa_folder.__wrapped__(tmp, converted_minilm.__wrapped__(tmp))
    qa_outputs = ["--output", "{out}/predictions.json", "--nbest", "{out}/nbest.json",
                  "--results", "{out}/results.json"]
    qa_out = ["--input", qa / "valid.json", *qa_outputs]
    models["squad-boundary"] = (qa_checkpoint_of(tmp.mktemp("qa"), qa, "boundary"), qa_out)
    models["squad-boundary-batch1"] = (models["squad-boundary"][0], [*qa_out, "--batch-size", "1"])
    models["squad-sf"] = (qa_checkpoint_of(tmp.mktemp("qasf"), qa, "sf"), qa_out)
    # 359 questions of two whole articles of SQuAD dev, answers on any token too
    dev = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    dev["data"] = dev["data"][1:3]
    (tmp.root / "squad-more.json").write_text(json.dumps(dev), encoding="utf-8")
    more = ["--input", tmp.root / "squad-more.json", *qa_outputs]
    models["squad-boundary-more"] = (models["squad-boundary"][0], more)
    models["squad-sf-more-token"] = (models["squad-sf"][0], [*more, "--answer-boundaries", "token"])
    pairs = pair_folders.__wrapped__(tmp)
    save = tmp.mktemp("pair")
    run_main("fairseq-train", *pair_args(pairs["labelled"], save, "--max-update", "2"))
    models["mrpc-span-pairs"] = (save / "checkpoint_last.pt",
                                 ["--input", pairs["labelled"].parent / "valid.jsonl",
                                  "--output", "{out}/pairs.jsonl"])
    rows = (pairs["labelled"].parent / "all.jsonl").read_text(encoding="utf-8").splitlines()
    (tmp.root / "pairs-more.jsonl").write_text("\n".join(rows[200:600]) + "\n", encoding="utf-8")
    models["mrpc-span-pairs-more"] = (save / "checkpoint_last.pt", [
        "--input", tmp.root / "pairs-more.jsonl", "--output", "{out}/pairs.jsonl"])
    return models


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-tree", default="/tmp/old_tree", type=Path)
    parser.add_argument("--work", type=Path,
                        help="folder for the models and outputs (default: a new temporary one)")
    parser.add_argument("--log", default=ROOT / "benchmarks" / "predict_bytes.jsonl", type=Path)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="predict_bytes_"))
    work.mkdir(parents=True, exist_ok=True)
    trees = {"new": ROOT, "old": args.old_tree.resolve()}
    commits = {k: subprocess.run(["git", "-C", str(t), "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True).stdout.strip() for k, t in trees.items()}
    # uncommitted changes under span_plugin/ make the new side more than its commit
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "span_plugin"],
                           capture_output=True, text=True).stdout.split("\n")
    dirty = sorted(line[3:] for line in dirty if line.strip())
    for side, tree in trees.items():  # what each side really imports
        got = subprocess.run([sys.executable, "-c", "import span_plugin; print(span_plugin.__file__)"],
                             cwd=work, env=dict(os.environ, PYTHONPATH=str(tree)),
                             capture_output=True, text=True).stdout.strip()
        assert got.startswith(str(tree) + os.sep), (side, tree, got)
        print(f"{side}: {commits[side]} span_plugin from {got}")
    models = train_models(Tmp(work))
    rows = []
    for name, (checkpoint, template) in models.items():
        for side, tree in trees.items():
            out = work / "out" / side / name
            out.mkdir(parents=True, exist_ok=True)
            run_tree(tree, "predict", ["--checkpoint", checkpoint,
                                       *(str(a).format(out=out) for a in template)], work)
    # span-export hf of the MRPC checkpoint by each tree, span-predict --model by each
    for side, tree in trees.items():
        folder = work / "hf" / side / "mrpc"
        folder.parent.mkdir(parents=True, exist_ok=True)
        run_tree(tree, "export", ["hf", models["mrpc-span"][0], "--out", folder], work)
        out = work / "out" / side / "mrpc-span-hf-model"
        out.mkdir(parents=True, exist_ok=True)
        run_tree(tree, "predict", ["--model", folder, "--data", glue_folder("MRPC"),
                                   *(a.format(out=out) for a in models["mrpc-span"][1])], work)
    for name in [*models, "mrpc-span-hf-model", "hf-folder"]:
        new_dir, old_dir = ((work / "hf" / s / "mrpc") if name == "hf-folder" else (work / "out" / s / name)
                            for s in ("new", "old"))
        for path in sorted(p for p in new_dir.rglob("*") if p.is_file()):
            rel = path.relative_to(new_dir)
            other = old_dir / rel
            verdict = (compare(path.name, path, other, new_dir, old_dir) if other.is_file()
                       else "missing in old")
            rows.append({"output": f"{name}/{rel}", "equal": verdict.startswith("equal"),
                         "verdict": verdict})
            print(f"{name}/{rel}: {verdict}")
    equal = sum(r["equal"] for r in rows)
    print(f"{equal} of {len(rows)} outputs equal")
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "new": commits["new"], "new_uncommitted": dirty, "old": commits["old"], "work": str(work),
              "equal": equal, "outputs": len(rows), "rows": rows}
    with open(args.log, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    return 0 if equal == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
