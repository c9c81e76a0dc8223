"""span-export onnx (issue 52, part 4): tiny fine-tuned models of each task and head kind,
trained here for 2 updates on real rows, exported through the command, and run by ONNX
Runtime on at least 100 real inputs each (GLUE dev rows, CoNLL-2003 sentences, SQuAD
questions), encoded by the hub's own code in batches of other sizes and lengths than the
traced one: every output within 1e-4 of the torch model's. And what bad output folders
get."""

import json

import numpy as np
import pytest
import torch

from conftest import DATA, GLUE, GPT2_BPE, TINY_ROBERTA, USER_DIR
from conftest import fairseq_train, small_conll_folder, tiny_train_args
from test_task_data import glue_folder
from test_task_train import span_args

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from span_plugin.cli.export import main as export_main  # noqa: E402
from span_plugin.hub import SpanHubInterface  # noqa: E402
from span_plugin.export.onnx_export import (BRANCHES, META, MODEL, TOLERANCE,  # noqa: E402
                                               max_abs_diff, open_session, run_session)
from span_plugin.export.onnx_graph import HeadGraph  # noqa: E402
from span_plugin.portable.onnx_inputs import model_inputs, onnx_inputs  # noqa: E402

BPE = ["--gpt2-encoder-json", GPT2_BPE / "encoder.json", "--gpt2-vocab-bpe", GPT2_BPE / "vocab.bpe"]
BATCH_SIZES = (1, 7, 32, 3, 16, 5, 24, 12)  # cycled: batches of many sizes and lengths
N_INPUTS = 100




def sentence_checkpoint(save, task, *extra, num_classes=2):
    argv = span_args(glue_folder(task), save, *extra, num_classes=num_classes, max_update=2)
    fairseq_train([*argv, "--disable-validation"])
    return save / "checkpoint_last.pt"


def glue_rows(task, columns, n=N_INPUTS):
    """The first ``n`` dev rows of real GLUE ``task``: a str or a tuple of ``columns``."""
    lines = (GLUE / task / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:n + 1]
    rows = [tuple(line.split("\t")[c] for c in columns) for line in lines]
    return [r[0] if len(r) == 1 else r for r in rows]


