"""One way to choose a head (models/heads.py): the registry of head kinds, the options
that choose them, and heads that declare their inputs.

The toy head below takes the places a new head takes (docs/ARCHITECTURE.md, "Add a
head"): its torch module (modules/), its builder declaring a new input (models/heads.py)
and the task that names it and builds the input's dataset beside the spans (tasks/); the
loss is an existing one. Nothing else (the model, the data pipeline, the hub) learns the
input's name: it reaches the head through the task's split and fairseq's collation.
"""

import pytest
import torch
import torch.nn as nn
from fairseq.data import BaseWrapperDataset, RightPadDataset
from fairseq.models.roberta import RobertaClassificationHead

from test_model_span import build
from test_task_data import glue_folder

from span_plugin.models.heads import (
    HEAD_KINDS,
    chosen_kind,
    head_choices,
    head_inputs,
    register_head_kind,
)
from span_plugin.tasks.span_classification import SpanClassificationTask

HEAD = "sentence_classification_head"


class MarkedTokensHead(nn.Module):
    """(modules/) The mean feature of the marked tokens -> logits.

    ``forward(features [B, T, D], marks [B, T] 0/1)`` -> logits ``[B, C]``."""

    def __init__(self, input_dim, num_classes):
        super().__init__()
        self.out_proj = nn.Linear(input_dim, num_classes)

    def forward(self, features, marks, **unused):
        weights = marks.to(features.dtype).unsqueeze(-1)  # [B, T, 1]
        pooled = (features * weights).sum(1) / weights.sum(1).clamp(min=1)  # [B, D]
        return self.out_proj(pooled)


@pytest.fixture
def marks_kind():
    """(models/heads.py) The builder, declaring ``marks``, an input no head had."""
    @register_head_kind("toy_marks", inputs=("marks",))
    def marked_tokens_head(args, num_classes):
        return MarkedTokensHead(args.encoder_embed_dim, num_classes)

    yield "toy_marks"
    del HEAD_KINDS["toy_marks"]


class SpanStarts(BaseWrapperDataset):
    """Item i: ``marks [T_i]``, 1 at the first token of each of its laid-out spans."""

    def __init__(self, tokens, spans):
        super().__init__(tokens)
        self.spans = spans

    def __getitem__(self, index):
        marks = torch.zeros_like(self.dataset[index])
        marks[self.spans[index][:, 0]] = 1
        return marks


class MarkingTask(SpanClassificationTask):
    """(tasks/) Names the head and gives its batches ``marks``, padded as the tokens."""

    def side_inputs(self, layout, spans):
        marks = RightPadDataset(SpanStarts(layout.tokens, spans), pad_idx=0)
        return dict(super().side_inputs(layout, spans), marks=marks)

    def chosen_head(self, model_args):
        return "toy_marks", {"num_classes": self.cfg.num_classes}


@pytest.fixture(scope="module")
def mrpc():
    return glue_folder("MRPC")


def test_a_head_with_a_new_input_trains_through_the_model(mrpc, marks_kind):
    cfg, _, _ = build(mrpc)
    task = MarkingTask.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    head = model.classification_heads[HEAD]
    assert isinstance(head, MarkedTokensHead) and head_inputs(head) == ("marks",)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(4)])
    # The split gave every example its marks, collated to the tokens' shape.
    net = batch["net_input"]
    assert net["marks"].shape == net["src_tokens"].shape
    for row, item in enumerate(ds[i] for i in range(4)):
        starts = item["net_input.spans"][:, 0]
        assert net["marks"][row].nonzero().flatten().tolist() == sorted(set(starts.tolist()))

    # One training step with the task's own criterion: the head reads marks.
    criterion = task.build_criterion(cfg.criterion)
    model.train()
    loss, sample_size, _ = criterion(model, batch)
    loss.backward()
    assert sample_size == 4 and torch.isfinite(loss)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters())

    model.eval()
    net = batch["net_input"]
    with torch.no_grad():
        logits, _ = model(**net, classification_head_name=HEAD)
        other, _ = model(**dict(net, marks=torch.ones_like(net["marks"])),
                         classification_head_name=HEAD)
    assert logits.shape == (4, 2) and not torch.allclose(logits, other)

    # A batch without the input: the error names the head and the input.
    without = {k: v for k, v in net.items() if k != "marks"}
    with pytest.raises(ValueError, match=f"head '{HEAD}' reads marks, which this batch lacks"):
        model(**without, classification_head_name=HEAD)


def test_options_choose_the_kinds_they_always_chose():
    assert head_choices("--sentence-head") == ["span", "plain"]
    assert head_choices("--tagging-head") == ["token", "sf"]
    assert head_choices("--qa-head") == ["boundary", "sf", "span"]
    assert [chosen_kind("--qa-head", v) for v in head_choices("--qa-head")] == [
        "qa_boundary", "qa_boundary_sf", "qa_span"]
    assert chosen_kind("--sentence-head", "span") == "sentence"
    with pytest.raises(ValueError, match=r"unknown --qa-head 'spam': expected one of \['boundary'"):
        chosen_kind("--qa-head", "spam")


def test_registry_refuses_a_kind_or_choice_twice(marks_kind):
    with pytest.raises(ValueError, match="'toy_marks' is registered twice"):
        register_head_kind("toy_marks")(lambda args: None)
    with pytest.raises(ValueError, match="--qa-head sf already chooses head kind 'qa_boundary_sf'"):
        register_head_kind("toy_qa", choice=("--qa-head", "sf"))(lambda args: None)
    assert "toy_qa" not in HEAD_KINDS
    with pytest.raises(TypeError, match="inputs is a tuple of names"):
        register_head_kind("toy_str", inputs="spans")


def test_declared_inputs():
    """What the model takes from net_input and the hub's reads_spans read; fairseq's
    own head (a plain roberta checkpoint) reads none."""
    declared = {kind: entry.inputs for kind, entry in HEAD_KINDS.items()}
    assert declared["sentence"] == ("spans",) and declared["plain"] == ()
    assert declared["qa_boundary_sf"] == ("passage", "spans")
    assert declared["span"] == ("words",) and declared["span_pair"] == ("phrases",)
    assert head_inputs(RobertaClassificationHead(8, 8, 2, "tanh", 0.0)) == ()
