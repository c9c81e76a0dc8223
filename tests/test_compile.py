"""The compiled fine-tuning path (``--compile``) against the eager one.

Built through fairseq's own setup (task, model, criterion, Trainer, as fairseq-train) on
task folders made from real rows (GLUE MRPC, CoNLL-2003, SQuAD), tiny RoBERTa, fp32 on
the CPU, dropout 0. The ``aot_eager`` backend runs the graphs dynamo and AOTAutograd
capture without generating code (inductor takes minutes per graph on this CPU); one
small test runs inductor on a span head alone.

1. Equivalence: a compiled and an eager trainer with the same weights take the same
   training steps (loss and every gradient agree to 1e-4) and validation steps on real
   batches, for the span, plain, tagging and QA heads; each compiled module is one graph.
2. Recompiles: over one epoch (train + validation) with ``--length-multiple``, dynamo
   builds one graph per compiled module and (batch size, padded length) seen, per mode.
3. fairseq-train --compile end to end; its checkpoint loads into the hub, eagerly.
"""

import copy
import json
import re

import pytest
import torch
from torch._dynamo.utils import counters

from conftest import DATA, GPT2_BPE, TINY_ROBERTA, USER_DIR, run_cli
from test_task_data import glue_folder, spec_args
from test_task_train import span_args, valid_stats

from span_plugin.runtime.compat import bf16_off_tpu

# fp32 on the CPU with nothing random: what is left is the order of floating-point sums.
# One layer: each graph traces in about half the time of two.
DETERMINISTIC = [
    "--encoder-layers", "1",
    "--cpu", "--seed", "1", "--num-workers", "0", "--batch-size", "8",
    "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0",
    "--pooler-dropout", "0", "--span-dropout", "0", "--head-dropout", "0",
    # SGD: a gradient that differs in its last bits moves a weight by as little
    # (Adam's first step moves every weight by lr, whatever the gradient's size).
    "--optimizer", "sgd", "--lr", "0.1",
]
SENTENCE = ["--task", "span_classification", "--criterion", "span_classification",
            "--arch", "roberta_span_base", "--num-classes", "2", "--init-token", "0",
            "--separator-token", "2", "--shorten-method", "truncate",
            "--max-spans", "64", "--max-span-tokens", "16"]
AOT_EAGER = ["--compile", "--compile-backend", "aot_eager"]
TOLERANCE = dict(rtol=1e-4, atol=1e-4)


# -- real task folders -------------------------------------------------------------


@pytest.fixture(scope="module")
def conll_folder(tmp_path_factory):
    """span-preprocess conll of the first 400 lines of CoNLL-2003 train (train and valid)."""
    from span_plugin.preprocess.folders.conll import prepare_conll
    from span_plugin.preprocess.folders.options import FolderOptions
    from span_plugin.preprocess.segmentation.encoding import EncoderSpec

    root = tmp_path_factory.mktemp("compile_conll")
    lines = (DATA / "conll2003" / "train.txt").read_text(encoding="utf-8").splitlines(True)[:400]
    (root / "train.txt").write_text("".join(lines), encoding="utf-8")
    spec = EncoderSpec(bpe="gpt2", encoder_json=str(GPT2_BPE / "encoder.json"),
                       vocab_bpe=str(GPT2_BPE / "vocab.bpe"))
    files = {"train": str(root / "train.txt"), "valid": str(root / "train.txt")}
    prepare_conll(root / "bin", files, FolderOptions(spec, str(GPT2_BPE / "dict.txt")))
    return root / "bin"


@pytest.fixture(scope="module")
def qa_folder(tmp_path_factory):
    """span-preprocess qa (GPT-2 BPE, windows of 96 tokens) of the first two paragraphs
    of SQuAD 1.1 dev, as train and valid."""
    root = tmp_path_factory.mktemp("compile_qa")
    data = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    data["data"] = data["data"][:1]
    data["data"][0]["paragraphs"] = data["data"][0]["paragraphs"][:2]
    (root / "squad.json").write_text(json.dumps(data), encoding="utf-8")
    run_cli("span-preprocess", "qa", "--out", root / "bin", "--train", root / "squad.json",
            "--valid", root / "squad.json", "--bpe", "gpt2", *spec_args(),
            "--max-positions", "96", "--doc-stride", "32")
    return root / "bin"


# -- fairseq's own setup -----------------------------------------------------------


def build_trainer(data, *args):
    """Task, model, criterion and Trainer as fairseq-train builds them."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    parsed = options.parse_args_and_arch(
        options.get_training_parser(),
        [str(data), "--user-dir", str(USER_DIR), *TINY_ROBERTA, *DETERMINISTIC, *map(str, args)])
    cfg = convert_namespace_to_omegaconf(parsed)
    bf16_off_tpu(cfg)  # as fairseq-train's call_main does with the plugin loaded
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    return Trainer(cfg, task, model, task.build_criterion(cfg.criterion))


def fresh_dynamo():
    """No compiled code, graph count or meter left by an earlier test."""
    from fairseq.logging import metrics

    torch._dynamo.reset()  # compiled code is cached per code object, across tests
    counters.clear()
    metrics.reset()  # one process, several criteria: their meters of one name collide


def twin_trainers(data, *args):
    """An eager and a compiled trainer (aot_eager) of the same model with the same
    weights: the compiled model takes the eager one's state dict, key for key."""
    fresh_dynamo()
    eager = build_trainer(data, *args)
    compiled = build_trainer(data, *args, *AOT_EAGER)
    state = eager.model.state_dict()
    assert list(compiled.model.state_dict()) == list(state)  # compiled in place: same names
    compiled.model.load_state_dict(state)
    return eager, compiled


