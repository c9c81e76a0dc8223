"""Fuzz harness of exported model folders (issue 66, parts 4 and 5): folders whose
``files.json`` agrees with broken contents, seeded, on every run of the suite.

Three tiny models are fine-tuned here for 2 updates on real rows and exported with
``span-export hf``: MRPC pairs (GPT-2 BPE, greedy n-gram segmentation, a sentence head),
CoNLL-2003 (span labeling: "O" and four entity types) and SQuAD 1.1 (WordPiece, a QA
boundary head). Each case copies one folder, breaks one thing whoever edits a folder
could break (a file named outside it, a file swapped for another, config.json against
the tensors, labels against the heads, sizes no tensor holds, links, JSON nested past any
format, tensors that are not numbers, a tokenizer without its specials), and then writes
``files.json`` again so that the listing agrees with the broken contents. What must hold:

- ``load_model`` refuses it with a ModelFolderError (a ValueError) of one line that
  starts with the file's path and names the field (``config.json: span_plugin.labels.x:
  ...``); nothing else is raised, nothing predicted;
- ``span-predict --model`` exits 2 with that one line (in this process; every 20th case
  through the console script).

Beside the cases: weights that are finite but overflow the logits never give a label;
NaN weights in a checkpoint are refused by ``span-export hf`` and ``onnx`` naming the
tensor and give no label through the hub; a transformers encoder with missing weights
is refused; ``batch_size`` and ``device`` are checked; ``SpanHubInterface
.from_pretrained(DIR)`` loads a folder where fairseq cannot be imported;
``AutoTokenizer`` of a GPT-2 export gives the hub's ids on text with white space around
it; an encoder-only folder is named as one; ``span-export hf --data`` finds the
dictionary there; ``fairseq-train --num-classes`` is compared with the label dictionary.
``FUZZ_TABLE=PATH`` writes the table of outcomes (docs/RELIABILITY.md).
"""

import contextlib
import gzip
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import traceback
from collections import Counter
from pathlib import Path

import pytest
import torch

from conftest import BIN, GLUE, TINY_ROBERTA, USER_DIR
from conftest import fairseq_train, run_main, small_conll_folder, tiny_train_args
from script_runner import exit_status
from test_portable_parity import NO_FAIRSEQ  # every import of fairseq* fails
from test_task_data import glue_folder
from test_task_train import span_args

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

SEED = 66
TRACEBACK = "Traceback (most recent call last)"
CLI_EVERY = 20
OUTCOMES = Counter()
ROWS = []  # (source, case, outcome, message) in run order


# ---------------------------------------------------------------------------------
# The exported folders


@pytest.fixture(scope="module")
def folders(tmp_path_factory, request):
    """``{name: (exported folder, its checkpoint, span-predict's data arguments)}`` of
    the three models."""
    from span_plugin.export.model_export import export_model

    root = tmp_path_factory.mktemp("fuzz_folders")
    mrpc = root / "mrpc-ckpt"
    fairseq_train([*span_args(glue_folder("MRPC"), mrpc, max_update=2), "--disable-validation"])
    conll = small_conll_folder(root)
    ner = root / "ner-ckpt"
    fairseq_train([conll, "--user-dir", USER_DIR, "--task", "span_labeling", "--criterion",
                   "span_labeling", "--arch", "roberta_tagging", *TINY_ROBERTA, "--init-token",
                   "0", "--max-span-words", "4", *tiny_train_args(ner)])
    qa = request.getfixturevalue("qa_checkpoint")
    qa_data = request.getfixturevalue("qa_folder") / "bin"
    out = {}
    for name, checkpoint, data in (
            ("mrpc", mrpc / "checkpoint_last.pt",
             ["--glue-dir", GLUE, "--task", "MRPC", "--split", "dev", "--output", "pred.tsv"]),
            ("ner", ner / "checkpoint_last.pt",
             ["--data", conll, "--split", "valid", "--spans-out", "pred.jsonl"]),
            ("qa", qa, ["--data", qa_data, "--split", "valid", "--output", "pred.json"])):
        export_model(checkpoint, root / f"{name}-hf")
        out[name] = (root / f"{name}-hf", checkpoint, data)
    return out


