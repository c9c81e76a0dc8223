#!/usr/bin/env bash
# Fine-tune roberta_span on WNLI. Inputs and defaults: recipes/glue/common.sh.
# Not in fairseq's table: RTE's settings, 10 epochs of 635 examples, 6% warm-up.
TASK=WNLI
NUM_CLASSES=2
LR=2e-05
BATCH_SIZE=16
TOTAL_UPDATES=400
WARMUP_UPDATES=24
METRIC=accuracy
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
