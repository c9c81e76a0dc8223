#!/usr/bin/env bash
# Fine-tune roberta_span on RTE. Inputs and defaults: recipes/glue/common.sh.
TASK=RTE
NUM_CLASSES=2
LR=2e-05
BATCH_SIZE=16
TOTAL_UPDATES=2036
WARMUP_UPDATES=122
METRIC=accuracy
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
