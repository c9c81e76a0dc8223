#!/usr/bin/env bash
# Fine-tune roberta_span on QNLI. Inputs and defaults: recipes/glue/common.sh.
TASK=QNLI
NUM_CLASSES=2
LR=1e-05
BATCH_SIZE=32
TOTAL_UPDATES=33112
WARMUP_UPDATES=1986
METRIC=accuracy
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
