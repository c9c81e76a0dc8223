"""The one-read update (span_plugin/runtime/update_reads.py) changes when the host waits
for the device, and nothing else.

fairseq's own Trainer, set up as fairseq-train sets it up, on real MRPC rows, trains 50
updates with the plugin's update and 50 with fairseq's (``SPAN_PLUGIN_FAIRSEQ_UPDATE=1``)
from the same weights: the losses, the logged loss scales, the update counts and every
parameter must be equal, also when gradients are made non-finite on chosen backward
passes (skipped and retried the same way, the scale lowered the same way, training
stopped at the same pass with the same exception). ``--amp`` runs with an enabled CPU
GradScaler in both, so its device path is the one a GPU takes. The reads themselves are
counted with benchmarks/host_work.py's counter.
"""

import math
import sys

import pytest
import torch

from conftest import ROOT, TINY_ROBERTA, USER_DIR
from test_task_data import glue_folder

sys.path.insert(0, str(ROOT / "benchmarks"))

from host_work import ReadCounter  # noqa: E402

from span_plugin.runtime import update_reads  # noqa: E402

PRECISIONS = {
    "fp32": [],
    "amp": ["--amp"],
    # fairseq flattens fp16's master weights on CUDA only
    "fp16": ["--fp16", "--fp16-init-scale", "4", "--fp16-scale-window", "6", "--fp16-no-flatten-grads"],
}
UPDATES = 50
FAULT_UPDATES = 24  # the runs with non-finite gradients


def build_trainer(save_dir, precision, *extra):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.logging import metrics
    from fairseq.trainer import Trainer

    metrics.reset()
    save_dir.mkdir(parents=True, exist_ok=True)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(glue_folder("MRPC")), "--user-dir", str(USER_DIR), *TINY_ROBERTA,
        "--task", "span_classification", "--criterion", "span_classification",
        "--arch", "roberta_span_base", "--num-classes", "2", "--init-token", "0",
        "--separator-token", "2", "--shorten-method", "truncate", "--optimizer", "torch_adamw",
        "--lr", "1e-3", "--clip-norm", "0.5", "--batch-size", "8", "--cpu", "--seed", "1",
        "--num-workers", "0",
        "--save-dir", str(save_dir), *PRECISIONS[precision], *extra])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(1)
    trainer = Trainer(cfg, task, task.build_model(cfg.model), task.build_criterion(cfg.criterion))
    if precision == "amp":  # fairseq's torch.cuda.amp.GradScaler is off on the CPU
        trainer.optimizer._grad_scaler = torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=5)
    return trainer


def train(trainer, updates, poisoned):
    """``updates`` calls of ``train_step`` over the split's batches in order; gradients
    become inf on the backward passes numbered in ``poisoned`` (from 1). Returns
    (per call: (num_updates, loss, loss scale) or None, the exception that stopped it)."""
    from fairseq.logging import metrics

    batches = list(trainer.get_train_iterator(epoch=1).next_epoch_itr(shuffle=False))
    backward = [0]

    def poison(grad):
        backward[0] += 1
        return grad * math.inf if backward[0] in poisoned else grad

    head = trainer.model.classification_heads["sentence_classification_head"]
    head.out_proj.weight.register_hook(poison)
    trace = []
    try:
        for i in range(updates):
            log = trainer.train_step([batches[i % len(batches)]])
            scale = metrics.get_meter("train", "loss_scale")  # what fairseq logged last
            trace.append(None if log is None else
                         (trainer.get_num_updates(), float(log["loss"]), scale and float(scale.val)))
    except FloatingPointError as err:
        return trace, f"{type(err).__name__} at backward pass {backward[0]}"
    return trace, None


