#!/usr/bin/env bash
# CoNLL-2003 NER with spans: the token head (baseline), the token-level Span Fine-tuning
# head, or span labeling (docs/NER.md). Same conventions as recipes/glue/common.sh.
#
# Inputs (environment variables, defaults in brackets):
#   CONLL_DIR      folder with train.txt, valid.txt, test.txt (CoNLL columns,
#                  word first, tag last)                             [conll2003]
#   TAG_SCHEME     iob1 | iob2 | bioes: the files' tags (stored as IOB2)  [iob2]
#   HEAD           token: linear layer per token (task span_tagging, baseline)
#                  sf: within-span CNN joined with the token features (span_tagging)
#                  span: span labeling, spans of up to MAX_SPAN_WORDS words  [sf]
#   MAX_SPAN_WORDS L of span labeling                                  [8]
#   NEGATIVE_SAMPLING  span labeling: 0 trains on every candidate span; r > 0 on the
#                  entities plus round(r * words) random non-entity spans  [0]
#   ROBERTA_PATH   pretrained roberta.{base,large}/model.pt            []
#   MODEL_DIR      a converted model (span-convert bert: WordPiece; span-convert
#                  roberta: GPT-2 BPE or sentencepiece), sizes read from the checkpoint;
#                  replaces ROBERTA_PATH and BPE_DIR
#                  [neither given: the packaged all-MiniLM-L6-v2 (recipes/lib.sh)]
#   FROM_SCRATCH   1: neither, a model from random weights (smoke runs)  [0]
#   BPE_DIR        GPT-2 BPE folder: encoder.json, vocab.bpe, dict.txt  [gpt2_bpe]
#   NGRAMS, SEGMENTATION   n-gram dictionary (empty: packaged) and greedy | random |
#                  none                                                [, greedy]
#   SEED [1]  LR [3e-05]  BATCH_SIZE [32]  EPOCHS [5]  WARMUP [0.06: share of updates]
#   DATA_DIR       the tagging folder; prepared when missing
#                  [data-bin/conll2003, MODEL_DIR: data-bin/<model>/conll2003]
#   OUT_DIR        checkpoints/, tensorboard/, results.json (dev and test P/R/F1 of
#                  checkpoint_best.pt), predictions/{valid,test}.conll (the source files
#                  with the predicted tag appended: conlleval's input)
#                  [runs/conll2003-$HEAD, runs/<model>/conll2003-$HEAD; -seed$SEED]
#   NUM_GPUS       GPUs to train on; 0 = CPU                           [all visible]
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE, DIST_TIMEOUT, MAX_RESTARTS
#                  several processes or nodes (torchrun): docs/DISTRIBUTED.md
#   BF16           1: bfloat16 (--bf16, no loss scaling) instead of fp16 on GPUs  [0]
#   WORKERS        preprocessing processes                             [nproc]
# Extra arguments go to fairseq-train last, so they override:
#   recipes/ner/conll2003.sh --cpu --max-update 5   is a smoke run.
# Relaunching resumes checkpoint_last.pt.

set -euo pipefail
RECIPE_NAME=recipes/ner/conll2003.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/recipes/lib.sh"

CONLL_DIR=${CONLL_DIR:-conll2003}
TAG_SCHEME=${TAG_SCHEME:-iob2}
HEAD=${HEAD:-sf}
MAX_SPAN_WORDS=${MAX_SPAN_WORDS:-8}
NEGATIVE_SAMPLING=${NEGATIVE_SAMPLING:-0}
ROBERTA_PATH=${ROBERTA_PATH:-}
MODEL_DIR=${MODEL_DIR:-}
BPE_DIR=${BPE_DIR:-gpt2_bpe}
NGRAMS=${NGRAMS:-}
SEGMENTATION=${SEGMENTATION:-greedy}
SEED=${SEED:-1}
LR=${LR:-3e-05}
BATCH_SIZE=${BATCH_SIZE:-32}
EPOCHS=${EPOCHS:-5}
WARMUP=${WARMUP:-0.06}
WORKERS=${WORKERS:-$(nproc)}
count_gpus "$@"