def conll_word_lists(n=N_INPUTS, max_words=40):
    """The first ``n`` sentences of CoNLL-2003's valid file of at most ``max_words``."""
    out, words = [], []
    for line in (DATA / "conll2003" / "valid.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("-DOCSTART-"):
            words.append(line.split()[0])
        elif words:
            if len(words) <= max_words:
                out.append(words)
            words = []
        if len(out) == n:
            break
    return out


def squad_questions(n=N_INPUTS):
    """The first ``n`` (question, context) pairs of SQuAD 1.1 dev."""
    data = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    pairs = [(qa["question"], p["context"]) for article in data["data"]
             for p in article["paragraphs"] for qa in p["qas"]]
    return pairs[:n]


@pytest.fixture(scope="module")
def conll_bin(tmp_path_factory):
    return small_conll_folder(tmp_path_factory.mktemp("onnx_conll"))


def tagging_checkpoint(save, folder, task, *extra):
    fairseq_train([folder, "--user-dir", USER_DIR, "--task", task, "--criterion", task,
                   "--arch", "roberta_tagging", *TINY_ROBERTA, "--init-token", "0", *extra,
                   *tiny_train_args(save)])
    return save / "checkpoint_last.pt"


def qa_checkpoint_of(save, qa_folder, head):
    fairseq_train([qa_folder / "bin", "--user-dir", USER_DIR, "--task", "span_qa",
                   "--criterion", "span_qa", "--arch", "roberta_qa", "--qa-head", head,
                   "--max-answer-tokens", "12", *TINY_ROBERTA, *tiny_train_args(save)])
    return save / "checkpoint_last.pt"


def export(checkpoint, out, *extra):
    assert export_main(["onnx", str(checkpoint), "--out", str(out), *map(str, extra)]) == 0
    return json.loads((out / META).read_text(encoding="utf-8"))


def assert_onnx_matches_torch(checkpoint, out, examples, **files):
    """ONNX Runtime on ``out``'s graph vs the torch model of ``checkpoint`` on every
    example, in batches of :data:`BATCH_SIZES`. Returns (the hub, the session)."""
    hub = SpanHubInterface.from_pretrained(checkpoint, **files)
    graph = HeadGraph(hub)
    meta = json.loads((out / META).read_text(encoding="utf-8"))
    assert tuple(meta["inputs"]) == graph.input_names
    session = open_session(out / MODEL)
    assert [i.name for i in session.get_inputs()] == list(graph.input_names)
    names = [o.name for o in session.get_outputs()]
    assert names == list(meta["outputs"])
    if meta["task"] == "span_classification" and not meta["regression"]:
        assert meta["labels"] == hub.labels  # in the order of the logits
    rows, shapes, k = 0, set(), 0
    while rows < len(examples):
        chunk = examples[rows:rows + BATCH_SIZES[k % len(BATCH_SIZES)]]
        k += 1
        inputs = model_inputs(hub, chunk, graph.input_names)
        shapes.add(tuple(inputs["src_tokens"].shape))
        with torch.no_grad():
            ref = graph(*graph.args_of(inputs))
        got = run_session(session, inputs)
        for name, r in zip(names, ref):
            diff = max_abs_diff(got[name], r.float().numpy())
            assert diff <= TOLERANCE, (name, tuple(inputs["src_tokens"].shape), diff)
        rows += len(chunk)
    assert rows >= N_INPUTS
    # Sizes and lengths other than the traced batch's (QA windows are mostly full: fewer
    # lengths).
    assert len({b for b, _ in shapes}) > 3 and len({t for _, t in shapes}) > 1, shapes
    return hub, session


BPE_FILES = {"gpt2_encoder_json": GPT2_BPE / "encoder.json",
             "gpt2_vocab_bpe": GPT2_BPE / "vocab.bpe"}


# name -> (train(save, request) -> checkpoint, real examples, head kind, outputs, labels)
@pytest.fixture(scope="module")
def mrpc_checkpoint(tmp_path_factory):
    return sentence_checkpoint(tmp_path_factory.mktemp("onnx_mrpc"), "MRPC")


SENTENCE_CASES = {
    "mrpc-span": (lambda save: None,
                  lambda: glue_rows("MRPC", (3, 4)), "sentence", ["0", "1"]),
    "sst2-plain": (lambda save: sentence_checkpoint(save, "SST-2", "--sentence-head", "plain"),
                   lambda: glue_rows("SST-2", (0,)), "plain", ["0", "1"]),
    # BERT's parts too: segment B added to the tokens, the head over the pooled <s>
    "stsb-regression": (lambda save: sentence_checkpoint(save, "STS-B", "--regression-target",
                                                         "--bert-pooler", "--bert-token-types",
                                                         num_classes=1),
                        lambda: glue_rows("STS-B", (7, 8)), "sentence", None),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SENTENCE_CASES))
def test_sentence_models_run_in_onnx_runtime_as_in_torch(case, tmp_path, request):
    train, rows, kind, labels = SENTENCE_CASES[case]
    checkpoint = train(tmp_path / "ckpt") or request.getfixturevalue("mrpc_checkpoint")
    meta = export(checkpoint, tmp_path / "onnx", *BPE)
    assert (meta["head_kind"], meta["regression"]) == (kind, labels is None)
    assert (sorted(meta["labels"]) if meta["labels"] else None) == labels  # dictionary order
    assert list(meta["outputs"]) == ["logits"]
    assert meta["inputs"]["src_tokens"]["shape"] == ["batch", "length"]
    if kind == "sentence":
        assert meta["inputs"]["spans"]["shape"] == ["batch", "spans", 2]
    assert meta["record"]["inputs"] == (1 if case.startswith("sst2") else 2)
    # The export's own check ran the shortest input: <s> Yes </s> [</s> No </s>].
    assert meta["check"]["batches"][-1] == [1, 3 if case.startswith("sst2") else 6]
    hub, session = assert_onnx_matches_torch(checkpoint, tmp_path / "onnx", rows(), **BPE_FILES)
    # The graph's logits are the hub's predictions' (its own batching of raw text).
    pairs = rows()[:32]
    got = run_session(session, model_inputs(hub, pairs, tuple(meta["inputs"])))["logits"]
    assert max_abs_diff(got, hub.predict_logits(pairs, batch_size=32).numpy()) <= TOLERANCE


