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
#   VALID_QUESTIONS, VALID_ARTICLES
#                  validate (select checkpoint_best.pt) on this many questions, or
#                  articles, of VALID_FILE (a SQuAD JSON file) drawn by VALID_SEED and kept
#                  in file order, instead of all of it (about 2,000 questions for the
#                  default split: slow on a CPU). The sample is written beside DATA_DIR
#                  and records what it holds (span-preprocess qa-sample); results.json
#                  still scores all of VALID_FILE                         [all of it]
#   VALID_SEED     seed of the sample, the same for every training SEED       [1]
#   HEAD           boundary: start/end logits (BERT, SpanBERT) | sf: the same over
#                  [token; conv within its n-gram span] (token-level Span Fine-tuning) |
#                  span: candidate spans scored from [start; end; self-attentive]
#                  representations                                          [boundary]
#   MAX_POSITIONS  tokens per window (<s> question </s></s> passage </s>)     [384]
#   DOC_STRIDE     tokens consecutive windows of a long passage share         [128]
#   MAX_ANSWER_TOKENS  longest answer in tokens                               [30]
#   NULL_THRESHOLD SQuAD 2.0: no-answer margin above which the answer is "" [0]
#   ANSWER_BOUNDARIES  word: answers start and end on word boundaries of the context;
#                  token: any token span (recorded in the checkpoint: validation,
#                  span-predict and the hub decode alike)                     [word]
#   ROBERTA_PATH   pretrained roberta.{base,large}/model.pt                   []
#   MODEL_DIR      a converted BERT-family model (span-convert bert)
#                  [neither given: the packaged all-MiniLM-L6-v2 (recipes/lib.sh)]
#   FROM_SCRATCH   1: a model from random weights (smoke runs)                [0]
#   BPE_DIR        GPT-2 BPE folder (ROBERTA_PATH, FROM_SCRATCH)              [gpt2_bpe]
#   SEED [1]  LR [5e-05]  BATCH_SIZE [16 questions]  EPOCHS [2]  WARMUP [0.1]
#   DATA_DIR       the QA folder; prepared when missing
#                  [data-bin/<model>/qa-<train file>-<MAX_POSITIONS>-<DOC_STRIDE>, then
#                  -valid<N>q-seed<VALID_SEED> (or <N>a) for a validation sample]
#   OUT_DIR        checkpoints/, tensorboard/, train.log, predictions.json (the official
#                  format), nbest.json, results.json (the official scores of
#                  checkpoint_best.pt on all of VALID_FILE: exact_match, f1, ...)
#                  [runs/<model>/qa-$HEAD; -token for ANSWER_BOUNDARIES=token; -seed$SEED]
#   WORKERS        preprocessing processes                                    [nproc]
#   NUM_GPUS       GPUs to train on (more than 1: torchrun; fp16 on GPUs); 0 = CPU [all visible]
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE, DIST_TIMEOUT, MAX_RESTARTS
#                  several processes or nodes (torchrun): docs/DISTRIBUTED.md
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
ANSWER_BOUNDARIES=${ANSWER_BOUNDARIES:-word}
VALID_QUESTIONS=${VALID_QUESTIONS:-}
VALID_ARTICLES=${VALID_ARTICLES:-}
VALID_SEED=${VALID_SEED:-1}
WORKERS=${WORKERS:-$(nproc)}
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
case "$ANSWER_BOUNDARIES" in word|token) ;; *) die "ANSWER_BOUNDARIES=$ANSWER_BOUNDARIES: expected word or token" ;; esac
[ -z "$VALID_QUESTIONS" ] || [ -z "$VALID_ARTICLES" ] \
    || die "give VALID_QUESTIONS or VALID_ARTICLES, not both"
for n in "$VALID_QUESTIONS$VALID_ARTICLES" "$VALID_SEED" "$WORKERS"; do
    [ -z "$n" ] || [[ "$n" =~ ^[0-9]+$ ]] || die "VALID_QUESTIONS, VALID_ARTICLES, VALID_SEED and WORKERS are whole numbers (got '$n')"
done
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
sample=
if [ -n "$VALID_QUESTIONS" ]; then sample=-valid${VALID_QUESTIONS}q-seed$VALID_SEED
elif [ -n "$VALID_ARTICLES" ]; then sample=-valid${VALID_ARTICLES}a-seed$VALID_SEED; fi
DATA_DIR=${DATA_DIR:-data-bin/${prefix}qa-$(basename "$(dirname "$TRAIN_FILE")")-$name-$MAX_POSITIONS-$DOC_STRIDE$sample}
run_suffix=$([ "$ANSWER_BOUNDARIES" = word ] || echo "-$ANSWER_BOUNDARIES")$([ "$SEED" = 1 ] || echo "-seed$SEED")
OUT_DIR=${OUT_DIR:-runs/${prefix}qa-$HEAD$run_suffix}
# One recipe per OUT_DIR, never one that is or holds an input.
hold_output "$OUT_DIR" OUT_DIR "DATA_DIR=$DATA_DIR" "TRAIN_FILE=$TRAIN_FILE" "VALID_FILE=$VALID_FILE" \
    "MODEL_DIR=$MODEL_DIR" "ROBERTA_PATH=$ROBERTA_PATH" "BPE_DIR=$([ -n "$MODEL_DIR" ] || echo "$BPE_DIR")"

