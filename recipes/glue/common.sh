# Shared body of the GLUE recipes; sourced by recipes/glue/<TASK>.sh, which sets only
# what differs per task:
#   TASK NUM_CLASSES LR BATCH_SIZE TOTAL_UPDATES WARMUP_UPDATES METRIC [REGRESSION=1]
# Hyperparameters are fairseq's RoBERTa GLUE settings; span settings are the paper's.
# recipes/table.sh sources it too, for your own TSV/CSV/JSON Lines data: it defines a
# prepare_data function (span-preprocess table) and TOTAL_UPDATES=auto.
#
# Inputs (environment variables, defaults in brackets):
#   GLUE_DIR       glue_data folder with one sub-folder per task      [glue_data]
#   HEAD           span: roberta_span, the span head (Span Fine-tuning)
#                  plain: fairseq's own roberta model and sentence_prediction head on
#                  the same data, hyperparameters and seed (the baseline); for a
#                  MODEL_DIR that keeps BERT's segment B and pooler (span-convert bert),
#                  roberta_span with --sentence-head plain: BERT's own classifier  [span]
#   ROBERTA_PATH   pretrained roberta.{base,large}/model.pt            []
#   MODEL_DIR      a converted model (span-convert bert: model.pt, dict.txt,
#                  tokenizer). Replaces ROBERTA_PATH and BPE_DIR: WordPiece, BERT's pair
#                  layout [CLS] A [SEP] B [SEP], sizes read from the checkpoint; from
#                  span-convert roberta: its GPT-2 BPE or sentencepiece, RoBERTa's layout
#                  [neither given: the packaged all-MiniLM-L6-v2, converted on first use
#                  into $SPAN_CACHE/models/all-MiniLM-L6-v2 (recipes/lib.sh)]
#   FROM_SCRATCH   1: neither, a model from random weights (smoke runs)  [0]
#   SPAN_CACHE     where the default model is converted    [~/.cache/span_plugin]
#   ARCH           roberta_span_base or roberta_span_large; HEAD=plain: roberta_base or
#                  roberta_large; MODEL_DIR: roberta_span / roberta (roberta_span when
#                  the model holds BERT's segment B and pooler)  [roberta_span_base]
#   SEED           fairseq's --seed                                    [1]
#   BPE_DIR        folder with encoder.json, vocab.bpe, dict.txt       [gpt2_bpe]
#   NGRAMS         n-gram dictionary; empty uses the packaged default  []
#   SEGMENTATION   greedy | random | none                              [greedy]
#   SPAN_ENCODER   cnn-cnn | cnn-max | attn-max | attn-attn | cnn      [cnn-cnn]
#   MAX_SPANS, MAX_SPAN_TOKENS   the paper's r and l                   [64, 16]
#   DATA_DIR       binarized task folder; prepared when missing
#                  [data-bin/$TASK; MODEL_DIR: data-bin/<model>/$TASK; -$SEGMENTATION
#                  appended unless greedy]
#   OUT_DIR        checkpoints/, tensorboard/, train.log, results.json (dev result of
#                  checkpoint_best.pt), dev_predictions/ (one row per dev row) and
#                  glue_test/ (submission files)
#                  [runs/$TASK, or runs/<model>/$TASK, with a suffix for each setting
#                  away from its default: -plain, -$SPAN_ENCODER, -$SEGMENTATION,
#                  -seed$SEED; so changing one variable never resumes another run]
#   TEST_PREDICTIONS  0 skips the GLUE test submission files             [1]
#   POSITIVE_LABEL the class F1 counts as positive; empty: the one the data folder's
#                  record names (span-preprocess glue: MRPC/QQP 1, RTE/QNLI
#                  entailment, ...); METRIC=f1 needs one                []
#   EPOCHS         passes over the train rows; the learning rate decays over them (a
#                  task's TOTAL_UPDATES are fairseq's for 10; other EPOCHS, --batch-size,
#                  --update-freq or GPUs count the run's own updates)  [10]
#   NUM_GPUS       GPUs to train on; 0 = CPU                           [all visible]
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE, DIST_TIMEOUT, MAX_RESTARTS
#                  several processes or nodes (torchrun): docs/DISTRIBUTED.md
#   BF16           1: train in bfloat16 (--bf16, no loss scaling) instead of fp16
#                  on GPUs (fp32 on the CPU); a --fp16/--bf16 argument wins too  [0]
#   WORKERS        preprocessing processes                             [nproc]
# Extra arguments go to fairseq-train last, so they override:
#   recipes/glue/RTE.sh --cpu --max-update 5   is a smoke run.

