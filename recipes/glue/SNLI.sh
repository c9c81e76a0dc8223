#!/usr/bin/env bash
# Fine-tune roberta_span on SNLI. Inputs and defaults: recipes/glue/common.sh.
# Not in fairseq's table: MNLI's settings, 10 epochs of 549,367 examples, 6% warm-up.
TASK=SNLI
NUM_CLASSES=3
LR=1e-05
BATCH_SIZE=32
TOTAL_UPDATES=171680
WARMUP_UPDATES=10301
METRIC=accuracy
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
