#!/usr/bin/env bash
# Fine-tune roberta_span on MRPC. Inputs and defaults: recipes/glue/common.sh.
TASK=MRPC
NUM_CLASSES=2
LR=1e-05
BATCH_SIZE=16
TOTAL_UPDATES=2296
WARMUP_UPDATES=137
METRIC=f1
# F1 counts the paraphrase / duplicate class (also for folders without a data record).
POSITIVE_LABEL=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