# ---- the questions validation reads: all of VALID_FILE, or a sample fixed by VALID_SEED --
# (written on every launch: the same inputs give the same bytes)
VALID_SET=$VALID_FILE
if [ -n "$sample" ]; then
    VALID_SET=$DATA_DIR.valid.json
    mkdir -p "$(dirname "$VALID_SET")"
    if [ -n "$VALID_QUESTIONS" ]; then size=(--questions "$VALID_QUESTIONS"); else size=(--articles "$VALID_ARTICLES"); fi
    sampled=$(span-preprocess qa-sample "$VALID_FILE" --out "$VALID_SET" "${size[@]}" \
        --seed "$VALID_SEED") || die "could not sample $VALID_FILE (see above)"
    echo "validation: $sampled"
fi

if [ ! -d "$DATA_DIR" ]; then
    echo "preparing $DATA_DIR from $TRAIN_FILE and $VALID_SET"
    # written whole or not at all, one build at a time (span-preprocess)
    span-preprocess qa --out "$DATA_DIR" --train "$TRAIN_FILE" --valid "$VALID_SET" \
        --max-positions "$MAX_POSITIONS" --doc-stride "$DOC_STRIDE" --name squad \
        "${encoder_args[@]}" --srcdict "$SRCDICT" --workers "$WORKERS"
else
    # A folder made earlier (or by hand) must hold these questions: its record's hashes
    # of the files it was built from.
    python - "$DATA_DIR" "$TRAIN_FILE" "$VALID_SET" <<'PY' || die "$DATA_DIR was built from other files (see above): delete it to rebuild it, or set DATA_DIR"
import sys
from span_plugin.preprocess.records import provenance
folder, files = sys.argv[1], dict(zip(("train", "valid"), sys.argv[2:]))
source = (provenance.read_record(folder) or {}).get("source") or {}
for split, path in files.items():
    want = (source.get(split) or {}).get("sha256")
    if want is not None and want != provenance.sha256(path):
        sys.exit(f"{folder}: its {split} split was built from {source[split].get('path')}, "
                 f"not from {path} (another file, or another validation sample)")
PY
fi
same_vocabulary "$DATA_DIR/input0/dict.txt"
count_updates "$DATA_DIR/raw/train.jsonl" "$@"

# ---- fine-tune --------------------------------------------------------------------------
args=(
    "$DATA_DIR" --user-dir "$ROOT/span_plugin"
    --task span_qa --criterion span_qa --arch roberta_qa --qa-head "$HEAD"
    --max-answer-tokens "$MAX_ANSWER_TOKENS" --null-threshold "$NULL_THRESHOLD"
    --answer-boundaries "$ANSWER_BOUNDARIES"
    --max-positions 512 "${size_args[@]}" --seed "$SEED"
)
f1_finetune_args
# fairseq-train's output is kept in train.log: appended by relaunches, started afresh
# when there is no checkpoint to resume.
TRAIN_LOG=$OUT_DIR/train$NODE_SUFFIX.log
mkdir -p "$OUT_DIR"
if ! compgen -G "$OUT_DIR/checkpoints/checkpoint*.pt" >/dev/null; then : > "$TRAIN_LOG"; fi
train_resumably "${args[@]}" "${finetune_args[@]}" "$@" 2>&1 | tee -a "$TRAIN_LOG"
only_node_rank_zero

# ---- the official scores of the best checkpoint on all of VALID_FILE ---------------------
span-predict --checkpoint "$OUT_DIR/checkpoints/checkpoint_best.pt" --data "$DATA_DIR" \
    --input "$VALID_FILE" --output "$OUT_DIR/predictions.json" --nbest "$OUT_DIR/nbest.json" \
    --results "$OUT_DIR/results.json"

cat <<EOF
outputs of $RECIPE_NAME:
  data folder:   $DATA_DIR (training: $TRAIN_FILE)
  validation:    ${sampled:-all of $VALID_FILE}
  checkpoints:   $OUT_DIR/checkpoints/ (checkpoint_best.pt: the best validation f1)
  training log:  $TRAIN_LOG
  tensorboard:   $OUT_DIR/tensorboard/
  predictions:   $OUT_DIR/predictions.json (the official format), $OUT_DIR/nbest.json
  results:       $OUT_DIR/results.json (checkpoint_best.pt on all of $VALID_FILE, answers at $ANSWER_BOUNDARIES boundaries)
EOF
