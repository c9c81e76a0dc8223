"""End to end: fairseq-train / fairseq-hydra-train with task span_classification and
model roberta_span on folders prepared from real GLUE rows; restore from a plain
RoBERTa checkpoint."""

import re

import pytest
import torch

from conftest import TINY_ROBERTA, USER_DIR, run_main
from test_task_data import glue_folder


def span_args(data, save_dir, *extra, num_classes=2, max_update=6, metric="accuracy"):
    """fairseq-train arguments for a tiny span_classification run."""
    return [
        data, "--user-dir", USER_DIR, "--task", "span_classification",
        "--criterion", "span_classification", "--arch", "roberta_span_base", *TINY_ROBERTA,
        "--num-classes", num_classes, "--init-token", "0", "--separator-token", "2",
        "--shorten-method", "truncate", "--max-spans", "64", "--max-span-tokens", "16",
        "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "16", "--max-update", max_update,
        "--save-dir", save_dir, "--cpu", "--seed", "1", "--num-workers", "0",
        "--no-progress-bar", "--log-interval", "1", "--log-format", "simple",
        "--no-epoch-checkpoints", "--validate-interval-updates", max(1, max_update // 2),
        "--save-interval-updates", max(1, max_update // 2),
        "--best-checkpoint-metric", metric, "--maximize-best-checkpoint-metric", *extra,
    ]


def valid_stats(log):
    """The key/value pairs of fairseq's last 'valid on' line."""
    lines = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
    assert lines, log[-3000:]
    return dict(re.findall(r"\| (\w+) ([-\d.]+)", lines[-1]))


@pytest.mark.slow
def test_train_single_sentence_reports_mcc(tmp_path):
    log = run_main("fairseq-train", *span_args(glue_folder("CoLA"), tmp_path, metric="mcc")).stdout
    stats = valid_stats(log)
    assert {"accuracy", "mcc", "f1"} <= set(stats), stats
    assert "best_mcc" in stats
    assert (tmp_path / "checkpoint_best.pt").is_file()


@pytest.mark.slow
def test_train_pair_reports_f1_with_cnn_max(tmp_path):
    log = run_main(
        "fairseq-train",
        *span_args(glue_folder("MRPC"), tmp_path, "--span-encoder", "cnn-max", metric="f1"),
    ).stdout
    stats = valid_stats(log)
    assert {"accuracy", "f1", "mcc", "best_f1"} <= set(stats), stats
    state = torch.load(tmp_path / "checkpoint_best.pt", map_location="cpu")
    keys = state["model"].keys()
    assert any(".span_encoder.within_span.conv" in k for k in keys)


@pytest.mark.slow
def test_train_regression_reports_pearson_spearman(tmp_path):
    log = run_main(
        "fairseq-train",
        *span_args(glue_folder("STS-B"), tmp_path, "--regression-target", num_classes=1, metric="spearman"),
    ).stdout
    stats = valid_stats(log)
    assert {"pearson", "spearman", "best_spearman"} <= set(stats), stats
    assert "accuracy" not in stats


HYDRA_CONFIG = """
common:
  user_dir: {user_dir}
  cpu: true
  seed: 1
  log_format: simple
  log_interval: 1
task:
  _name: span_classification
  data: {data}
  num_classes: 2
  init_token: 0
  separator_token: 2
  max_positions: 128
  shorten_method: truncate
  max_spans: 64
  max_span_tokens: 16
criterion:
  _name: span_classification
model:
  _name: roberta_span_base
  span_encoder: attn-max
  encoder_layers: 2
  encoder_embed_dim: 32
  encoder_ffn_embed_dim: 64
  encoder_attention_heads: 2
dataset:
  batch_size: 16
  num_workers: 0
  validate_interval_updates: 2
optimizer:
  _name: adam
lr_scheduler:
  _name: fixed
optimization:
  max_update: 4
  lr: [0.001]
checkpoint:
  save_dir: {save_dir}
  save_interval_updates: 2
  no_epoch_checkpoints: true
  best_checkpoint_metric: f1
  maximize_best_checkpoint_metric: true
"""


@pytest.mark.slow
def test_hydra_train(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    (config / "span.yaml").write_text(
        HYDRA_CONFIG.format(user_dir=USER_DIR, data=glue_folder("MRPC"), save_dir=tmp_path / "ckpt")
    )
    log = run_main(
        "fairseq-hydra-train", "--config-dir", config, "--config-name", "span",
        "dataset.num_workers=0", cwd=tmp_path).stdout
    stats = valid_stats(log)
    assert {"f1", "best_f1"} <= set(stats), stats
    state = torch.load(tmp_path / "ckpt" / "checkpoint_best.pt", map_location="cpu")
    assert state["cfg"]["model"]["span_encoder"] == "attn-max"


@pytest.mark.slow
def test_restore_plain_roberta_checkpoint_gives_fresh_span_head(tmp_path):
    """A pretrained-RoBERTa-layout checkpoint (masked_lm, no heads) restores into
    roberta_span with --restore-file and the reset flags; the encoder weights are the
    checkpoint's and the span head is new."""
    data = glue_folder("SST-2")
    pre = tmp_path / "pretrained"
    run_main(
        "fairseq-train", data / "input0", "--user-dir", USER_DIR, "--task", "masked_lm",
        "--arch", "roberta_base", *TINY_ROBERTA, "--tokens-per-sample", "128",
        "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--max-update", "1",
        "--save-dir", pre, "--cpu", "--no-epoch-checkpoints", "--num-workers", "0",
        "--disable-validation",
    )
    plain = torch.load(pre / "checkpoint_last.pt", map_location="cpu")["model"]
    assert not any(k.startswith("classification_heads") for k in plain)

    run = tmp_path / "run"
    log = run_main(
        "fairseq-train",
        *span_args(data, run, "--restore-file", pre / "checkpoint_last.pt", "--reset-optimizer",
                   "--reset-dataloader", "--reset-meters", "--reset-lr-scheduler", "--lr", "1e-12",
                   max_update=1),
    ).stdout
    assert "Overwriting classification_heads.sentence_classification_head.span_encoder" in log
    tuned = torch.load(run / "checkpoint_last.pt", map_location="cpu")["model"]
    emb = "encoder.sentence_encoder.embed_tokens.weight"
    assert torch.allclose(tuned[emb], plain[emb], atol=1e-6)
    assert any(k.startswith("classification_heads.sentence_classification_head.span_encoder") for k in tuned)

    # A checkpoint of another vocabulary, or of other positions, is refused at load,
    # before any update, with what to change (not only fairseq's size mismatch).
    foreign = tmp_path / "foreign.pt"
    state = torch.load(pre / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    state["model"][emb] = state["model"][emb][:-8]
    torch.save(state, foreign)
    for extra, message in (
        ([], r"vocabulary of \d+ embedding rows, this model \d+ .*another dictionary"),
        (["--max-positions", "64"], r"the checkpoint has 128 positions, this model 64: "
                                    r"set --max-positions 128"),
    ):
        source = foreign if not extra else pre / "checkpoint_last.pt"
        save = tmp_path / f"refused{len(extra)}"
        out = run_main("fairseq-train", *span_args(data, save, "--finetune-from-model", source,
                                                   *extra, max_update=1), check=False)
        assert out.returncode != 0
        assert re.search(message, out.stdout), out.stdout[-3000:]
        assert "num_updates" not in out.stdout and not list(save.glob("*.pt"))
