#!/usr/bin/env bash
# Fine-tune roberta_span on CoLA. Inputs and defaults: recipes/glue/common.sh.
TASK=CoLA
NUM_CLASSES=2
LR=1e-05
BATCH_SIZE=16
TOTAL_UPDATES=5336
WARMUP_UPDATES=320
METRIC=mcc
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
