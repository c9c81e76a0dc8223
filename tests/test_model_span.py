"""roberta_span in-process: head shapes and parameters, spans reaching the head,
batch invariance for every span encoder, all parameters used, checkpoint heads,
a synthetic task only the spans can solve."""

import pytest
import torch

from conftest import TINY_ROBERTA, USER_DIR
from test_task_data import glue_folder

from span_plugin.modules import SPAN_ENCODERS


def build(data, *extra, num_classes=2):
    """(cfg, task, model) as fairseq-train builds them."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(data), "--user-dir", str(USER_DIR), "--task", "span_classification",
        "--criterion", "span_classification", "--arch", "roberta_span_base", *TINY_ROBERTA,
        "--num-classes", str(num_classes), "--init-token", "0", "--separator-token", "2",
        "--shorten-method", "truncate", *map(str, extra),
    ])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    return cfg, task, model


@pytest.fixture(scope="module")
def mrpc():
    return glue_folder("MRPC")


def test_span_head_parameters(mrpc):
    _, _, model = build(mrpc)
    head = model.classification_heads["sentence_classification_head"]
    h = 32
    assert sum(p.numel() for p in head.span_encoder.parameters()) == 6 * h * h + 2 * h
    assert head.dense.in_features == 2 * h  # [s; <s>]
    _, _, alone = build(mrpc, "--no-span-cls-concat", "--span-dim", 16)
    head = alone.classification_heads["sentence_classification_head"]
    assert head.dense.in_features == 16 and head.span_proj.in_features == 32


def test_spans_reach_the_head(mrpc):
    _, task, model = build(mrpc)
    task.load_dataset("valid")
    model.eval()
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(4)])
    net = batch["net_input"]
    assert net["spans"].dtype == torch.long and net["spans"].dim() == 3
    logits, _ = model(**net, classification_head_name="sentence_classification_head")
    assert logits.shape == (4, 2)
    other = dict(net, spans=torch.zeros_like(net["spans"]))
    logits2, _ = model(**other, classification_head_name="sentence_classification_head")
    assert not torch.allclose(logits, logits2)
    with pytest.raises(ValueError, match="reads spans"):
        model(net["src_tokens"], classification_head_name="sentence_classification_head")
    with pytest.raises(TypeError, match="LongTensor"):
        model(net["src_tokens"], spans=net["spans"].float(), classification_head_name="sentence_classification_head")


@pytest.mark.parametrize("kind", SPAN_ENCODERS)
@pytest.mark.parametrize("concat", [True, False])
def test_batch_invariance_and_all_parameters_used(mrpc, kind, concat):
    extra = ["--span-encoder", kind] + ([] if concat else ["--no-span-cls-concat"])
    _, task, model = build(mrpc, *extra)
    task.load_dataset("valid")
    model.eval()
    ds = task.dataset("valid")
    order = sorted(range(len(ds)), key=lambda i: ds.size(i))
    short, longest = order[0], order[-7:]
    head = "sentence_classification_head"
    with torch.no_grad():
        alone, _ = model(**ds.collater([ds[short]])["net_input"], classification_head_name=head)
        batch = ds.collater([ds[i] for i in longest] + [ds[short]])
        assert batch["net_input"]["src_tokens"].size(1) > ds.size(short)
        together, _ = model(**batch["net_input"], classification_head_name=head)
    assert torch.allclose(alone[0], together[-1], atol=1e-5), (alone, together[-1])

    # Every head parameter is used (DDP's unused-parameter check), concat or not.
    model.train()
    logits, _ = model(**batch["net_input"], classification_head_name=head)
    logits.sum().backward()
    unused = [n for n, p in model.classification_heads[head].named_parameters() if p.grad is None]
    assert not unused, unused


def test_example_without_spans_gets_zero_span_vector(mrpc):
    _, task, model = build(mrpc)
    model.eval()
    head = model.classification_heads["sentence_classification_head"]
    features = torch.randn(2, 7, 32)
    no_spans = torch.zeros(2, 1, 2, dtype=torch.long)
    out = head(features, no_spans)
    assert torch.isfinite(out).all()
    expected = head.out_proj(torch.tanh(head.dense(torch.cat([torch.zeros(2, 32), features[:, 0]], -1))))
    assert torch.allclose(out, expected, atol=1e-6)


def test_plain_roberta_head_in_checkpoint_is_replaced(mrpc):
    """A fine-tuned plain-RoBERTa head (same name, dense/out_proj only) is dropped and
    the span head keeps fresh weights; the encoder loads."""
    from fairseq.models.roberta import RobertaClassificationHead

    _, _, model = build(mrpc)
    state = {k: v.clone() for k, v in model.state_dict().items() if "classification_heads" not in k}
    plain = RobertaClassificationHead(32, 32, 2, "tanh", 0.0)
    for k, v in plain.state_dict().items():
        state["classification_heads.sentence_classification_head." + k] = v
    fresh = {k: v.clone() for k, v in model.classification_heads.state_dict().items()}
    model.load_state_dict(state, strict=True)
    for k, v in model.classification_heads.state_dict().items():
        assert torch.equal(v, fresh[k]), k


def test_task_refuses_a_model_without_spans(mrpc):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(mrpc), "--user-dir", str(USER_DIR), "--task", "span_classification",
        "--arch", "roberta_base", *TINY_ROBERTA, "--num-classes", "2", "--criterion", "sentence_prediction",
    ])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    with pytest.raises(ValueError, match="reads spans"):
        task.build_model(cfg.model)


# ----------------------------------------------------------------------------------
# Synthetic task: the label is whether the bigram "A B" is one span. A and B are
# adjacent in every example; only the segmentation differs, which the encoder never
# sees, so only a head that reads spans can do better than chance.


def _synthetic(n, seed, length=10):
    g = torch.Generator().manual_seed(seed)
    A, B = 2000, 2001
    tokens = torch.randint(1000, 1020, (n, length), generator=g)
    spans, labels = [], []
    for i in range(n):
        p = int(torch.randint(0, length - 1, (1,), generator=g))
        tokens[i, p], tokens[i, p + 1] = A, B
        label = int(torch.rand(1, generator=g) < 0.5)
        cuts = {c for c in range(1, length) if torch.rand(1, generator=g) < 0.5}
        if label:  # "A B" is exactly one span
            cuts = (cuts - {p + 1}) | {p, p + 2}
        else:  # A ends a span, B starts the next
            cuts.add(p + 1)
        cuts = sorted(cuts | {0, length})
        spans.append([(s + 1, e + 1) for s, e in zip(cuts[:-1], cuts[1:])])  # after <s>
        labels.append(label)
    width = max(len(s) for s in spans)
    span_t = torch.zeros(n, width, 2, dtype=torch.long)
    for i, s in enumerate(spans):
        span_t[i, : len(s)] = torch.tensor(s)
    src = torch.cat([torch.zeros(n, 1, dtype=torch.long), tokens, torch.full((n, 1), 2)], 1)
    return src, span_t, torch.tensor(labels)


def _train_head(model, steps=250):
    """Train the span head on frozen encoder features; return held-out accuracy."""
    model.eval()
    head = model.classification_heads["sentence_classification_head"]
    src, spans, y = _synthetic(768, seed=0)
    with torch.no_grad():
        feats, _ = model(src, features_only=True)
    opt = torch.optim.Adam(head.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    train_n = 512
    for _ in range(steps):
        idx = torch.randint(0, train_n, (32,), generator=g)
        loss = torch.nn.functional.cross_entropy(head(feats[idx], spans[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        pred = head(feats[train_n:], spans[train_n:]).argmax(-1)
    return (pred == y[train_n:]).float().mean().item()


def test_synthetic_span_task_is_learned(mrpc):
    torch.manual_seed(0)
    _, _, model = build(mrpc)
    acc = _train_head(model)
    assert acc > 0.9, acc


def test_synthetic_span_task_needs_segmentation(mrpc):
    """The no-segmentation control sees the same tokens in both classes: chance."""
    torch.manual_seed(0)
    _, _, model = build(mrpc, "--span-encoder", "cnn")
    acc = _train_head(model, steps=120)
    assert acc < 0.7, acc
