#!/usr/bin/env bash
# Fine-tune roberta_span on STS-B. Inputs and defaults: recipes/glue/common.sh.
TASK=STS-B
NUM_CLASSES=1
LR=2e-05
BATCH_SIZE=16
TOTAL_UPDATES=3598
WARMUP_UPDATES=214
METRIC=pearson
REGRESSION=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
