#!/usr/bin/env bash
# Fine-tune roberta_span on QQP. Inputs and defaults: recipes/glue/common.sh.
TASK=QQP
NUM_CLASSES=2
LR=1e-05
BATCH_SIZE=32
TOTAL_UPDATES=113272
WARMUP_UPDATES=28318
METRIC=f1
# F1 counts the paraphrase / duplicate class (also for folders without a data record).
POSITIVE_LABEL=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
