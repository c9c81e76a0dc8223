#!/usr/bin/env bash
# Fine-tune roberta_span on MNLI. Inputs and defaults: recipes/glue/common.sh.
TASK=MNLI
NUM_CLASSES=3
LR=1e-05
BATCH_SIZE=32
TOTAL_UPDATES=123873
WARMUP_UPDATES=7432
METRIC=accuracy
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
