"""Inference without fairseq (issue 52, part 3): a tiny fine-tuned model of every task,
trained here for 2 updates on real rows, exported with ``span-export hf``, predicts in a
separate process where importing fairseq fails (:mod:`span_plugin.portable`), and its
predictions equal the fairseq hub's on the checkpoint: 100 real inputs per task (MRPC
and STS-B dev pairs, CoNLL-2003 valid sentences, SQuAD dev questions, MRPC phrase
pairs). Labels and entity spans equal; logits, regression values, QA scores within 1e-4.
"""

import json
import subprocess
import sys

import pytest
import torch

from conftest import DATA, GLUE, TINY_ROBERTA, USER_DIR
from conftest import fairseq_train, small_conll_folder, tiny_train_args
from test_task_data import glue_folder
from test_task_train import span_args

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

TOL = 1e-4
N = 100

# Run in the child before anything else: every import of fairseq* fails there.
NO_FAIRSEQ = """
import importlib.abc, sys
class _NoFairseq(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0].startswith("fairseq"):
            raise ImportError(f"fairseq is not importable in this process ({name})")
sys.meta_path.insert(0, _NoFairseq())
"""

CHILD = NO_FAIRSEQ + """
import json
from span_plugin.portable import load_model
jobs = json.load(open(sys.argv[1], encoding="utf-8"))
out = {}
for name, job in jobs.items():
    model = load_model(job["dir"])
    method = getattr(model, job["method"])
    if job["method"] == "predict_logits":
        out[name] = method(job["inputs"], batch_size=16).tolist()
    elif job["method"] in ("predict_entities", "predict_pairs"):
        out[name] = [method(*x) if isinstance(x, list) else method(x) for x in job["inputs"]]
    else:
        out[name] = method(job["inputs"])
out["fairseq_loaded"] = [m for m in sys.modules if m.split(".")[0].startswith("fairseq")]
json.dump(out, open(sys.argv[2], "w", encoding="utf-8"))
"""