@pytest.mark.slow
def test_an_exported_folder_is_traced_as_its_predictor_runs(mrpc_checkpoint, tmp_path):
    """span-export onnx of a span-export hf folder: the folder's own network traced (no
    fairseq model), its ids and special ids; ONNX Runtime gives the folder predictor's
    logits, and the checkpoint's within the same tolerance."""
    hf = tmp_path / "hf"
    assert export_main(["hf", str(mrpc_checkpoint), "--out", str(hf)]) == 0
    meta = export(hf, tmp_path / "onnx")
    folder = SpanHubInterface.from_pretrained(hf)
    assert meta["special_ids"]["pad"] == folder.vocab.pad
    assert meta["head_kind"] == "sentence" and meta["record"]["inputs"] == 2
    # two traces under one If on the pads (batches of 1 below take the unpadded one),
    # each weight stored once, nothing else left in the folder
    assert meta["graph"] == BRANCHES
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == [MODEL, META]
    size = (tmp_path / "onnx" / MODEL).stat().st_size
    assert size < 1.2 * (hf / "model.safetensors").stat().st_size
    _, session = assert_onnx_matches_torch(hf, tmp_path / "onnx", glue_rows("MRPC", (3, 4)))
    pairs = glue_rows("MRPC", (3, 4))[:32]
    got = run_session(session, model_inputs(folder, pairs, tuple(meta["inputs"])))["logits"]
    assert max_abs_diff(got, folder.predict_logits(pairs, batch_size=32).numpy()) <= TOLERANCE
    # onnx_inputs feeds a graph traced on the folder its own ids
    fed = session.run(None, onnx_inputs(folder, meta, pairs))[0]
    assert max_abs_diff(fed, got) <= TOLERANCE
    checkpoint = SpanHubInterface.from_pretrained(mrpc_checkpoint, **BPE_FILES)
    assert max_abs_diff(got, checkpoint.predict_logits(pairs, batch_size=32).numpy()) <= TOLERANCE