# ---------------------------------------------------------------------------------
# Editing a folder as its editor would, files.json made to agree


def rewrite_manifest(folder):
    """files.json listing every file's sha256 as it is now (a link: what it points to;
    files.json itself written through its link)."""
    files = {}
    for path in sorted(Path(folder).rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if rel == "files.json" or path.is_dir() and not path.is_symlink():
            continue
        files[rel] = (hashlib.sha256(path.read_bytes()).hexdigest()
                      if path.is_file() else "0" * 64)
    target = Path(folder) / "files.json"
    target = Path(os.path.realpath(target))
    target.write_text(json.dumps({"format": 1, "files": files}, indent=2))


def edit_json(path, change):
    value = json.loads(Path(path).read_text(encoding="utf-8"))
    change(value)
    Path(path).write_text(json.dumps(value), encoding="utf-8")


def span_section(folder, change):
    edit_json(folder / "config.json", lambda c: change(c["span_plugin"]))


def edit_tensors(folder, change):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def head_of(folder):
    heads = json.loads((folder / "config.json").read_text())["span_plugin"]["heads"]
    return next(iter(heads))


def nested(depth):
    return "[" * depth + "]" * depth


# Each mutation: (folder, rng) -> (file the refusal names, what it must say: the field)


def m_ngrams_outside(folder, rng):
    name = rng.choice(["../../outside.txt.gz", "/etc/passwd", "a/../../b.txt.gz",
                       "./ngrams.txt.gz", "ngrams.txt.gz/..", "C:\\ngrams.txt.gz"])
    span_section(folder, lambda s: s["files"].update(ngrams=name))
    return "config.json", "span_plugin.files.ngrams"


def linked_out(folder, name):
    """Move ``name`` out of ``folder`` and leave a link to it in its place."""
    outside = folder.parent / f"{folder.name}-elsewhere-{name}"
    shutil.move(folder / name, outside)
    os.symlink(outside, folder / name)
    return name, "a link"


def m_ngrams_link_out(folder, rng):
    return linked_out(folder, "ngrams.txt.gz")


def m_ngrams_swapped(folder, rng):
    """Another n-gram dictionary over the same words: the packaged one less an entry."""
    from span_plugin.preprocess.segmentation.ngrams import default_ngrams_path

    with gzip.open(default_ngrams_path("gpt2"), "rt", encoding="utf-8") as f:
        lines = f.read().splitlines(True)
    del lines[rng.randrange(len(lines))]
    with gzip.open(folder / "ngrams.txt.gz", "wt", encoding="utf-8") as f:
        f.write("".join(lines))
    return "config.json", "data_record.encoder.ngrams.sha256"


def m_record_sha(folder, rng):
    digest = "%064x" % rng.getrandbits(256)
    span_section(folder, lambda s: s["data_record"]["encoder"]["ngrams"].update(sha256=digest))
    return "config.json", "data_record.encoder.ngrams.sha256"


def m_chunker_named(folder, rng):
    name = rng.choice(["ngrams.txt.gz", "chunker"])
    span_section(folder, lambda s: s["files"].update(chunker=name))
    return "config.json", "span_plugin.files.chunker"


def m_model_type(folder, rng):
    family = json.loads((folder / "config.json").read_text())["model_type"]
    # (xlm-roberta over RoBERTa's tensors computes the same: architectures tells it)
    other = rng.choice([t for t in ("bert", "roberta", "gpt2") if t != family])
    edit_json(folder / "config.json", lambda c: c.update(model_type=other))
    return "config.json", "model_type"


def m_architectures(folder, rng):
    family = json.loads((folder / "config.json").read_text())["model_type"]
    other = "BertForMaskedLM" if family != "bert" else "RobertaForMaskedLM"
    edit_json(folder / "config.json", lambda c: c.update(architectures=[other]))
    return "config.json", "architectures"


def m_encoder_size(folder, rng):
    key = rng.choice(["vocab_size", "hidden_size", "num_hidden_layers",
                      "max_position_embeddings", "type_vocab_size", "intermediate_size"])
    value = rng.choice([0, 1, 10 ** 9, json.loads((folder / "config.json").read_text())[key] + 1])
    edit_json(folder / "config.json", lambda c: c.update({key: value}))
    return "config.json", f"config.json: {key}: "


def m_labels(folder, rng):
    head = head_of(folder)
    how = rng.choice(["short", "long", "empty", "twice", "numbers", "missing"])

    def change(s):
        names = s["labels"].get(head)
        if isinstance(names, dict):  # not in these folders
            return
        if how == "missing" or names is None:
            s["labels"].pop(head, None)
            if names is None:  # a QA head: give it names it has none of
                s["labels"][head] = ["a", "b"]
        elif how == "short":
            del names[rng.randrange(len(names))]
        elif how == "long":
            names.append("EXTRA")
        elif how == "empty":
            names.clear()
        elif how == "twice":
            names[-1] = names[0]
        else:
            names[:] = list(range(len(names)))
    span_section(folder, change)
    return "config.json", f"span_plugin.labels.{head}"


def m_span_class_zero(folder, rng):
    head = head_of(folder)
    span_section(folder, lambda s: s["labels"][head].reverse())
    return "config.json", f"span_plugin.labels.{head}"


def m_huge_classes(folder, rng):
    """A head of 10^9 classes, its label list to match: refused against the tensors'
    shapes before anything of that size is built."""
    head = head_of(folder)
    n = rng.choice([10 ** 9, 3])

    def change(s):
        s["heads"][head]["options"]["num_classes"] = n
        if n == 3:  # labels, task and record all agreeing: only the tensors tell
            s["labels"][head].append("2")
            s["task_args"]["num_classes"] = 3
            s["data_record"]["labels"]["names"].append("2")
    span_section(folder, change)
    return "config.json", (f"span_plugin.heads.{head}" if n == 3 else f"span_plugin.labels.{head}")


def m_max_answer_tokens(folder, rng):
    value = rng.choice([10 ** 6, 0, -3])
    where = rng.choice(["options", "task_args"])
    span_section(folder, lambda s: (s["heads"]["qa_head"]["options"] if where == "options"
                                    else s["task_args"]).update(max_answer_tokens=value))
    return "config.json", ("span_plugin.heads.qa_head.options.max_answer_tokens"
                           if where == "options" else "span_plugin.task_args.max_answer_tokens")


def m_max_positions(folder, rng):
    where = rng.choice(["model_args", "task_args"])
    span_section(folder, lambda s: s[where].update(max_positions=10 ** 6))
    return "config.json", f"span_plugin.{where}.max_positions"


def m_task_classes(folder, rng):
    span_section(folder, lambda s: s["task_args"].update(num_classes=rng.choice([3, 7, 0])))
    return "config.json", "span_plugin.task_args.num_classes"


def m_head_fields(folder, rng):
    head = head_of(folder)
    key, value = rng.choice([("options", "x"), ("options", [1]), ("inputs", "spans"),
                             ("kind", 5), ("options", {"num_classes": [2]})])
    span_section(folder, lambda s: s["heads"][head].update({key: value}))
    return "config.json", f"span_plugin.heads.{head}"


def m_ghost_head(folder, rng):
    edit_tensors(folder, lambda t: t.update({"span_heads.ghost.out_proj.weight":
                                             torch.zeros(2, 2)}))
    return "config.json", "span_plugin.heads"


def m_manifest_link(folder, rng):
    return linked_out(folder, "files.json")


def m_deep_json(folder, rng):
    name = rng.choice(["files.json", "config.json", "tokenizer.json"])
    depth = rng.choice([100, 10 ** 5])
    path = folder / name
    text = path.read_text(encoding="utf-8").rstrip()
    path.write_text(text[:-1] + f', "deep": {nested(depth)}}}', encoding="utf-8")
    if name != "files.json":  # else it is the listing that is nested too deep
        rewrite_manifest(folder)
    return name, "nested deeper than"


def m_not_a_number_json(folder, rng):
    key = rng.choice(["layer_norm_eps", "hidden_dropout_prob"])
    text = (folder / "config.json").read_text(encoding="utf-8")
    value = json.dumps(json.loads(text)[key])
    (folder / "config.json").write_text(
        text.replace(f'"{key}": {value}',
                     f'"{key}": {rng.choice(["NaN", "Infinity", "-Infinity"])}', 1),
        encoding="utf-8")
    return "config.json", "is not a number JSON allows"


def m_not_finite_weight(folder, rng):
    """NaN or an infinity in one float tensor: a head's or the encoder's."""
    names = []

    def change(t):
        name = rng.choice(sorted(k for k, v in t.items() if v.is_floating_point()))
        value = t[name].clone().view(-1)
        value[rng.randrange(value.numel())] = rng.choice([float("nan"), float("inf"),
                                                          -float("inf")])
        t[name] = value.view(t[name].shape)
        names.append(name)
    edit_tensors(folder, change)
    return "model.safetensors", f"tensor {names[0]} holds"


def m_weights_header(folder, rng):
    data = (folder / "model.safetensors").read_bytes()
    how = rng.choice(["garbage", "cut", "huge", "offsets"])
    if how == "garbage":
        data = (16).to_bytes(8, "little") + b"{not json!!!!!!}" + data[100:]
    elif how == "cut":
        data = data[:rng.randrange(8, len(data) - 1)]
    elif how == "huge":
        data = (10 ** 12).to_bytes(8, "little") + data[8:]
    else:  # a tensor's bytes overlapping another's
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        name = sorted(k for k in header if k != "__metadata__")[1]
        begin, end = header[name]["data_offsets"]
        header[name]["data_offsets"] = [begin - 4, end - 4] if begin >= 4 else [begin + 4, end + 4]
        raw = json.dumps(header).encode()
        raw += b" " * (n - len(raw)) if len(raw) <= n else b""
        data = len(raw).to_bytes(8, "little") + raw + data[8 + n:]
    (folder / "model.safetensors").write_bytes(data)
    return "model.safetensors", ""


def m_tokenizer_special(folder, rng):
    layout = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = layout["model"]["vocab"]
    specials = [s for s in ("<s>", "<pad>", "</s>", "<unk>", "[CLS]", "[PAD]", "[SEP]", "[UNK]")
                if s in vocab]
    del vocab[rng.choice(specials)]
    (folder / "tokenizer.json").write_text(json.dumps(layout), encoding="utf-8")
    return "tokenizer.json", "model.vocab"


def m_tokenizer_id(folder, rng):
    layout = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = layout["model"]["vocab"]
    token = rng.choice(sorted(vocab)[:500])
    vocab[token] = rng.choice([10 ** 6, -1, "7"])
    (folder / "tokenizer.json").write_text(json.dumps(layout), encoding="utf-8")
    return "tokenizer.json", "model.vocab"


def m_fifo(folder, rng):
    os.mkfifo(folder / "notes")
    return "notes", "FIFO"


MUTATIONS = {
    "a file named outside the folder": (("mrpc", "ner"), m_ngrams_outside),
    "the n-gram file a link out": (("mrpc",), m_ngrams_link_out),
    "the n-gram file swapped": (("mrpc",), m_ngrams_swapped),
    "the record's sha256 of it changed": (("mrpc", "qa"), m_record_sha),
    "a chunker the record lacks": (("ner",), m_chunker_named),
    "model_type of another family": (("mrpc", "qa"), m_model_type),
    "architectures of another family": (("mrpc", "qa"), m_architectures),
    "an encoder size against the tensors": (("mrpc", "ner", "qa"), m_encoder_size),
    "labels against the head": (("mrpc", "ner", "qa"), m_labels),
    "span labeling's class 0 not O": (("ner",), m_span_class_zero),
    "a head of more classes than its tensors": (("mrpc",), m_huge_classes),
    "max_answer_tokens past the positions": (("qa",), m_max_answer_tokens),
    "max_positions past the table": (("mrpc", "qa"), m_max_positions),
    "the task's num_classes not the head's": (("mrpc",), m_task_classes),
    "a head's fields of other types": (("mrpc", "ner"), m_head_fields),
    "head tensors of no head": (("mrpc",), m_ghost_head),
    "files.json a link": (("mrpc",), m_manifest_link),
    "JSON nested past any format": (("mrpc", "qa"), m_deep_json),
    "NaN or Infinity in config.json": (("mrpc",), m_not_a_number_json),
    "a weight that is not a number": (("mrpc", "ner", "qa"), m_not_finite_weight),
    "the weights' header broken": (("mrpc",), m_weights_header),
    "a tokenizer without a special": (("mrpc", "qa"), m_tokenizer_special),
    "a token id past the embeddings": (("mrpc", "qa"), m_tokenizer_id),
    "a FIFO in the folder": (("mrpc",), m_fifo),
}
# Written after files.json is (the case is about files.json itself, or a file that
# no listing could hold).
AFTER_MANIFEST = (m_manifest_link, m_deep_json, m_fifo)


def cases():
    """``[(case id, source folder, mutation name, seed)]``: every mutation on every folder
    it applies to, twice (two seeds), in a seeded order."""
    rng = random.Random(SEED)
    out = [(f"{source}: {name} #{k}", source, name, rng.getrandbits(32))
           for name, (sources, _) in MUTATIONS.items() for source in sources for k in range(2)]
    rng.shuffle(out)
    return out


def make_case(src, dst, mutation, seed):
    shutil.copytree(src, dst)
    rng = random.Random(seed)
    if mutation in AFTER_MANIFEST:
        rewrite_manifest(dst)
        return mutation(dst, rng)
    expected = mutation(dst, rng)
    rewrite_manifest(dst)
    return expected


def loaded(folder):
    """``(exception or None, predictions)`` of load_model on ``folder``."""
    from span_plugin.portable import load_model

    try:
        model = load_model(folder)
    except Exception as err:  # noqa: BLE001 - the case's outcome
        return err, traceback.format_exc()
    return None, model


def predict_cli(folder, data, tmp, cli):
    """``(exit status, stderr)`` of span-predict --model on ``folder``."""
    from span_plugin.cli.predict import main

    argv = ["--model", str(folder)] + [str(tmp / a) if str(a).startswith("pred.") else str(a)
                                       for a in data]
    if cli:
        proc = subprocess.run([str(BIN / "span-predict"), *argv], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)
        return proc.returncode, proc.stderr + proc.stdout
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv) or 0
        except SystemExit as stop:
            code = exit_status(stop)
        except Exception:  # noqa: BLE001 - the interpreter would print it
            out.write(traceback.format_exc())
            code = 1
    return code, out.getvalue()