set -euo pipefail

RECIPES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$RECIPES/../.." && pwd)
RECIPE_NAME=${RECIPE_NAME:-recipes/glue/$TASK.sh}
source "$RECIPES/../lib.sh"

GLUE_DIR=${GLUE_DIR:-glue_data}
HEAD=${HEAD:-span}
ROBERTA_PATH=${ROBERTA_PATH:-}
MODEL_DIR=${MODEL_DIR:-}
SEED=${SEED:-1}
BPE_DIR=${BPE_DIR:-gpt2_bpe}
NGRAMS=${NGRAMS:-}
SEGMENTATION=${SEGMENTATION:-greedy}
SPAN_ENCODER=${SPAN_ENCODER:-cnn-cnn}
MAX_SPANS=${MAX_SPANS:-64}
MAX_SPAN_TOKENS=${MAX_SPAN_TOKENS:-16}
WORKERS=${WORKERS:-$(nproc)}
REGRESSION=${REGRESSION:-0}
TEST_PREDICTIONS=${TEST_PREDICTIONS:-1}
POSITIVE_LABEL=${POSITIVE_LABEL:-}
TEST_FOLDER=${TEST_FOLDER:-glue_test}  # where test predictions go, under OUT_DIR
EPOCHS=${EPOCHS:-10}

count_gpus "$@"

# ---- check the inputs before spending any time -------------------------------------
case "$HEAD" in span|plain) ;; *) die "HEAD=$HEAD: expected span or plain" ;; esac
[ -z "$NGRAMS" ] || [ -f "$NGRAMS" ] || die "NGRAMS=$NGRAMS does not exist"
use_pretrained_encoder "$@"
if [ -n "$MODEL_DIR" ]; then
    layout_args=(--init-token 0)  # BERT: [CLS] A [SEP] B [SEP], one separator
    # span-convert roberta: RoBERTa's <s> A </s> </s> B </s>
    if [ "$MODEL_LAYOUT" = roberta ]; then layout_args+=(--separator-token 2); fi
    # BERT's segment B and pooler (span-convert flags prints their options) live in the
    # plugin's model only: the plain head runs there too, as BERT's own classifier.
    plain_arch=roberta
    case " ${size_args[*]} " in *" --bert-token-types "*|*" --bert-pooler "*) plain_arch=roberta_span ;; esac
    default_arch=$([ "$HEAD" = span ] && echo roberta_span || echo "$plain_arch")
else
    layout_args=(--init-token 0 --separator-token 2)  # RoBERTa: <s> A </s> </s> B </s>
    default_arch=$([ "$HEAD" = span ] && echo roberta_span_base || echo roberta_base)
fi
ARCH=${ARCH:-$default_arch}

prefix=${MODEL_DIR:+$(basename "$MODEL_DIR")/}
seg_suffix=$([ "$SEGMENTATION" = greedy ] || echo "-$SEGMENTATION")
DATA_DIR=${DATA_DIR:-data-bin/$prefix$TASK$seg_suffix}
run_suffix=$seg_suffix
if [ "$HEAD" = plain ]; then run_suffix=-plain
elif [ "$SPAN_ENCODER" != cnn-cnn ]; then run_suffix=-$SPAN_ENCODER$run_suffix; fi
[ "$SEED" = 1 ] || run_suffix=$run_suffix-seed$SEED
OUT_DIR=${OUT_DIR:-runs/$prefix$TASK$run_suffix}
# One recipe per OUT_DIR, never one that is or holds an input.
hold_output "$OUT_DIR" OUT_DIR "DATA_DIR=$DATA_DIR" "GLUE_DIR=$GLUE_DIR/$TASK" \
    "TRAIN=${TRAIN:-}" "VALID=${VALID:-}" "TEST=${TEST:-}" "MODEL_DIR=$MODEL_DIR" \
    "ROBERTA_PATH=$ROBERTA_PATH" "BPE_DIR=$([ -n "$MODEL_DIR" ] || echo "$BPE_DIR")" "NGRAMS=$NGRAMS"