def _glue_rows(task, columns, n=N):
    """The first ``n`` rows of a GLUE dev TSV as tuples of the given columns."""
    lines = (GLUE / task / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    return [tuple(line.split("\t")[c] for c in columns) for line in lines[:n]]


def _conll_words(n=N):
    """The words of the first ``n`` sentences of CoNLL-2003 valid."""
    out, words = [], []
    for line in (DATA / "conll2003" / "valid.txt").read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if fields and fields[0] != "-DOCSTART-":
            words.append(fields[0])
        elif words:
            out.append(words)
            words = []
        if len(out) == n:
            break
    return out


def _squad_pairs(n=N):
    """``n`` (question, context) pairs of SQuAD 1.1 dev, from its 10th article on (the QA
    folder trains on the first and the 47th)."""
    data = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    out = []
    for article in data["data"][10:]:
        for paragraph in article["paragraphs"]:
            out.extend((qa["question"], paragraph["context"]) for qa in paragraph["qas"])
            if len(out) >= n:
                return out[:n]
    return out


@pytest.fixture(scope="module")
def conll_bin(tmp_path_factory):
    return small_conll_folder(tmp_path_factory.mktemp("portable_conll"))


def _checkpoints(root, request):
    """``{case: checkpoint}``: one tiny model per task and head family."""
    def tagging(name, task, *extra):
        save = root / name
        fairseq_train([request.getfixturevalue("conll_bin"), "--user-dir", USER_DIR, "--task",
                       task, "--criterion", task, "--arch", "roberta_tagging", *TINY_ROBERTA,
                       "--init-token", "0", *extra, *tiny_train_args(save)])
        return save / "checkpoint_last.pt"

    def sentence(name, task, *extra, num_classes=2):
        save = root / name
        fairseq_train([*span_args(glue_folder(task), save, *extra, num_classes=num_classes,
                                  max_update=2), "--disable-validation"])
        return save / "checkpoint_last.pt"

    pair_save = root / "pair"
    fairseq_train([request.getfixturevalue("pair_folders")["labelled"], "--user-dir", USER_DIR,
                   "--task", "span_pair_classification", "--criterion",
                   "span_pair_classification", "--arch", "roberta_span_pair_base",
                   *TINY_ROBERTA, "--num-classes", "2", "--init-token", "0",
                   "--separator-token", "2", "--shorten-method", "truncate",
                   *tiny_train_args(pair_save)])
    return {
        "mrpc": sentence("mrpc", "MRPC"),
        "stsb": sentence("stsb", "STS-B", "--regression-target", num_classes=1),
        "ner-sf": tagging("ner-sf", "span_tagging", "--tagging-head", "sf"),
        "ner-span": tagging("ner-span", "span_labeling", "--max-span-words", "4"),
        "qa": request.getfixturevalue("qa_checkpoint"),
        "pair": pair_save / "checkpoint_last.pt",
    }


def _phrase_rows(pair_folders, n=N):
    """``[sentence1, sentence2, phrase pairs]`` of ``n`` aligned MRPC rows the span-pair
    model was not trained on."""
    lines = (pair_folders["labelled"].parent / "all.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines[200:200 + n]]
    return [[r["sentence1"], r["sentence2"], [{"source": p["source"], "target": p["target"]}
                                             for p in r["phrases"]]] for r in rows]


@pytest.fixture(scope="module")
def cases(tmp_path_factory, request):
    """``{case: (exported folder, method, inputs, the fairseq hub's predictions,
    checkpoint)}``."""
    from span_plugin.hub import SpanHubInterface
    from span_plugin.export.model_export import export_model

    root = tmp_path_factory.mktemp("portable")
    inputs = {
        "mrpc": ("predict_logits", [list(r) for r in _glue_rows("MRPC", (3, 4))]),
        "stsb": ("predict_logits", [list(r) for r in _glue_rows("STS-B", (7, 8))]),
        "ner-sf": ("predict_entities", [" ".join(w) for w in _conll_words()]),
        "ner-span": ("predict_entities", [" ".join(w) for w in _conll_words()]),
        "qa": ("predict_answers", [list(p) for p in _squad_pairs()]),
        "pair": ("predict_pairs", _phrase_rows(request.getfixturevalue("pair_folders"))),
    }
    out = {}
    for name, checkpoint in _checkpoints(root, request).items():
        folder = root / f"{name}-hf"
        export_model(checkpoint, folder)
        hub = SpanHubInterface.from_pretrained(checkpoint)
        method, xs = inputs[name]
        call = getattr(hub, method)
        if method == "predict_logits":
            expected = call([tuple(x) for x in xs], batch_size=16).tolist()
        elif method == "predict_answers":
            expected = call([tuple(x) for x in xs])
        else:
            expected = [call(*x) if isinstance(x, list) else call(x) for x in xs]
        out[name] = (folder, method, xs, expected, checkpoint)
    return out


@pytest.fixture(scope="module")
def portable(cases, tmp_path_factory):
    """The predictions of every exported folder, made in ONE child process where
    importing fairseq fails."""
    root = tmp_path_factory.mktemp("portable_run")
    jobs = {name: {"dir": str(folder), "method": method, "inputs": xs}
            for name, (folder, method, xs, *_) in cases.items()}
    (root / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", CHILD, root / "jobs.json", root / "out.json"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return json.loads((root / "out.json").read_text(encoding="utf-8"))


def test_the_child_never_loaded_fairseq(portable):
    assert portable["fairseq_loaded"] == []


def test_blocked_fairseq_really_fails():
    """The child's preamble makes ``import fairseq`` an ImportError (the proof holds)."""
    proc = subprocess.run([sys.executable, "-c", NO_FAIRSEQ + "import fairseq"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode != 0 and "fairseq is not importable" in proc.stdout


@pytest.mark.parametrize("case", ["mrpc", "stsb"])
def test_sentence_logits_and_labels(cases, portable, case):
    """Classification logits (and so labels) and regression values, 100 dev pairs."""
    _, _, xs, expected, _ = cases[case]
    got, want = torch.tensor(portable[case]), torch.tensor(expected)
    assert got.shape == want.shape == (N, 2 if case == "mrpc" else 1)
    assert torch.allclose(got, want, atol=TOL), (got - want).abs().max()
    if case == "mrpc":
        assert got.argmax(-1).tolist() == want.argmax(-1).tolist()


@pytest.mark.parametrize("case", ["ner-sf", "ner-span"])
def test_entities_equal(cases, portable, case):
    """Entities (text, type, character span) of 100 CoNLL-2003 valid sentences."""
    _, _, xs, expected, _ = cases[case]
    assert len(portable[case]) == len(expected) == N
    assert portable[case] == expected
    assert sum(len(e) for e in expected) > 0  # the comparison covers entities


def test_qa_answers_equal(cases, portable):
    """Answer text and offsets equal, scores and null margins within 1e-4, on 100 SQuAD
    dev questions (a BERT-family export: WordPiece)."""
    _, _, xs, expected, _ = cases["qa"]
    got = portable["qa"]
    assert len(got) == len(expected) == N
    for g, w in zip(got, expected):
        assert (g["text"], g["start"], g["end"]) == (w["text"], w["start"], w["end"])
        assert abs(g["score"] - w["score"]) <= TOL
        assert abs(g["null_margin"] - w["null_margin"]) <= TOL
        assert [(a["text"], a["start"]) for a in g["nbest"][:3]] == \
            [(a["text"], a["start"]) for a in w["nbest"][:3]]


def test_phrase_pairs_equal(cases, portable):
    """Phrase and sentence labels equal and scores within 1e-4 on 100 aligned MRPC rows."""
    _, _, xs, expected, _ = cases["pair"]
    got = portable["pair"]
    assert len(got) == len(expected) == N
    assert sum(len(w["phrases"]) for w in expected) >= N
    for g, w in zip(got, expected):
        for a, b in zip([g["sentence"], *g["phrases"]], [w["sentence"], *w["phrases"]]):
            assert a["label"] == b["label"]
            assert a["scores"].keys() == b["scores"].keys()
            assert all(abs(a["scores"][k] - b["scores"][k]) <= TOL for k in a["scores"])
        assert len(g["phrases"]) == len(w["phrases"])


def test_span_predict_model_writes_the_checkpoints_files(cases, conll_bin, tmp_path):
    """``span-predict --model DIR`` writes what ``--checkpoint`` writes, byte for byte: a
    GLUE submission (MRPC dev) and CoNLL predictions with scores (the tagging folder's
    valid split, ``--data``)."""
    from span_plugin.cli.predict import main

    folder, *_, checkpoint = cases["mrpc"]
    common = ["--glue-dir", str(GLUE), "--task", "MRPC", "--split", "dev", "--output"]
    assert main(["--model", str(folder), *common, str(tmp_path / "dir.tsv")]) == 0
    assert main(["--checkpoint", str(checkpoint), *common, str(tmp_path / "ckpt.tsv")]) == 0
    assert (tmp_path / "dir.tsv").read_bytes() == (tmp_path / "ckpt.tsv").read_bytes()
    assert len((tmp_path / "dir.tsv").read_text().splitlines()) == 409
    folder, *_, checkpoint = cases["ner-span"]
    for source, flag in ((folder, "--model"), (checkpoint, "--checkpoint")):
        out = tmp_path / flag[2:]
        assert main([flag, str(source), "--data", str(conll_bin), "--split", "valid",
                     "--spans-out", str(out / "valid.jsonl"), "--results",
                     str(out / "results.json")]) == 0
    assert (tmp_path / "model" / "valid.jsonl").read_bytes() == \
        (tmp_path / "checkpoint" / "valid.jsonl").read_bytes()
    scores = [json.loads((tmp_path / d / "results.json").read_text())["dev"]
              for d in ("model", "checkpoint")]
    assert scores[0] == scores[1] and scores[0]["valid"]["items"] == 8


def test_span_predict_model_refuses_encoder_options(cases, capsys):
    from span_plugin.cli.predict import main

    folder = cases["mrpc"][0]
    assert main(["--model", str(folder), "--glue-dir", str(GLUE), "--task", "MRPC",
                 "--output", "x.tsv", "--segmentation", "none"]) == 2
    assert "--segmentation does not apply to --model" in capsys.readouterr().err


def test_unknown_head_kind_and_changed_file_refused(cases, tmp_path):
    """A folder naming a head kind the loader cannot build, or with a changed file, is
    refused in one line naming config.json / the file."""
    import shutil

    from span_plugin.formats.model_folder import ModelFolderError, write_manifest
    from span_plugin.portable import load_model

    folder = tmp_path / "bad"
    shutil.copytree(cases["mrpc"][0], folder)
    config = json.loads((folder / "config.json").read_text())
    config["span_plugin"]["heads"]["sentence_classification_head"]["kind"] = "mystery"
    (folder / "config.json").write_text(json.dumps(config))
    write_manifest(folder)
    with pytest.raises(ModelFolderError, match=r"config.json: head 'sentence_classification_head' "
                       r"has kind 'mystery'; known kinds: .*qa_boundary.*sentence"):
        load_model(folder)
    with open(folder / "model.safetensors", "r+b") as f:
        f.seek(-1, 2)
        f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
    with pytest.raises(ModelFolderError, match=r"model.safetensors: changed since export"):
        load_model(folder)


@pytest.mark.parametrize("case", ["mrpc", "stsb", "ner-sf", "ner-span", "qa", "pair"])
def test_int8_predicts_every_task_and_the_guard_records_it(cases, pair_folders, case, tmp_path):
    """``load_model(DIR, quantize="int8")`` predicts every task's 100 real inputs in the
    shape float32 gives, mostly alike; ``span-export int8-check`` measures the folder's
    labelled split (the span-pair model: its valid JSON Lines, --input) in both and
    records the figures in the folder, which still loads."""
    import shutil

    from span_plugin.export.int8_check import int8_check
    from span_plugin.portable import load_model

    folder, method, xs, expected, _ = cases[case]
    model = load_model(folder, quantize="int8")
    call = getattr(model, method)
    if method == "predict_logits":
        got = call([tuple(x) for x in xs], batch_size=16)
        want = torch.tensor(expected)
        assert got.shape == want.shape and torch.isfinite(got).all()
        same = (got.argmax(-1) == want.argmax(-1)).float().mean() if case == "mrpc" else \
            torch.corrcoef(torch.stack([got[:, 0], want[:, 0]]))[0, 1]
    elif method == "predict_answers":
        got = call([tuple(x) for x in xs])
        same = sum(g["text"] == w["text"] for g, w in zip(got, expected)) / len(expected)
    else:
        got = [call(*x) if isinstance(x, list) else call(x) for x in xs]
        if method == "predict_pairs":
            got = [[p["label"] for p in g["phrases"]] for g in got]
            expected = [[p["label"] for p in w["phrases"]] for w in expected]
        same = sum(g == w for g, w in zip(got, expected)) / len(expected)
    assert len(got) == len(expected) == N
    assert same >= 0.8, same
    copy = tmp_path / "hf"
    shutil.copytree(folder, copy)
    given = {"input_path": pair_folders["labelled"].parent / "valid.jsonl"} if case == "pair" else {}
    record = int8_check(copy, max_drop=100, **given)
    assert record["examples"] > 0 and 0 <= record["agreement"] <= 100
    assert abs(record["drop"] - (record["fp32"] - record["int8"])) <= 0.011
    assert load_model(copy).folder.config["span_plugin"]["int8"] == record


def test_span_pairs_as_onnx_int8_refused_in_one_line(cases, tmp_path, capsys):
    """Span pairs are not exported to ONNX, int8 or not: one line before anything is
    quantized or written; their portable int8 path is the test above."""
    from span_plugin.cli.export import main as export_main

    checkpoint = cases["pair"][4]
    assert export_main(["onnx", str(checkpoint), "--out", str(tmp_path / "onnx"),
                        "--quantize", "int8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "span_pair_classification model" in err, err
    assert not (tmp_path / "onnx").exists()