def problem_of(folder, expected, err, code, output):
    """What is wrong with a case's outcome, or None."""
    name, field = expected
    if err is None:
        return "loaded: the broken folder was accepted"
    from span_plugin.formats.model_folder import ModelFolderError

    message = str(err)
    if not isinstance(err, ModelFolderError):
        return f"{type(err).__name__} (not a ModelFolderError): {message[:200]}"
    if "\n" in message:
        return f"a refusal of {len(message.splitlines())} lines"
    if not message.startswith(f"{folder / name}:"):
        return f"does not name {name}: {message[:200]}"
    if field not in message:
        return f"does not say {field!r}: {message[:200]}"
    lines = output.strip().splitlines()
    if code != 2 or TRACEBACK in output or len(lines) != 1:
        return f"span-predict --model exited {code} with {len(lines)} lines: {output[-300:]}"
    if message not in lines[0]:
        return f"span-predict's line is not the loader's: {lines[0][:200]}"
    return None


@pytest.fixture(scope="module", autouse=True)
def outcome_table():
    yield
    path = os.environ.get("FUZZ_TABLE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n| folder | case | outcome | message |\n|---|---|---|---|\n")
            for source, case, outcome, message in ROWS:
                f.write(f"| {source} | {case} | {outcome} | {message[:160]} |\n")