# ---- check the inputs before spending any time -------------------------------------
case "$HEAD" in
    token|sf) TASK_NAME=span_tagging; head_args=(--tagging-head "$HEAD") ;;
    span) TASK_NAME=span_labeling
          head_args=(--max-span-words "$MAX_SPAN_WORDS" --negative-sampling "$NEGATIVE_SAMPLING") ;;
    *) die "HEAD=$HEAD: expected token, sf or span" ;;
esac
[ -z "$NGRAMS" ] || [ -f "$NGRAMS" ] || die "NGRAMS=$NGRAMS does not exist"
use_pretrained_encoder "$@"
prefix=${MODEL_DIR:+$(basename "$MODEL_DIR")/}
seg_suffix=$([ "$SEGMENTATION" = greedy ] || echo "-$SEGMENTATION")
DATA_DIR=${DATA_DIR:-data-bin/${prefix}conll2003$seg_suffix}
OUT_DIR=${OUT_DIR:-runs/${prefix}conll2003-$HEAD$seg_suffix$([ "$SEED" = 1 ] || echo "-seed$SEED")}
# One recipe per OUT_DIR, never one that is or holds an input.
hold_output "$OUT_DIR" OUT_DIR "DATA_DIR=$DATA_DIR" "CONLL_DIR=$CONLL_DIR" "MODEL_DIR=$MODEL_DIR" \
    "ROBERTA_PATH=$ROBERTA_PATH" "BPE_DIR=$([ -n "$MODEL_DIR" ] || echo "$BPE_DIR")" "NGRAMS=$NGRAMS"

# ---- the tagging folder --------------------------------------------------------------
if [ ! -d "$DATA_DIR" ]; then
    for s in train valid test; do
        [ -f "$CONLL_DIR/$s.txt" ] || die "$CONLL_DIR/$s.txt not found: set CONLL_DIR to the folder with train.txt, valid.txt, test.txt"
    done
    need_gpt2_files
    echo "preparing $DATA_DIR from $CONLL_DIR"
    # written whole or not at all, one build at a time (span-preprocess)
    span-preprocess conll --out "$DATA_DIR" --name conll2003 --train "$CONLL_DIR/train.txt" \
        --valid "$CONLL_DIR/valid.txt" --test "$CONLL_DIR/test.txt" --tag-scheme "$TAG_SCHEME" \
        "${encoder_args[@]}" --srcdict "$SRCDICT" ${NGRAMS:+--ngrams "$NGRAMS"} \
        --segmentation "$SEGMENTATION" --workers "$WORKERS"
fi
# An existing folder is checked by the task when it loads it (alignment of tokens, spans,
# words and tags; every file against provenance.json), before any training.
same_vocabulary "$DATA_DIR/input0/dict.txt"
count_updates "$DATA_DIR/raw/train.input0" "$@"

# ---- fine-tune --------------------------------------------------------------------------
args=(
    "$DATA_DIR" --user-dir "$ROOT/span_plugin"
    --task "$TASK_NAME" --criterion "$TASK_NAME" --arch roberta_tagging "${head_args[@]}"
    --init-token 0 --max-positions 512 "${size_args[@]}" --seed "$SEED"
)
f1_finetune_args
train_resumably "${args[@]}" "${finetune_args[@]}" "$@"
only_node_rank_zero

# ---- dev and test results of the best checkpoint, CoNLL prediction files ---------------
span-predict --checkpoint "$OUT_DIR/checkpoints/checkpoint_best.pt" \
    --data "$DATA_DIR" --split valid test \
    --conll-out "$OUT_DIR/predictions/valid.conll" "$OUT_DIR/predictions/test.conll" \
    --results "$OUT_DIR/results.json"
echo "results: $OUT_DIR/results.json; predictions: $OUT_DIR/predictions/"
