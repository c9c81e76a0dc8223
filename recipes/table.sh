#!/usr/bin/env bash
# Fine-tune on your own data: TSV, CSV or JSON Lines files with named columns
# (span-preprocess table), then the same training, dev result and predictions as the
# GLUE recipes (recipes/glue/common.sh documents the shared inputs: HEAD, MODEL_DIR,
# ROBERTA_PATH, BPE_DIR, NGRAMS, SEGMENTATION, SPAN_ENCODER, SEED, DATA_DIR, OUT_DIR, ...).
#
# Required:
#   TASK           a name for this task: data-bin/$TASK, runs/$TASK
#   TRAIN, VALID   the train and validation files (.tsv, .csv, .jsonl)
#   TEXT_COLUMNS   one column, or two for pairs: "premise hypothesis"
#   LABEL_COLUMN   the label column: "label"
#   NUM_CLASSES    number of classes (1 with REGRESSION=1)
#   METRIC         accuracy | f1 | mcc | pearson | spearman | loss (picks checkpoint_best.pt)
# Optional:
#   TEST           a test file: predictions in $OUT_DIR/test_predictions/$TASK.tsv
#   REGRESSION=1   numeric labels
#   POSITIVE_LABEL the class F1 counts as positive (needed for METRIC=f1)
#   DROP_LABELS    labels whose rows are left out ("-1": Hugging Face's "no label")
#   FORMAT         auto | tsv | csv | jsonl                              [auto]
#   BAD_ROWS       error | skip                                          [error]
#   LR [1e-05]  BATCH_SIZE [32]  EPOCHS [10]
#   TOTAL_UPDATES  [EPOCHS passes over the train rows, in batches of BATCH_SIZE (or
#                  --batch-size, --update-freq) on each GPU]  WARMUP_UPDATES [6% of them]
# Example (pairs exported by Hugging Face datasets as JSON Lines):
#   TASK=snli_hf TRAIN=train.jsonl VALID=validation.jsonl TEXT_COLUMNS="premise hypothesis" \
#   LABEL_COLUMN=label DROP_LABELS=-1 NUM_CLASSES=3 METRIC=accuracy \
#   BPE_DIR=gpt2_bpe recipes/table.sh

set -euo pipefail
RECIPE_NAME=recipes/table.sh
# --help is answered before the checks below (recipes/lib.sh), with common.sh's inputs too
RECIPE_HELP_ALSO=$(dirname "${BASH_SOURCE[0]}")/glue/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for v in TASK TRAIN VALID TEXT_COLUMNS LABEL_COLUMN NUM_CLASSES METRIC; do
    [ -n "${!v:-}" ] || { echo "$RECIPE_NAME: set $v (see the top of this file)" >&2; exit 2; }
done
for f in "$TRAIN" "$VALID" ${TEST:+"$TEST"}; do
    [ -f "$f" ] || { echo "$RECIPE_NAME: $f does not exist" >&2; exit 2; }
done
LR=${LR:-1e-05}
BATCH_SIZE=${BATCH_SIZE:-32}
TOTAL_UPDATES=${TOTAL_UPDATES:-auto}
[ "$TOTAL_UPDATES" = auto ] || SCHEDULE_GIVEN=1  # yours: kept whatever EPOCHS and batch size
TEST_FOLDER=test_predictions
read -r -a text_columns <<< "$TEXT_COLUMNS"
read -r -a drop_labels <<< "${DROP_LABELS:-}"

prepare_data() {  # prepare_data OUT (called by common.sh when DATA_DIR is missing)
    echo "preparing $1 from $TRAIN, $VALID${TEST:+, $TEST}"
    span-preprocess table --out "$1" --name "$TASK" --train "$TRAIN" --valid "$VALID" \
        ${TEST:+--test "$TEST"} --text-columns "${text_columns[@]}" \
        --label-column "$LABEL_COLUMN" --format "${FORMAT:-auto}" --bad-rows "${BAD_ROWS:-error}" \
        $([ "${REGRESSION:-0}" = 1 ] && echo --regression) \
        ${POSITIVE_LABEL:+--positive-label "$POSITIVE_LABEL"} \
        ${DROP_LABELS:+--drop-labels "${drop_labels[@]}"} \
        "${encoder_args[@]}" --srcdict "$SRCDICT" ${NGRAMS:+--ngrams "$NGRAMS"} \
        --segmentation "$SEGMENTATION" --workers "$WORKERS"
}
source "$(dirname "${BASH_SOURCE[0]}")/glue/common.sh"