def test_broken_folders_with_agreeing_manifests_are_refused_in_one_line(folders, tmp_path):
    failures = []
    for k, (case, source, name, seed) in enumerate(cases()):
        src, _, data = folders[source]
        folder = tmp_path / f"case{k}"
        expected = make_case(src, folder, MUTATIONS[name][1], seed)
        err, _ = loaded(folder)
        code, output = predict_cli(folder, data, tmp_path, cli=k % CLI_EVERY == 0)
        problem = problem_of(folder, expected, err, code, output)
        OUTCOMES["problem" if problem else "refused"] += 1
        ROWS.append((source, name, problem or "refused", str(err).splitlines()[0] if err else ""))
        if problem:
            failures.append(f"{case}: {problem}")
    assert not failures, "\n".join(failures)
    assert OUTCOMES["refused"] >= 2 * sum(len(s) for s, _ in MUTATIONS.values())


# ---------------------------------------------------------------------------------
# Values that are not numbers


def test_finite_weights_that_overflow_the_logits_give_no_label(folders, tmp_path):
    """A head whose weights are finite but large: its logits are infinities, its
    probabilities NaN; no label is made of them (before: ``{'1': nan, '0': nan}`` and a
    label)."""
    from span_plugin.portable import load_model
    from span_plugin.portable.results import NotFiniteError

    folder = tmp_path / "big"
    shutil.copytree(folders["mrpc"][0], folder)
    head = head_of(folder)
    edit_tensors(folder, lambda t: t[f"span_heads.{head}.out_proj.weight"].fill_(3e38))
    rewrite_manifest(folder)
    model = load_model(folder)
    with pytest.raises(NotFiniteError, match=r"not finite numbers") as err:
        model.predict([("The cat sat.", "A cat was sitting.")])
    assert "\n" not in str(err.value)


