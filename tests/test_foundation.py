"""The stack works through fairseq's real entry points with the plugin loaded:
train, resume, restore with fresh heads, hydra, and safe checkpoint loading."""

import argparse
import logging
import os
import pathlib
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

from conftest import TINY_ROBERTA, USER_DIR, num_updates, run_cli, run_main, train_args

@pytest.mark.smoke
def test_plugin_imports_and_allows_fairseq_checkpoint_types():
    import span_plugin  # noqa: F401  (applies the compat fixes)

    assert argparse.Namespace in torch.serialization.get_safe_globals()



def test_register_before_fairseq_leaves_the_root_logger_at_info():
    """A script that registers the plugin before importing fairseq itself (the
    experiments, a notebook) does not get every library's DEBUG lines: fairseq's wav2vec2
    module sets the root logger to DEBUG when the plugin's imports load it."""
    code = ("import logging, span_plugin; span_plugin.register(); "
            "import fairseq.models; logging.getLogger('matplotlib').debug('x'); "
            "print(logging.getLogger().getEffectiveLevel())")
    env = {k: v for k, v in os.environ.items() if k != "LOGLEVEL"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [str(logging.INFO)] and "DEBUG" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("numpy_module", ["numpy.core", "numpy._core"])
def test_numpy_scalars_load_whichever_numpy_pickled_them(numpy_module, tmp_path):
    """numpy 1 pickles a scalar's reconstructor as numpy.core.multiarray.scalar, numpy 2
    as numpy._core.multiarray.scalar: a checkpoint holding one loads under either numpy."""
    from span_plugin.convert.safe_load import load_checkpoint

    path = tmp_path / "checkpoint.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "extra_state": {"best": np.float64(0.5)}}, path)
    with zipfile.ZipFile(path) as z:
        members = {name: z.read(name) for name in z.namelist()}
    pickled = next(name for name in members if name.endswith("/data.pkl"))
    written = re.search(rb"numpy\.(_?core)\.multiarray\nscalar", members[pickled])
    assert written, members[pickled]  # protocol 2 names the global in plain text
    members[pickled] = members[pickled].replace(
        written.group(0), f"{numpy_module}.multiarray\nscalar".encode())
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    assert load_checkpoint(path)["extra_state"] == {"best": 0.5}


def test_last_batch_is_kept():
    """fairseq drops an epoch's last batch when its size is not a multiple of
    --required-batch-size-multiple (8 by default), so validation skipped examples."""
    from fairseq.data import data_utils

    indices = np.random.RandomState(0).permutation(71)
    for limits in ({"max_sentences": 32}, {"max_tokens": 1000}, {"max_sentences": 8}):
        batches = data_utils.batch_by_size(
            indices, num_tokens_fn=lambda i: 40, num_tokens_vec=np.full(71, 40),
            required_batch_size_multiple=8, **limits,
        )
        assert np.array_equal(np.concatenate(batches), indices), limits
        assert all(len(b) % 8 == 0 for b in batches[:-1])


@pytest.mark.slow
def test_train_resume_and_restore(sst2_bin, tmp_path):
    save = tmp_path / "run"
    log = run_main("fairseq-train", *train_args(sst2_bin, save)).stdout
    assert (save / "checkpoint_last.pt").is_file()
    assert max(num_updates(log)) == 4

    # Resume: fairseq finds checkpoint_last.pt in save_dir and goes on from update 4.
    log = run_main("fairseq-train", *train_args(sst2_bin, save, max_update=8)).stdout
    assert re.search(r"Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ 4 updates\)", log), log
    assert max(num_updates(log)) == 8

    # A new run restored from it, with a 3-class head: the old head is dropped and a
    # fresh one trained, the encoder weights come from the checkpoint.
    new = tmp_path / "restored"
    log = run_main(
        "fairseq-train",
        *train_args(
            sst2_bin, new, "--restore-file", save / "checkpoint_last.pt",
            "--reset-optimizer", "--reset-dataloader", "--reset-meters",
            num_classes=3, max_update=2,
        ),
    ).stdout
    assert "deleting classification head" in log, log
    assert max(num_updates(log)) == 2
    old = torch.load(save / "checkpoint_last.pt")["model"]
    fresh = torch.load(new / "checkpoint_last.pt")["model"]
    assert fresh["classification_heads.sentence_classification_head.out_proj.weight"].shape[0] == 3
    key = "encoder.sentence_encoder.embed_tokens.weight"
    # Two updates at lr 1e-3 move weights a little; a random init would be far off.
    assert torch.allclose(old[key], fresh[key], atol=0.01)


@pytest.mark.slow
def test_restore_pretrained_masked_lm(sst2_bin, tmp_path):
    """A RoBERTa pretrained with masked_lm (no classification head, like
    roberta.base/model.pt) starts a sentence_prediction run with a fresh head."""
    lm = tmp_path / "lm"
    run_main(
        "fairseq-train", sst2_bin / "input0", "--user-dir", USER_DIR, "--task", "masked_lm",
        "--criterion", "masked_lm", "--arch", "roberta_base", *TINY_ROBERTA,
        "--tokens-per-sample", "64", "--sample-break-mode", "eos",
        "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "16", "--max-update", "2",
        "--save-dir", lm, "--cpu", "--no-progress-bar", "--no-epoch-checkpoints",
        "--num-workers", "0",
    )
    ft = tmp_path / "ft"
    log = run_main(
        "fairseq-train",
        *train_args(
            sst2_bin, ft, "--restore-file", lm / "checkpoint_last.pt",
            "--reset-optimizer", "--reset-dataloader", "--reset-meters", max_update=2,
        ),
    ).stdout
    assert re.search(r"Loaded checkpoint \S*lm/checkpoint_last\.pt", log), log
    assert max(num_updates(log)) == 2


@pytest.mark.slow
def test_hydra_train_with_user_dir_and_relative_paths(sst2_bin, tmp_path):
    """fairseq-hydra-train with a config of our own: hydra changes directory to
    outputs/<date>, yet the relative data and save paths resolve as in fairseq-train."""
    (tmp_path / "data").symlink_to(sst2_bin)
    config = tmp_path / "config"
    config.mkdir()
    (config / "tiny.yaml").write_text(
        f"""
common:
  user_dir: {USER_DIR}
  cpu: true
  seed: 1
  log_format: simple
  log_interval: 1
task:
  _name: sentence_prediction
  data: data
  num_classes: 2
  max_positions: 128
criterion:
  _name: sentence_prediction
model:
  _name: roberta
  encoder_layers: 2
  encoder_embed_dim: 32
  encoder_ffn_embed_dim: 64
  encoder_attention_heads: 2
  max_positions: 128
optimizer:
  _name: adam
lr_scheduler:
  _name: fixed
optimization:
  lr: [0.001]
  max_update: 3
dataset:
  batch_size: 16
checkpoint:
  save_dir: checkpoints
  no_epoch_checkpoints: true
"""
    )
    log = run_cli(
        "fairseq-hydra-train", "--config-dir", config, "--config-name", "tiny", cwd=tmp_path
    ).stdout
    assert max(num_updates(log)) == 3, log
    assert (tmp_path / "checkpoints" / "checkpoint_last.pt").is_file()
    assert list((tmp_path / "outputs").glob("*/*/.hydra/config.yaml")), "hydra run dir expected"


@pytest.mark.slow
def test_checkpoint_with_foreign_object_is_refused(sst2_bin, tmp_path):
    """A checkpoint that would run code when unpickled is refused, not executed."""
    marker = tmp_path / "code_ran"

    class Payload:
        def __reduce__(self):
            return (pathlib.Path.touch, (marker,))

    torch.save({"model": {}, "args": None, "extra": Payload()}, tmp_path / "evil.pt")
    proc = run_main(
        "fairseq-train",
        *train_args(sst2_bin, tmp_path / "run", "--restore-file", tmp_path / "evil.pt",
                    "--reset-optimizer", "--reset-dataloader", "--reset-meters"),
        check=False,
    )
    assert proc.returncode != 0
    assert "refusing to load checkpoint" in proc.stdout and "evil.pt" in proc.stdout, proc.stdout
    assert "Unsupported global" in proc.stdout  # the refused global is named
    assert not marker.exists()