# ---- prepare the binarized folder with span files when it is missing -----------------
if ! declare -F prepare_data >/dev/null; then
    prepare_data() {  # prepare_data OUT: a GLUE task folder (span-preprocess glue)
        [ -d "$GLUE_DIR/$TASK" ] \
            || die "no $GLUE_DIR/$TASK folder: set GLUE_DIR to your glue_data folder (it holds $TASK/train.tsv, dev.tsv, test.tsv)"
        echo "preparing $1 from $GLUE_DIR/$TASK"
        span-preprocess glue --task "$TASK" --glue-dir "$GLUE_DIR" --out "$1" \
            "${encoder_args[@]}" --srcdict "$SRCDICT" ${NGRAMS:+--ngrams "$NGRAMS"} \
            --segmentation "$SEGMENTATION" --workers "$WORKERS"
    }
fi
if [ ! -d "$DATA_DIR" ]; then
    need_gpt2_files
    prepare_data "$DATA_DIR"  # span-preprocess writes it whole or not at all, one build at a time
else
    # A folder made earlier (or by hand): spans, row counts and its record's hashes.
    span-preprocess check "$DATA_DIR" \
        || die "$DATA_DIR is not a complete span-annotated task folder (see the error above); delete it to rebuild it"
fi
same_vocabulary "$DATA_DIR/input0/dict.txt"
RECORD=$DATA_DIR/provenance.json
if [ "$REGRESSION" != 1 ]; then
    # fairseq-preprocess pads dictionaries to a multiple of 8 with "madeupword" entries.
    labels=$(grep -vc "^madeupword" "$DATA_DIR/label/dict.txt")
    [ "$labels" -eq "$NUM_CLASSES" ] \
        || die "$DATA_DIR/label/dict.txt has $labels labels but $TASK is trained with NUM_CLASSES=$NUM_CLASSES"
    if [ "$METRIC" = f1 ] && [ -z "$POSITIVE_LABEL" ]; then
        positive=$([ -f "$RECORD" ] && python -c 'import json, sys; print(json.load(open(sys.argv[1]))["labels"].get("positive") or "")' "$RECORD" || true)
        [ -n "$positive" ] \
            || die "METRIC=f1 needs the class F1 counts as positive: set POSITIVE_LABEL (the record of $DATA_DIR names none)"
    fi
fi

# ---- the learning-rate schedule: polynomial decay over the run's own length -------------
# A task's TOTAL_UPDATES and WARMUP_UPDATES (recipes/glue/$TASK.sh) are fairseq's RoBERTa
# GLUE figures for 10 epochs of BATCH_SIZE rows per update on one GPU (6% warm-up). A run
# of other epochs (EPOCHS, --max-epoch) or rows per update (--batch-size, --update-freq,
# GPUs) counts its own: its epochs over the folder's train rows, the same warm-up share;
# otherwise the learning rate would stop mid-decay. recipes/table.sh (TOTAL_UPDATES=auto)
# always counts them and keeps a TOTAL_UPDATES given to it; --total-num-update among the
# extra arguments replaces the schedule.
rows_per_update "$@"
train_rows=$DATA_DIR/raw/train.input0
if [ -n "$(flag_value --total-num-update "$@")" ]; then
    echo "schedule: --total-num-update $(flag_value --total-num-update "$@") as given (the recipe's own is not used)"
elif [ "$TOTAL_UPDATES" = auto ] || { [ "${SCHEDULE_GIVEN:-0}" != 1 ] \
        && { [ "$EPOCHS_RUN" != 10 ] || [ "$ROWS_PER_UPDATE" != "$BATCH_SIZE" ]; }; }; then
    [ -f "$train_rows" ] \
        || die "$train_rows not found: cannot count the updates of $EPOCHS_RUN epochs of $ROWS_PER_UPDATE rows per update; give --total-num-update, --warmup-updates and --max-update (or TOTAL_UPDATES to recipes/table.sh)"
    rows=$(wc -l < "$train_rows")
    updates=$(( (rows + ROWS_PER_UPDATE - 1) / ROWS_PER_UPDATE * EPOCHS_RUN ))
    if [ "$TOTAL_UPDATES" = auto ]; then
        WARMUP_UPDATES=${WARMUP_UPDATES:-$(( updates * 6 / 100 ))}
        echo "schedule: $updates updates ($EPOCHS_RUN epochs of $rows train rows, $ROWS_PER_UPDATE rows per update), $WARMUP_UPDATES of warm-up"
    else
        reference="fairseq's $TOTAL_UPDATES updates and $WARMUP_UPDATES of warm-up are for 10 epochs of $BATCH_SIZE rows per update"
        WARMUP_UPDATES=$(( (WARMUP_UPDATES * updates + TOTAL_UPDATES / 2) / TOTAL_UPDATES ))
        echo "schedule: $updates updates ($EPOCHS_RUN epochs of $rows train rows, $ROWS_PER_UPDATE rows per update), $WARMUP_UPDATES of warm-up ($reference)"
    fi
    TOTAL_UPDATES=$updates