@pytest.fixture(scope="module")
def nan_checkpoint(folders, tmp_path_factory):
    """The MRPC checkpoint with one NaN in its head's output weights."""
    _, checkpoint, _ = folders["mrpc"]
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    key = "classification_heads.sentence_classification_head.out_proj.weight"
    state["model"][key][0, 0] = float("nan")
    out = tmp_path_factory.mktemp("nan") / "checkpoint_nan.pt"
    torch.save(state, out)
    return out, key


def test_nan_weights_are_refused_by_export_and_give_no_label(nan_checkpoint, tmp_path):
    from span_plugin.hub import SpanHubInterface
    from span_plugin.portable.results import NotFiniteError

    checkpoint, key = nan_checkpoint
    proc = run_main("span-export", "hf", checkpoint, "--out", tmp_path / "x", check=False)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and TRACEBACK not in proc.stdout, proc.stdout
    assert "span_heads.sentence_classification_head.out_proj.weight holds NaN" in lines[0]
    assert "not finite" in lines[0] and not (tmp_path / "x").exists()
    hub = SpanHubInterface.from_pretrained(checkpoint)
    with pytest.raises(NotFiniteError, match="not finite numbers"):
        hub.predict([("The cat sat.", "A cat was sitting.")])


def test_onnx_export_of_nan_weights_names_the_tensor(nan_checkpoint, tmp_path):
    pytest.importorskip("onnxruntime")
    checkpoint, key = nan_checkpoint
    proc = run_main("span-export", "onnx", checkpoint, "--out", tmp_path / "x", check=False)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout
    assert f"{key} holds NaN" in lines[0] and "differ" not in lines[0], lines[0]


