#!/usr/bin/env bash
# Extractive question answering (SQuAD 1.1/2.0, MRQA) with a boundary or span head
# (docs/QA.md). Same conventions as recipes/glue/common.sh and recipes/ner/conll2003.sh.
#
# Inputs (environment variables, defaults in brackets):
#   TRAIN_FILE     SQuAD JSON or MRQA JSON Lines (.jsonl, .jsonl.gz) to train on
#   VALID_FILE     the same to evaluate on
#                  [neither given: SQUAD_DEV split by article, the first SPLIT_ARTICLES
#                  articles to train, the rest to evaluate]
#   SQUAD_DEV      the official dev-v1.1.json                 [../shared/data/squad/dev-v1.1.json]
#   SPLIT_ARTICLES articles of SQUAD_DEV to train on           [38]
#   HEAD           boundary: start/end logits (BERT, SpanBERT) | sf: the same over
#                  [token; conv within its n-gram span] (token-level Span Fine-tuning) |
#                  span: candidate spans scored from [start; end; self-attentive]
#                  representations                                          [boundary]
#   MAX_POSITIONS  tokens per window (<s> question </s></s> passage </s>)     [384]
#   DOC_STRIDE     tokens consecutive windows of a long passage share         [128]
#   MAX_ANSWER_TOKENS  longest answer in tokens                               [30]
#   NULL_THRESHOLD SQuAD 2.0: no-answer margin above which the answer is "" [0]
#   ROBERTA_PATH   pretrained roberta.{base,large}/model.pt                   []
#   MODEL_DIR      a converted BERT-family model (span-convert bert)
#                  [neither given: the packaged all-MiniLM-L6-v2 (recipes/lib.sh)]
#   FROM_SCRATCH   1: a model from random weights (smoke runs)                [0]
#   BPE_DIR        GPT-2 BPE folder (ROBERTA_PATH, FROM_SCRATCH)              [gpt2_bpe]
#   SEED [1]  LR [5e-05]  BATCH_SIZE [16 questions]  EPOCHS [2]  WARMUP [0.1]
#   DATA_DIR       the QA folder; prepared when missing
#                  [data-bin/<model>/qa-<train file>-<MAX_POSITIONS>-<DOC_STRIDE>]
#   OUT_DIR        checkpoints/, tensorboard/, predictions.json (the official format),
#                  nbest.json, results.json (EM/F1 of checkpoint_best.pt on VALID_FILE)
#                  [runs/<model>/qa-$HEAD; -seed$SEED]
#   NUM_GPUS       GPUs to train on (more than 1: torchrun; fp16 on GPUs); 0 = CPU [all visible]
# Extra arguments go to fairseq-train last, so they override:
#   FROM_SCRATCH=1 recipes/qa/squad.sh --cpu --max-update 5   is a smoke run.
# Relaunching resumes checkpoint_last.pt.

set -euo pipefail
RECIPE_NAME=recipes/qa/squad.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/recipes/lib.sh"

SQUAD_DEV=${SQUAD_DEV:-$ROOT/../shared/data/squad/dev-v1.1.json}
SPLIT_ARTICLES=${SPLIT_ARTICLES:-38}
TRAIN_FILE=${TRAIN_FILE:-}
VALID_FILE=${VALID_FILE:-}
HEAD=${HEAD:-boundary}
MAX_POSITIONS=${MAX_POSITIONS:-384}
DOC_STRIDE=${DOC_STRIDE:-128}
MAX_ANSWER_TOKENS=${MAX_ANSWER_TOKENS:-30}
NULL_THRESHOLD=${NULL_THRESHOLD:-0}
ROBERTA_PATH=${ROBERTA_PATH:-}
MODEL_DIR=${MODEL_DIR:-}
BPE_DIR=${BPE_DIR:-gpt2_bpe}
SEED=${SEED:-1}
LR=${LR:-5e-05}
BATCH_SIZE=${BATCH_SIZE:-16}
EPOCHS=${EPOCHS:-2}
WARMUP=${WARMUP:-0.1}
count_gpus "$@"

case "$HEAD" in boundary|sf|span) ;; *) die "HEAD=$HEAD: expected boundary, sf or span" ;; esac
use_pretrained_encoder "$@"
prefix=${MODEL_DIR:+$(basename "$MODEL_DIR")/}

if [ -z "$TRAIN_FILE" ] && [ -z "$VALID_FILE" ]; then
    [ -f "$SQUAD_DEV" ] || die "SQUAD_DEV=$SQUAD_DEV not found: give TRAIN_FILE and VALID_FILE, or SQUAD_DEV"
    split_dir=data-bin/${prefix}squad-dev-split$SPLIT_ARTICLES
    if [ ! -f "$split_dir/valid.json" ]; then
        mkdir -p "$split_dir"
        span-preprocess qa-split "$SQUAD_DEV" --first "$SPLIT_ARTICLES" \
            --out-first "$split_dir/train.json" --out-rest "$split_dir/valid.json"
    fi
    TRAIN_FILE=$split_dir/train.json
    VALID_FILE=$split_dir/valid.json
fi
for f in "$TRAIN_FILE" "$VALID_FILE"; do
    [ -f "$f" ] || die "$f not found: TRAIN_FILE and VALID_FILE are SQuAD JSON or MRQA JSON Lines files"
done
need_gpt2_files
name=$(basename "$TRAIN_FILE"); name=${name%%.*}
DATA_DIR=${DATA_DIR:-data-bin/${prefix}qa-$(basename "$(dirname "$TRAIN_FILE")")-$name-$MAX_POSITIONS-$DOC_STRIDE}
OUT_DIR=${OUT_DIR:-runs/${prefix}qa-$HEAD$([ "$SEED" = 1 ] || echo "-seed$SEED")}

if [ ! -d "$DATA_DIR" ]; then
    rm -rf "$DATA_DIR.tmp"
    echo "preparing $DATA_DIR from $TRAIN_FILE and $VALID_FILE"
    span-preprocess qa --out "$DATA_DIR.tmp" --train "$TRAIN_FILE" --valid "$VALID_FILE" \
        --max-positions "$MAX_POSITIONS" --doc-stride "$DOC_STRIDE" --name squad \
        "${encoder_args[@]}" --srcdict "$SRCDICT" --workers 1
    mv "$DATA_DIR.tmp" "$DATA_DIR"  # a half-written folder is never taken for a prepared one
fi
same_vocabulary "$DATA_DIR/input0/dict.txt"
count_updates "$DATA_DIR/raw/train.jsonl" "$@"

args=(
    "$DATA_DIR" --user-dir "$ROOT/span_plugin"
    --task span_qa --criterion span_qa --arch roberta_qa --qa-head "$HEAD"
    --max-answer-tokens "$MAX_ANSWER_TOKENS" --null-threshold "$NULL_THRESHOLD"
    --max-positions 512 "${size_args[@]}" --seed "$SEED"
)
f1_finetune_args
train_resumably "${args[@]}" "${finetune_args[@]}" "$@"

span-predict --checkpoint "$OUT_DIR/checkpoints/checkpoint_best.pt" --data "$DATA_DIR" \
    --input "$VALID_FILE" --output "$OUT_DIR/predictions.json" --nbest "$OUT_DIR/nbest.json" \
    --results "$OUT_DIR/results.json"
echo "results: $OUT_DIR/results.json; predictions: $OUT_DIR/predictions.json"
