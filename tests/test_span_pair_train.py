"""End to end: the weak aligner on real MRPC training pairs -> span-preprocess pairs ->
a tiny fairseq-train of task span_pair_classification."""

import re

import pytest
import torch

from conftest import TINY_ROBERTA, USER_DIR, run_main


def pair_args(data, save_dir, *extra):
    return [
        data, "--user-dir", USER_DIR, "--task", "span_pair_classification",
        "--criterion", "span_pair_classification", "--arch", "roberta_span_pair_base",
        *TINY_ROBERTA, "--num-classes", "2", "--init-token", "0", "--separator-token", "2",
        "--shorten-method", "truncate", "--optimizer", "adam", "--lr", "1e-3",
        "--batch-size", "16", "--max-update", "4", "--save-dir", save_dir, "--cpu",
        "--seed", "1", "--num-workers", "0", "--no-progress-bar", "--log-interval", "1",
        "--log-format", "simple", "--no-epoch-checkpoints", "--validate-interval-updates", "2",
        "--save-interval-updates", "2", *extra,
    ]


def valid_stats(log):
    lines = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
    assert lines, log[-3000:]
    return dict(re.findall(r"\| (\w+) ([-\d.]+)", lines[-1]))


@pytest.mark.slow
def test_train_both_heads(pair_folders, tmp_path):
    log = run_main("fairseq-train", *pair_args(
         pair_folders["labelled"], tmp_path, "--best-checkpoint-metric", "phrasal_accuracy",
         "--maximize-best-checkpoint-metric")).stdout
    stats = valid_stats(log)
    assert {"loss", "phrasal_loss", "phrasal_accuracy", "sentential_loss",
            "sentential_accuracy", "sentential_f1", "best_phrasal_accuracy"} <= set(stats), stats
    # The logged total is w_p * phrasal + w_s * sentential (both weights 1), per batch.
    state = torch.load(tmp_path / "checkpoint_best.pt", map_location="cpu", weights_only=True)
    keys = state["model"].keys()
    assert any(k.startswith("classification_heads.sentence_classification_head.phrasal.") for k in keys)
    assert any(k.startswith("classification_heads.sentence_classification_head.sentential.") for k in keys)


@pytest.mark.slow
def test_train_phrasal_only_mean_features_with_truncation(pair_folders, tmp_path):
    """No sentence labels: --sentential-weight 0; a short --max-positions cuts pairs,
    which are counted and left out."""
    log = run_main("fairseq-train", *pair_args(
         pair_folders["phrasal"], tmp_path, "--sentential-weight", "0",
         "--phrase-features", "mean2", "--max-positions", "40")).stdout
    stats = valid_stats(log)
    assert "phrasal_accuracy" in stats and "sentential_loss" not in stats, stats
    assert re.search(r"train: truncation to 40 tokens cuts \d+ phrase pairs", log)
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    dense = state["model"]["classification_heads.sentence_classification_head.phrasal.dense.weight"]
    assert dense.shape[1] == 2 * 32  # mean2: [h_s; h_t]


@pytest.mark.slow
def test_no_sentence_labels_needs_sentential_weight_zero(pair_folders, tmp_path):
    proc = run_main("fairseq-train", *pair_args(pair_folders["phrasal"], tmp_path), check=False)
    assert proc.returncode != 0
    assert "--sentential-weight 0" in proc.stdout