def test_batch_size_and_device_are_checked(folders):
    from span_plugin.hub import SpanHubInterface
    from span_plugin.portable import load_model

    folder, checkpoint, _ = folders["mrpc"]
    model, hub = load_model(folder), SpanHubInterface.from_pretrained(checkpoint)
    pair = [("The cat sat.", "A cat was sitting.")]
    for bad in (0, -1, 2.5, True, "8", None):
        for who in (model, hub):
            with pytest.raises(ValueError, match=r"batch_size .*: expected a positive integer"):
                who.predict(pair, batch_size=bad)
    ner = load_model(folders["ner"][0])
    with pytest.raises(ValueError, match="batch_size 0"):
        ner.predict_words([["Peter", "lives", "in", "Paris"]], batch_size=0)
    qa = load_model(folders["qa"][0])
    with pytest.raises(ValueError, match="batch_size 0"):
        qa.predict_answers([("Who?", "Ann was here.")], batch_size=0)
    assert model.predict(pair, batch_size=1) == model.predict(pair, batch_size=7)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device 'cuda': CUDA is not available"):
            load_model(folder, device="cuda")
    with pytest.raises(ValueError, match="not a device torch knows"):
        load_model(folder, device="gpu7")


def test_transformers_encoder_with_missing_weights_is_refused(folders, tmp_path):
    """Before: the load report was silenced and the missing weights random."""
    from span_plugin.formats.model_folder import ModelFolderError
    from span_plugin.portable import load_model

    folder = tmp_path / "missing"
    shutil.copytree(folders["mrpc"][0], folder)
    edit_tensors(folder, lambda t: [t.pop(k) for k in list(t)
                                    if ".layer.1.attention.self.query." in k])
    rewrite_manifest(folder)
    with pytest.raises(ModelFolderError, match=r"model.safetensors: transformers' RobertaModel "
                       r"loads with weights missing: encoder.layer.1.attention.self.query"):
        load_model(folder, encoder="transformers")
    pair = [("The cat sat.", "A cat was sitting.")]
    whole = folders["mrpc"][0]
    first, second = (load_model(whole, encoder="transformers").predict_logits(pair)
                     for _ in range(2))
    assert torch.equal(first, second)  # nothing random
    assert torch.allclose(first, load_model(whole).predict_logits(pair), atol=1e-5)