else
    WARMUP_UPDATES=${WARMUP_UPDATES:-$(( TOTAL_UPDATES * 6 / 100 ))}
    echo "schedule: $TOTAL_UPDATES updates, $WARMUP_UPDATES of warm-up ($EPOCHS_RUN epochs of $ROWS_PER_UPDATE rows per update)"
fi

# ---- fine-tune --------------------------------------------------------------------------
if [ "$HEAD" = span ]; then
    TASK_NAME=span_classification
    head_args=(--max-spans "$MAX_SPANS" --max-span-tokens "$MAX_SPAN_TOKENS" --span-encoder "$SPAN_ENCODER")
else
    TASK_NAME=sentence_prediction  # fairseq's own task and head; the span files are not read
    head_args=()
    case "$ARCH" in roberta_span*) head_args=(--sentence-head plain) ;; esac
fi
args=(
    "$DATA_DIR" --user-dir "$ROOT/span_plugin"
    --task "$TASK_NAME" --arch "$ARCH" "${head_args[@]}"
    # Both heads log the same GLUE metrics through this criterion.
    --criterion span_classification
    --num-classes "$NUM_CLASSES" "${layout_args[@]}" --max-positions 512 "${size_args[@]}"
    # Inputs past the model's positions are cut (spans with them) rather than stopping the run.
    --shorten-method truncate --seed "$SEED"
    --batch-size "$BATCH_SIZE" --max-tokens 4400 --required-batch-size-multiple 1
    --optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-06 --weight-decay 0.1 --clip-norm 0.0
    --lr-scheduler polynomial_decay --lr "$LR" --total-num-update "$TOTAL_UPDATES"
    --warmup-updates "$WARMUP_UPDATES" --max-update "$TOTAL_UPDATES" --max-epoch "$EPOCHS"
    --dropout 0.1 --attention-dropout 0.1
    --best-checkpoint-metric "$METRIC" --no-epoch-checkpoints
    --save-dir "$OUT_DIR/checkpoints" --tensorboard-logdir "$OUT_DIR/tensorboard"
    --log-format simple --log-interval 100
    # RoBERTa's LM head is not used when fine-tuning.
    --find-unused-parameters
)
if [ "$METRIC" != loss ]; then args+=(--maximize-best-checkpoint-metric); fi
if [ -n "$POSITIVE_LABEL" ]; then args+=(--positive-label "$POSITIVE_LABEL"); fi
if [ "$REGRESSION" = 1 ]; then args+=(--regression-target); fi
# First launch starts from the pretrained weights; a relaunch resumes checkpoint_last.pt.
if [ -n "$PRETRAINED" ]; then args+=(--finetune-from-model "$PRETRAINED"); fi

# MNLI validates on matched (valid, which picks the best checkpoint) and mismatched.
VALID_SUBSETS=valid
if [ -f "$DATA_DIR/input0/valid1.idx" ]; then VALID_SUBSETS=valid,valid1; fi
args+=(--valid-subset "$VALID_SUBSETS")

# fairseq-train's output is kept in train.log: appended by relaunches, started afresh
# when there is no checkpoint to resume.
TRAIN_LOG=$OUT_DIR/train$NODE_SUFFIX.log
mkdir -p "$OUT_DIR"
if ! compgen -G "$OUT_DIR/checkpoints/checkpoint*.pt" >/dev/null; then : > "$TRAIN_LOG"; fi
train_resumably "${args[@]}" "$@" 2>&1 | tee -a "$TRAIN_LOG"
only_node_rank_zero