def test_branches_route_on_the_pads_and_store_a_shared_weight_once(tmp_path):
    """combine(): two graphs that add a shared weight, one plus 1 and one plus 2: a
    batch without the pad id takes the first, one with it the second; the weight is
    stored once; traces of other inputs are refused."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from span_plugin.export.onnx_branches import combine

    def graph(path, plus, input_name="src_tokens"):
        weight = numpy_helper.from_array(np.arange(4, dtype=np.int64), "w")
        nodes = [helper.make_node("Constant", [], ["k"], value=helper.make_tensor(
                     "k", TensorProto.INT64, [], [plus])),
                 helper.make_node("Add", [input_name, "w"], ["x"]),
                 helper.make_node("Add", ["x", "k"], ["logits"])]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
            input_name, TensorProto.INT64, ["batch", 4])], [helper.make_tensor_value_info(
                "logits", TensorProto.INT64, None)], [weight])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
        model.ir_version = 10  # what the exporter writes; ONNX Runtime reads up to 13
        onnx.save(model, path)
        return path

    a, b = graph(tmp_path / "a.onnx", 1), graph(tmp_path / "b.onnx", 2)
    combine(a, b, 0, tmp_path / "both.onnx")
    model = onnx.load(str(tmp_path / "both.onnx"))
    assert len(model.graph.initializer) == 1
    session = ort.InferenceSession(str(tmp_path / "both.onnx"),
                                   providers=["CPUExecutionProvider"])
    tokens = np.array([[5, 6, 7, 8], [5, 6, 7, 9]], dtype=np.int64)
    got, = session.run(None, {"src_tokens": tokens})
    assert (got == tokens + np.arange(4) + 1).all()
    tokens[1, 3] = 0
    got, = session.run(None, {"src_tokens": tokens})
    assert (got == tokens + np.arange(4) + 2).all()
    with pytest.raises(ValueError, match="differ in their inputs"):
        combine(a, graph(tmp_path / "c.onnx", 2, "other"), 0, tmp_path / "x.onnx")


# head -> (task, its training flags, inputs, outputs)
TAGGING_CASES = {
    "token": ("span_tagging", ["--tagging-head", "token"], ["src_tokens"], ["logits"]),
    "sf": ("span_tagging", ["--tagging-head", "sf"], ["src_tokens", "spans"], ["logits"]),
    "span": ("span_labeling", ["--max-span-words", "4"], ["src_tokens", "words"],
             ["logits", "valid"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("head", list(TAGGING_CASES))
def test_tagging_models_run_in_onnx_runtime_as_in_torch(head, conll_bin, tmp_path):
    task, flags, inputs, outputs = TAGGING_CASES[head]
    checkpoint = tagging_checkpoint(tmp_path / "ckpt", conll_bin, task, *flags)
    meta = export(checkpoint, tmp_path / "onnx")
    assert (meta["task"], meta["head_kind"]) == (task, head)
    assert (list(meta["inputs"]), list(meta["outputs"])) == (inputs, outputs)
    if task == "span_tagging":
        assert meta["labels"][0] == "O" and "B-PER" in meta["labels"]
    else:  # class 0: no entity, then the types
        assert meta["labels"] == ["O", "LOC", "MISC", "ORG", "PER"]
        assert meta["outputs"]["logits"]["example_shape"][2:] == [4, 5]
    assert_onnx_matches_torch(checkpoint, tmp_path / "onnx", conll_word_lists())


@pytest.mark.slow
@pytest.mark.parametrize("head", ["boundary", "sf"])
def test_qa_models_run_in_onnx_runtime_as_in_torch(head, qa_folder, tmp_path):
    checkpoint = qa_checkpoint_of(tmp_path / "ckpt", qa_folder, head)
    meta = export(checkpoint, tmp_path / "onnx")
    assert list(meta["outputs"]) == ["start", "end", "scores", "null"]
    assert meta["inputs"]["passage"]["shape"] == ["batch", 2]
    assert_onnx_matches_torch(checkpoint, tmp_path / "onnx", squad_questions())


@pytest.mark.slow
def test_qa_span_head_is_refused_in_one_line_before_anything_is_written(qa_folder, tmp_path,
                                                                        capsys):
    checkpoint = qa_checkpoint_of(tmp_path / "ckpt", qa_folder, "span")
    assert export_main(["onnx", str(checkpoint), "--out", str(tmp_path / "onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(qa_span) is not exported to ONNX" in err, err
    assert "--qa-head boundary and sf export" in err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("onnx")]
    # and as int8: the same line, before anything is quantized
    assert export_main(["onnx", str(checkpoint), "--out", str(tmp_path / "onnx"),
                        "--quantize", "int8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(qa_span) is not exported to ONNX" in err, err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("onnx")]


@pytest.mark.slow
def test_output_folder_is_guarded_and_replaced_whole(mrpc_checkpoint, tmp_path, capsys):
    out = tmp_path / "onnx"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = ["onnx", str(mrpc_checkpoint), *map(str, BPE)]
    # A folder with files is refused unless --force; the checkpoint is never the output.
    assert export_main([*args, "--out", str(out)]) == 2
    assert "not empty; pass --force" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert export_main([*args, "--out", str(mrpc_checkpoint), "--force"]) == 2
    assert "span-export onnx" in capsys.readouterr().err
    assert mrpc_checkpoint.is_file()
    # --force replaces an earlier export only, never a folder of the user's.
    assert export_main([*args, "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert "not an earlier span-export onnx folder" in err and "notes.txt" in err, err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    (out / "notes.txt").unlink()
    (out / META).write_text('{"format": 1, "head_kind": "sentence"}\n')  # an earlier export's
    (out / MODEL).write_bytes(b"an earlier graph")
    # --force: the new folder whole, nothing of the old one, no partial folder beside it.
    assert export_main([*args, "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([META, MODEL])
    assert (out / MODEL).read_bytes() != b"an earlier graph"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["onnx"]
    meta = json.loads((out / META).read_text(encoding="utf-8"))
    assert meta["check"]["max_abs_diff"] <= TOLERANCE and len(meta["check"]["batches"]) == 4