HUB_WITHOUT_FAIRSEQ = NO_FAIRSEQ + """
from span_plugin.hub import SpanHubInterface
model = SpanHubInterface.from_pretrained(sys.argv[1])
print(model.predict([("The cat sat.", "A cat was sitting.")])[0]["label"])
print([m for m in sys.modules if m.startswith("fairseq")])
"""


def test_hub_from_pretrained_loads_a_folder_without_fairseq(folders):
    from span_plugin.portable import load_model

    folder = folders["mrpc"][0]
    proc = subprocess.run([sys.executable, "-c", HUB_WITHOUT_FAIRSEQ, str(folder)], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    label, loaded_modules = proc.stdout.strip().splitlines()
    assert loaded_modules == "[]"
    assert label == load_model(folder).predict([("The cat sat.", "A cat was sitting.")])[0]["label"]


def test_auto_tokenizer_of_a_gpt2_export_strips_as_the_hub(folders):
    """White space around the text (Python's str.strip set, U+001C..U+001F included):
    AutoTokenizer gives the hub's ids on seeded random strings; before, a leading space
    made the first word's token another and a trailing one a token of its own."""
    from transformers import AutoTokenizer

    from span_plugin.modules.head_builders import HEAD_BUILDERS
    from span_plugin.portable.folder import read_folder
    from span_plugin.portable.text import text_encoder

    folder = folders["mrpc"][0]
    encoder, vocab = text_encoder(read_folder(folder, HEAD_BUILDERS))
    tok = AutoTokenizer.from_pretrained(folder)
    rng = random.Random(SEED)
    pieces = [" ", "\t", "\n", "\r", "\x0b", "\x1c", "\x1f", "\x85", "\xa0", "\u2028", "\u3000",
              "\u200b", "\ufeff", "The", "cat", "é", ".", ",", "sat"]
    texts = [" The cat sat. ", "\n\nline one\nline two\n", "\x1cx\x1f", "  x", ""]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 9))) for _ in range(400)]
    for text in texts:
        symbols, _ = encoder.encode(text)
        got = tok(text, add_special_tokens=False)["input_ids"]
        assert got == vocab.line(symbols)[:-1], repr(text)
    assert tok(" The cat ", return_offsets_mapping=True)["offset_mapping"][1] == (1, 4)