def epoch_batches(trainer, split="train"):
    """The batches of one epoch, as fairseq-train iterates them."""
    if split == "train":
        itr = trainer.get_train_iterator(epoch=1).next_epoch_itr(shuffle=True)
    else:
        trainer.task.load_dataset(split)
        itr = trainer.get_valid_iterator(split).next_epoch_itr(shuffle=False)
    return list(itr)


def gradients(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def padded_shapes(batches):
    """The distinct ``(batch size, padded length)`` of the batches' ``src_tokens``."""
    return {tuple(b["net_input"]["src_tokens"].shape) for b in batches}


def assert_steps_agree(eager, compiled, train, valid):
    """Training steps (loss, every gradient, hence the weights of the next step) on the
    ``train`` batches and validation steps (every logged statistic) on the ``valid``
    batches agree between the two trainers; the compiled model built one graph per
    compiled module (the encoder, the head), (batch size, length) and mode (training,
    evaluation), and no graph break."""
    for sample in train:
        want = eager.train_step([copy.deepcopy(sample)])
        got = compiled.train_step([copy.deepcopy(sample)])
        torch.testing.assert_close(got["loss"], want["loss"], **TOLERANCE)
        want_grads, got_grads = gradients(eager.model), gradients(compiled.model)
        assert set(got_grads) == set(want_grads) and want_grads
        for name, grad in want_grads.items():
            torch.testing.assert_close(got_grads[name], grad, **TOLERANCE, msg=name)
    for sample in valid:
        want = eager.valid_step(copy.deepcopy(sample))
        got = compiled.valid_step(copy.deepcopy(sample))
        assert set(got) == set(want)
        for key, value in want.items():
            torch.testing.assert_close(torch.as_tensor(got[key]), torch.as_tensor(value),
                                       **TOLERANCE, msg=key)
    assert not counters["graph_break"], dict(counters["graph_break"])
    compiled_modules = 2
    shapes = len(padded_shapes(train)) + len(padded_shapes(valid))
    assert counters["stats"]["unique_graphs"] == compiled_modules * shapes


def assert_first_steps_agree(eager, compiled, train_batches=2):
    """:func:`assert_steps_agree` on the first batches of an epoch (the last one validates)."""
    batches = epoch_batches(compiled)
    assert len(batches) > train_batches
    assert_steps_agree(eager, compiled, batches[:train_batches], batches[-1:])


# -- 1. equivalence, 2. one graph per shape -----------------------------------------


def test_span_head_epoch_compiled_equals_eager_one_graph_per_padded_shape():
    """A whole epoch of the MRPC folder and its validation: every step agrees, and the
    encoder and the span head are compiled once per (batch size, length) and mode.
    Spans are padded to the token axis, so their count adds no shape."""
    multiple = 16  # MRPC's first rows have 28-86 tokens: batches of 80 and 96
    eager, compiled = twin_trainers(glue_folder("MRPC"), *SENTENCE, "--batch-size", "16",
                                    "--length-multiple", multiple)
    train, valid = epoch_batches(compiled), epoch_batches(compiled, "valid")
    lengths = {t for _, t in padded_shapes(train + valid)}
    assert all(t % multiple == 0 for t in lengths), lengths
    assert_steps_agree(eager, compiled, train, valid)
    # Unpadded, the batches would have many more lengths, and their spans as many counts.
    assert len({int(b["net_input"]["src_lengths"].max()) for b in train + valid}) > 2 * len(lengths)
    assert len({b["net_input"]["spans"].size(1) for b in train}) > 2 * len(padded_shapes(train))


def test_plain_head_compiled_equals_eager():
    eager, compiled = twin_trainers(glue_folder("MRPC"), *SENTENCE, "--sentence-head", "plain",
                                    "--length-multiple", "16")
    assert_first_steps_agree(eager, compiled)


def test_tagging_head_compiled_equals_eager(conll_folder):
    eager, compiled = twin_trainers(conll_folder, "--task", "span_tagging", "--criterion",
                                    "span_tagging", "--arch", "roberta_tagging",
                                    "--tagging-head", "sf", "--batch-size", "4",
                                    "--length-multiple", "16")
    assert_first_steps_agree(eager, compiled)


def test_qa_boundary_head_compiled_equals_eager(qa_folder):
    eager, compiled = twin_trainers(qa_folder, "--task", "span_qa", "--criterion", "span_qa",
                                    "--arch", "roberta_qa", "--qa-head", "boundary",
                                    "--max-positions", "128", "--max-answer-tokens", "12",
                                    "--batch-size", "2", "--length-multiple", "32")
    assert_first_steps_agree(eager, compiled)


@pytest.mark.slow
def test_compiled_bf16_steps_match_eager_bf16():
    """--compile with --bf16 (the Trainer casts the compiled modules' parameters after
    compiling): bf16 graphs, one per shape and mode, the same losses as eager bf16."""
    eager, compiled = twin_trainers(glue_folder("MRPC"), *SENTENCE, "--bf16",
                                    "--length-multiple", "32")
    head = compiled.model.classification_heads["sentence_classification_head"]
    assert head._compiled_call_impl is not None and head.out_proj.weight.dtype == torch.bfloat16
    batches = epoch_batches(compiled)
    for sample in batches[:2]:
        want = eager.train_step([copy.deepcopy(sample)])["loss"]
        got = compiled.train_step([copy.deepcopy(sample)])["loss"]
        assert torch.isfinite(torch.tensor(got)) and got == pytest.approx(want, rel=1e-2)
    got = compiled.valid_step(copy.deepcopy(batches[-1]))["loss"]
    assert got == pytest.approx(eager.valid_step(copy.deepcopy(batches[-1]))["loss"], rel=1e-2)
    shapes = len(padded_shapes(batches[:2])) + len(padded_shapes(batches[-1:]))
    assert counters["stats"]["unique_graphs"] == 2 * shapes and not counters["graph_break"]


# -- inductor, on the span head alone -------------------------------------------------


@pytest.mark.slow
def test_span_head_under_inductor_equals_eager():
    """The paper's head (cnn-cnn span encoder) compiled by inductor, the code a GPU
    run generates, on spans as the tasks pad them (to the token axis): same logits and
    same gradients for the features and every parameter. (Inductor's unfold_backward
    dropped the input gradient of SegmentConv1d: it now stacks shifted slices when
    compiled.)"""
    from span_plugin.models.compiled import pad_spans_to_length
    from span_plugin.modules.sentence_heads import SpanClassificationHead, SpanHeadOptions

    fresh_dynamo()
    torch.manual_seed(0)
    head = SpanClassificationHead(16, 16, 16, 2, SpanHeadOptions(span_encoder="cnn-cnn"))
    batch, length = 4, 24
    spans = torch.tensor([[[1, 3], [3, 4], [4, 9], [11, 17]], [[1, 2], [2, 6], [8, 10], [0, 0]],
                          [[1, 12], [0, 0], [0, 0], [0, 0]], [[0, 0]] * 4])
    spans = pad_spans_to_length(spans, length)
    features = torch.randn(batch, length, 16)
    compiled = copy.deepcopy(head)
    compiled.compile(backend="inductor", dynamic=False)
    outputs, grads = [], []
    for module in (head, compiled):
        leaf = features.clone().requires_grad_(True)
        logits = module(leaf, spans)
        (logits * torch.arange(1.0, 3.0)).sum().backward()
        outputs.append(logits.detach())
        grads.append({"features": leaf.grad, **{n: p.grad for n, p in module.named_parameters()}})
    torch.testing.assert_close(outputs[1], outputs[0], **TOLERANCE)
    assert set(grads[1]) == set(grads[0])
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, **TOLERANCE, msg=name)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]