# ---- dev result of the best checkpoint, and GLUE test predictions ----------------------
best="$OUT_DIR/checkpoints/checkpoint_best.pt"
device=(); if [ "$NUM_GPUS" -eq 0 ]; then device=(--cpu); fi
# In fp32 (CPU) fairseq-train's validation of the epoch saved as checkpoint_best.pt is
# the figure fairseq-validate would give: it is read from train.log, which saves a pass
# over the dev set (write_results.py exits 3 when the log cannot tell which epoch the
# file holds). Half precision validated in fp16: fairseq-validate gives fp32 figures.
from_log=3
case " $* " in *" --fp16 "*|*" --bf16 "*|*" --amp "*|*" --memory-efficient-"*) half=1 ;; *) half=${BF16:-0} ;; esac
if [ "$NUM_GPUS" -eq 0 ] && [ "$half" = 0 ]; then
    python "$RECIPES/write_results.py" --task "$TASK" --metric "$METRIC" --checkpoint "$best" \
        --train-log "$TRAIN_LOG" --out "$OUT_DIR/results.json" && from_log=0 || from_log=$?
fi
if [ "$from_log" = 3 ]; then
    fairseq-validate "$DATA_DIR" --user-dir "$ROOT/span_plugin" --task "$TASK_NAME" \
        --criterion span_classification --path "$best" --valid-subset "$VALID_SUBSETS" \
        --batch-size 32 --log-format json "${device[@]}" 2>&1 | tee "$OUT_DIR/dev.log"
    python "$RECIPES/write_results.py" --task "$TASK" --metric "$METRIC" --checkpoint "$best" \
        --log "$OUT_DIR/dev.log" --out "$OUT_DIR/results.json"
elif [ "$from_log" != 0 ]; then
    die "could not write $OUT_DIR/results.json from $TRAIN_LOG (see above)"
fi

# The encoder, n-gram dictionary and segmentation come from the checkpoint's data record;
# a folder made before records existed needs them given.
predict_args=()
if [ ! -f "$RECORD" ]; then
    if [ -z "$MODEL_DIR" ]; then encoder_args=(--bpe gpt2 "${encoder_args[@]}"); fi
    predict_args=("${encoder_args[@]}" ${NGRAMS:+--ngrams "$NGRAMS"} --segmentation "$SEGMENTATION")
fi
# Dev predictions, one per dev row in order (paired tests between runs), and the test
# predictions (GLUE submission files), from the folder's own raw text, in one call.
splits=() outputs=()
add() {  # add SPLIT FILE: predict the folder's split SPLIT into FILE, if it has one
    if [ -f "$DATA_DIR/raw/$1.input0" ]; then splits+=("$1"); outputs+=("$2")
    else echo "$DATA_DIR has no $1 split: no $2"; fi
}
if [ "$TASK" = MNLI ]; then
    add valid "$OUT_DIR/dev_predictions/MNLI-m.tsv"
    add valid1 "$OUT_DIR/dev_predictions/MNLI-mm.tsv"
    if [ "$TEST_PREDICTIONS" = 1 ]; then
        add test "$OUT_DIR/$TEST_FOLDER/MNLI-m.tsv"
        add test1 "$OUT_DIR/$TEST_FOLDER/MNLI-mm.tsv"
    fi
else
    add valid "$OUT_DIR/dev_predictions/$TASK.tsv"
    if [ "$TEST_PREDICTIONS" = 1 ]; then add test "$OUT_DIR/$TEST_FOLDER/$TASK.tsv"; fi
fi
# Where results.json came from fairseq-train's validation, the dev predictions do too:
# the criterion keeps them in the checkpoint (span-predict --from-validation), which
# saves a pass over the dev set and gives exactly the predictions results.json scores.
if [ "$from_log" = 0 ]; then predict_args+=(--from-validation); fi
if [ "${#splits[@]}" -gt 0 ]; then
    span-predict --checkpoint "$best" --data "$DATA_DIR" --split "${splits[@]}" \
        --output "${outputs[@]}" "${predict_args[@]}"
fi
echo "results: $OUT_DIR/results.json; dev predictions: $OUT_DIR/dev_predictions/; test predictions: $OUT_DIR/$TEST_FOLDER/"
