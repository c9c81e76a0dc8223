"""bfloat16 fine-tuning (``--bf16``) on the CPU, and the recipes' precision flags.

fairseq 0.12's parser turns ``--tpu`` on with ``--bf16``; the plugin turns it off again
where torch_xla is missing (``span_plugin.runtime.compat.bf16_off_tpu``), so the run is
fairseq's bf16 path: model and batches in bfloat16, ``FP16Optimizer`` with fp32 master
weights and no loss scaler. The recipes take ``BF16=1`` (or a precision flag of their
own) instead of the fp16 flags they add on GPUs; never both.
"""

import json
import re

import pytest
import torch

from conftest import GPT2_BPE, ROOT, TINY_ROBERTA, USER_DIR, run_cli, run_main
from test_task_data import glue_folder, mini_glue
from test_task_train import span_args, valid_stats

FP16_FLAGS = "--fp16 --fp16-init-scale 4 --threshold-loss-scale 1 --fp16-scale-window 128"


def train_losses(log):
    return [float(x) for x in re.findall(r"train_inner \|.* loss=([-\d.]+)", log)]


def scaled(log):
    """Whether fairseq logged a loss scale for an update (its fp16 scaler ran)."""
    return any("loss_scale=" in line for line in log.splitlines() if "train_inner" in line)


# -- in process: what the Trainer holds ------------------------------------------------


def bf16_span_trainer(*extra):
    """fairseq's Trainer of a tiny span model on real MRPC rows with --bf16 on the CPU,
    set up as fairseq-train sets it up (``extra``: more flags, last)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.logging import metrics
    from fairseq.trainer import Trainer

    from span_plugin.runtime.compat import bf16_off_tpu

    metrics.reset()
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(glue_folder("MRPC")), "--user-dir", str(USER_DIR), *TINY_ROBERTA,
        "--task", "span_classification", "--criterion", "span_classification",
        "--arch", "roberta_span_base", "--num-classes", "2", "--init-token", "0",
        "--separator-token", "2", "--shorten-method", "truncate", "--optimizer", "adam",
        "--lr", "1e-3", "--batch-size", "8", "--cpu", "--seed", "1", "--num-workers", "0",
        "--bf16", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    assert cfg.common.tpu  # fairseq's parser: --bf16 implies --tpu
    assert bf16_off_tpu(cfg)  # fairseq-train does this in call_main
    assert not (cfg.common.tpu or cfg.distributed_training.tpu or getattr(cfg.optimizer, "tpu", False))
    task = tasks.setup_task(cfg.task)
    return Trainer(cfg, task, task.build_model(cfg.model), task.build_criterion(cfg.criterion))


def test_bf16_trainer_has_a_bf16_model_and_no_loss_scaler():
    from fairseq.optim.fp16_optimizer import FP16Optimizer

    trainer = bf16_span_trainer()
    head = trainer.model.classification_heads["sentence_classification_head"]
    assert {p.dtype for p in trainer.model.parameters()} == {torch.bfloat16}
    assert head.span_encoder.within_span.conv.weight.dtype == torch.bfloat16
    assert isinstance(trainer.optimizer, FP16Optimizer) and trainer.optimizer.scaler is None
    before = head.out_proj.weight.detach().clone()
    batches = list(trainer.get_train_iterator(epoch=1).next_epoch_itr(shuffle=False))
    for sample in batches[:3]:
        log = trainer.train_step([sample])
        assert torch.isfinite(torch.tensor(float(log["loss"])))
        assert "loss_scale" not in log
    assert head.out_proj.weight.dtype == torch.bfloat16
    assert not torch.equal(head.out_proj.weight, before)  # the bf16 weights took the updates
    assert torch.isfinite(torch.tensor(float(trainer.valid_step(batches[-1])["loss"])))


# -- fairseq-train and the recipes ---------------------------------------------------


@pytest.mark.slow
def test_fairseq_train_bf16_on_cpu(tmp_path):
    log = run_main("fairseq-train", *span_args(glue_folder("MRPC"), tmp_path, "--bf16",
                                               "--span-encoder", "attn-attn", metric="f1")).stdout
    assert "--bf16 without torch_xla: bfloat16 on the CPU" in log
    losses = train_losses(log)
    assert len(losses) == 6 and torch.isfinite(torch.tensor(losses)).all(), log[-3000:]
    assert not scaled(log)
    stats = valid_stats(log)
    assert {"f1", "accuracy"} <= set(stats) and torch.isfinite(torch.tensor(float(stats["loss"])))


def precision_flags(args="", num_gpus=1, bf16=None):
    """HALF as recipes/lib.sh's half_precision sets it for the recipe arguments ``args``:
    ``(exit status, flags)``."""
    env = {"NUM_GPUS": str(num_gpus), "RECIPE_NAME": "test"}
    if bf16 is not None:
        env["BF16"] = str(bf16)
    script = f'source "{ROOT}/recipes/lib.sh"; half_precision {args}; echo "HALF=${{HALF[*]}}"'
    proc = run_cli("bash", "-c", script, env=env, check=False)
    found = re.findall(r"^HALF=(.*)$", proc.stdout, flags=re.M)
    return proc.returncode, (found[-1] if found else proc.stdout)


def test_recipes_take_bf16_instead_of_fp16():
    assert precision_flags() == (0, FP16_FLAGS)  # GPUs: fp16, as before
    assert precision_flags(num_gpus=0) == (0, "")  # CPU: fp32
    assert precision_flags(bf16=1) == (0, "--bf16")  # instead, never beside
    assert precision_flags(num_gpus=0, bf16=1) == (0, "--bf16")
    assert precision_flags("--max-update 5 --bf16") == (0, "")  # the arguments' own
    assert precision_flags("--memory-efficient-bf16", bf16=1) == (0, "")
    assert precision_flags("--amp") == (0, "")
    status, out = precision_flags("--fp16", bf16=1)
    assert status == 2 and "choose one precision" in out
    status, out = precision_flags(bf16="yes")
    assert status == 2 and "BF16=yes" in out


@pytest.mark.slow
def test_glue_recipe_bf16_end_to_end(tmp_path):
    """recipes/glue/MRPC.sh with BF16=1 on the CPU: trains in bf16 without loss scaling,
    writes the dev result (from fairseq-validate: bf16 validation is not fp32's) and the
    dev predictions."""
    env = {"GLUE_DIR": str(mini_glue()), "BPE_DIR": str(GPT2_BPE), "WORKERS": "1",
           "FROM_SCRATCH": "1", "BF16": "1", "TEST_PREDICTIONS": "0"}
    tiny = [a for a in TINY_ROBERTA if a not in ("--max-positions", "128")]
    log = run_cli("bash", ROOT / "recipes" / "glue" / "MRPC.sh", "--cpu", "--max-update", "2",
                  "--log-interval", "1", *tiny, cwd=tmp_path, env=env).stdout
    train_log = (tmp_path / "runs" / "MRPC" / "train.log").read_text()
    assert "--bf16 without torch_xla" in train_log and "'bf16': True" in train_log
    assert "'fp16': True" not in train_log and not scaled(train_log)
    losses = train_losses(train_log)
    assert losses and torch.isfinite(torch.tensor(losses)).all(), log[-3000:]
    results = json.loads((tmp_path / "runs" / "MRPC" / "results.json").read_text())
    assert "f1" in json.dumps(results)
    assert (tmp_path / "runs" / "MRPC" / "dev_predictions" / "MRPC.tsv").is_file()