# -- 3. fairseq-train --compile ---------------------------------------------------------


def compiled_modules(model):
    """Names of the submodules ``Module.compile`` has compiled."""
    return [name for name, m in model.named_modules() if m._compiled_call_impl is not None]


@pytest.mark.slow
def test_fairseq_train_compiled_and_hub_loads_it_eagerly(tmp_path):
    from span_plugin.hub import SpanHubInterface

    log = run_cli("fairseq-train", *span_args(glue_folder("MRPC"), tmp_path, *AOT_EAGER,
                                              "--length-multiple", "32", metric="f1")).stdout
    losses = [float(x) for x in re.findall(r"train_inner \|.* loss=([-\d.]+)", log)]
    assert len(losses) == 6 and torch.isfinite(torch.tensor(losses)).all(), log[-3000:]
    stats = valid_stats(log)
    assert {"f1", "accuracy", "best_f1"} <= set(stats) and torch.isfinite(torch.tensor(float(stats["loss"])))
    assert "torch.compile of the encoder and the heads (backend aot_eager" in log
    state = torch.load(tmp_path / "checkpoint_best.pt", map_location="cpu", weights_only=True)
    assert state["cfg"]["model"].compile and not any("_orig_mod" in k for k in state["model"])

    hub = SpanHubInterface.from_pretrained(tmp_path / "checkpoint_best.pt")
    assert not compiled_modules(hub.model)  # from_checkpoint: eager
    weights = hub.model.state_dict()
    assert all(torch.equal(weights[k], v) for k, v in state["model"].items())
    out = hub.predict([("The cat sat on the mat.", "A cat was sitting on the mat.")])
    assert out[0]["label"] in {"0", "1"}