def test_an_encoder_only_folder_is_named_as_one(converted_minilm, tmp_path, capsys):
    from span_plugin.cli.predict import main
    from span_plugin.formats.model_folder import ModelFolderError
    from span_plugin.portable import load_model

    out = tmp_path / "encoder"
    run_main("span-export", "hf", converted_minilm, "--out", out)
    with pytest.raises(ModelFolderError) as err:
        load_model(out)
    message = str(err.value)
    assert "an encoder without task heads" in message and "AutoModel" in message
    assert "span-export hf" in message and "export it again" not in message
    assert main(["--model", str(out), "--input", str(tmp_path / "x.tsv"), "--output",
                 str(tmp_path / "y.tsv")]) == 2
    assert "an encoder without task heads" in capsys.readouterr().err


def test_export_finds_the_dictionary_in_data(folders, tmp_path):
    """A checkpoint whose recorded data folder is gone, given it with --data: the
    dictionary is read there (before: "no dictionary", --data unread)."""
    _, checkpoint, _ = folders["mrpc"]
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state["task_state"]["span_plugin_data_record"]["data_dir"] = str(tmp_path / "gone")
    state["cfg"]["task"]["data"] = str(tmp_path / "gone")
    moved = tmp_path / "run" / "checkpoint_best.pt"
    moved.parent.mkdir()
    torch.save(state, moved)
    proc = run_main("span-export", "hf", moved, "--out", tmp_path / "x", check=False)
    assert proc.returncode == 2 and "no dictionary" in proc.stdout and "--data" in proc.stdout
    proc = run_main("span-export", "hf", moved, "--out", tmp_path / "x", "--data",
                    glue_folder("MRPC"), check=False)
    assert proc.returncode == 0, proc.stdout
    assert "copied in: ngrams.txt.gz" in proc.stdout


def test_num_classes_by_hand_is_compared_with_the_label_dictionary(tmp_path):
    """Before: an IndexError mid-training (3 labels, --num-classes 2) or a head of more
    outputs than labels; the recipes checked it, fairseq-train did not."""
    data = glue_folder("MRPC")
    for given in (1, 3):
        proc = run_main("fairseq-train", *span_args(data, tmp_path / f"n{given}", num_classes=given,
                                                    max_update=1), check=False)
        lines = [line for line in proc.stdout.splitlines() if "error:" in line]
        assert proc.returncode == 2 and TRACEBACK not in proc.stdout, proc.stdout[-3000:]
        assert len(lines) == 1 and f"--num-classes {given}, but the label dictionary" in lines[0]
        assert str(data / "label" / "dict.txt") in lines[0] and "holds 2 labels" in lines[0]
