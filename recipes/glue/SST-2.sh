#!/usr/bin/env bash
# Fine-tune roberta_span on SST-2. Inputs and defaults: recipes/glue/common.sh.
TASK=SST-2
NUM_CLASSES=2
LR=1e-05
BATCH_SIZE=32
TOTAL_UPDATES=20935
WARMUP_UPDATES=1256
METRIC=accuracy
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