def paired(tmp_path, monkeypatch, precision, *extra, poisoned=()):
    """The same training with fairseq's update and with the plugin's: (trace, stop,
    parameters) of each."""
    runs = {}
    for name, opt_out in (("fairseq", "1"), ("plugin", "")):
        monkeypatch.setenv(update_reads.OPT_OUT, opt_out)
        trainer = build_trainer(tmp_path / name, precision, *extra)
        trace, stop = train(trainer, FAULT_UPDATES if poisoned else UPDATES, poisoned)
        runs[name] = trace, stop, {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return runs["fairseq"], runs["plugin"]


def assert_same(fairseq, plugin):
    (trace_f, stop_f, params_f), (trace_p, stop_p, params_p) = fairseq, plugin
    assert trace_p == trace_f
    assert stop_p == stop_f
    assert params_p.keys() == params_f.keys()
    changed = [k for k in params_f if not torch.equal(params_f[k], params_p[k])]
    assert not changed, f"parameters differ: {changed[:5]}"


# fp16 (slow on the CPU) takes its normal updates in the overflow test below
@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_same_updates_over_50_steps(tmp_path, monkeypatch, precision):
    fairseq, plugin = paired(tmp_path, monkeypatch, precision)
    assert_same(fairseq, plugin)
    trace = fairseq[0]
    assert len(trace) == UPDATES and trace[-1][0] == UPDATES  # none skipped
    if precision == "amp":  # the scale grew every 5 updates, in both
        assert [s for _, _, s in trace[:6]] == [4.0] * 4 + [8.0] * 2


def test_amp_overflow_skips_retries_and_lowers_the_scale_the_same_way(tmp_path, monkeypatch):
    # pass 7 overflows once (retried), 12-14 three times (retried twice, then skipped)
    fairseq, plugin = paired(tmp_path, monkeypatch, "amp", poisoned={7, 12, 13, 14})
    assert_same(fairseq, plugin)
    trace = fairseq[0]
    assert None in trace  # the skipped batch
    assert trace[-1][0] < FAULT_UPDATES
    scales = [entry[2] for entry in trace if entry]
    assert min(scales) < scales[0]  # lowered, then grown again


def test_amp_stops_at_the_minimum_scale_where_fairseq_stops(tmp_path, monkeypatch):
    fairseq, plugin = paired(tmp_path, monkeypatch, "amp", "--min-loss-scale", "0.5",
                             poisoned=set(range(5, 30)))
    assert_same(fairseq, plugin)
    assert fairseq[1].startswith("FloatingPointError")


def test_fp16_overflow_skips_and_stops_the_same_way(tmp_path, monkeypatch):
    # fairseq's trainer puts a zero norm on CUDA after an fp16 overflow: here it stays put
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *args, **kwargs: self)
    fairseq, plugin = paired(tmp_path, monkeypatch, "fp16", "--min-loss-scale", "0.25",
                             poisoned={6, 11, 12, *range(16, 30)})
    assert_same(fairseq, plugin)
    assert None in fairseq[0] and fairseq[1].startswith("FloatingPointError")


def test_fp32_non_finite_gradients_stop_at_the_same_pass(tmp_path, monkeypatch):
    fairseq, plugin = paired(tmp_path, monkeypatch, "fp32", poisoned={9})
    assert_same(fairseq, plugin)
    # the trainer re-ran the batch under fairseq's NanDetector (pass 10), then stopped
    assert fairseq[1] == "FloatingPointError at backward pass 10"
    assert (tmp_path / "plugin" / "crash.pt").is_file()


@pytest.mark.parametrize("precision", ["amp", "fp16"])
def test_one_read_per_update_and_none_when_opted_out(tmp_path, monkeypatch, precision):
    reads = {}
    for name, opt_out in (("fairseq", "1"), ("plugin", "")):
        monkeypatch.setenv(update_reads.OPT_OUT, opt_out)
        trainer = build_trainer(tmp_path / name, precision)
        batches = list(trainer.get_train_iterator(epoch=1).next_epoch_itr(shuffle=False))
        trainer.train_step([batches[0]])  # lazy set-up
        counter = ReadCounter()
        with counter:
            for counter.update, sample in enumerate(batches[1:6], start=1):
                trainer.train_step([sample])
        reads[name] = [counter.reads[u] for u in range(1, 6)]
    assert reads["plugin"] == [1] * 5
    # fairseq: the encoder's has_pads (a layer each), the norm's tests, the stats
    assert min(reads["fairseq"]) >= 2 + 3


@pytest.mark.parametrize("pad", [False, True])
def test_encoder_forward_with_its_mask_equals_fairseqs(pad):
    """In training the encoder always hands its layers the padding mask; fairseq hands
    them none when the batch has no padding: the same outputs, dropout included."""
    import argparse

    from fairseq.data import Dictionary
    from fairseq.models.roberta.model import RobertaEncoder, base_architecture
    from fairseq.models.transformer.transformer_encoder import TransformerEncoderBase

    from span_plugin.runtime.padded_encoder import forward_with_padding_mask

    vocab = Dictionary()
    for i in range(100):
        vocab.add_symbol(str(i))
    args = argparse.Namespace(encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
                              encoder_attention_heads=2, max_positions=64)
    base_architecture(args)
    torch.manual_seed(0)
    encoder = RobertaEncoder(args, vocab).sentence_encoder.train()
    tokens = torch.randint(4, 100, (3, 20))
    if pad:
        tokens[0, 15:] = vocab.pad()
    fairseqs = TransformerEncoderBase.forward_scriptable.__wrapped__
    outputs = []
    for forward in (fairseqs, forward_with_padding_mask):
        torch.manual_seed(5)
        outputs.append(forward(encoder, tokens)["encoder_out"][0])
    assert torch.equal(*outputs)
