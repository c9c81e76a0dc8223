#!/usr/bin/env bash
# Continued pre-training with SpanBERT's objective (span masking + span boundary
# objective): raw text -> binarized folder -> fairseq-train. docs/PRETRAIN.md.
#
# Inputs (environment variables, defaults in brackets):
#   TRAIN_TEXT     raw text, one paragraph (or sentence) a line, an empty line between
#                  documents (as ../shared/data/wikipedia)                         [required]
#   VALID_TEXT     raw validation text, same form                                  [required]
#   ROBERTA_PATH   roberta.{base,large}/model.pt to continue from (GPT-2 BPE)      []
#   MODEL_DIR      a span-convert folder (model.pt, dict.txt, tokenizer) to continue
#                  from (WordPiece); replaces ROBERTA_PATH and BPE_DIR
#                  [neither given: the packaged all-MiniLM-L6-v2 (recipes/lib.sh)]
#   FROM_SCRATCH   1: neither, a model trained from random weights (smoke runs)    [0]
#   BPE_DIR        folder with encoder.json, vocab.bpe, dict.txt (GPT-2)           [gpt2_bpe]
#   ARCH           roberta_spanbert_base | roberta_spanbert_large; MODEL_DIR: roberta_spanbert
#                  with the sizes read from the checkpoint          [roberta_spanbert_base]
#   MASKING        span (SpanBERT, spans by SPAN_MASKING) | whole-word (BERT's whole-word
#                  masking) | token (BERT's sub-word token masking)                 [span]
#   SPAN_MASKING   geometric (SpanBERT) | ngram (the n-gram segmenter's spans)   [geometric]
#   NGRAMS         n-gram dictionary of the segmentation; empty: the packaged one  []
#   TOKENS_PER_SAMPLE  block size, <s> included                                     [512]
#   BREAK_MODE     fairseq's --sample-break-mode: complete_doc (whole lines, blocks never
#                  cross an empty line) | complete | eos | none (fill every block) [complete_doc]
#   BATCH_SIZE     blocks per GPU and step                                          [16]
#   UPDATE_FREQ    steps per update (batch = BATCH_SIZE x UPDATE_FREQ x GPUs)       [1]
#   LR             peak learning rate (polynomial decay, WARMUP_UPDATES of warm-up) [1e-4]
#   TOTAL_UPDATES  [10000]     WARMUP_UPDATES [6% of TOTAL_UPDATES]
#   SAVE_INTERVAL  updates between checkpoints and validations                      [1000]
#   SBO_WEIGHT     weight of the span boundary objective (0: the masked LM alone)   [1.0]
#   SEED           [1]      WORKERS   preprocessing processes [nproc]
#   DATA_DIR       binarized folder; prepared when missing
#                  [data-bin/pretrain/<TRAIN_TEXT name>, or .../<model>/... with MODEL_DIR]
#   OUT_DIR        checkpoints/, tensorboard/, train.log, results.json (losses of the
#                  last validation, and the best loss, checkpoint_best.pt's)
#                  [runs/pretrain/<TRAIN_TEXT name>-$SPAN_MASKING, or -$MASKING when not span]
#   NUM_GPUS       GPUs to train on (more than 1: torchrun); 0 = CPU  [all visible]
#   BF16           1: bfloat16 (--bf16, no loss scaling) instead of fp16 on GPUs  [0]
# Extra arguments go to fairseq-train last, so they override:
#   TRAIN_TEXT=t.txt VALID_TEXT=v.txt recipes/pretrain/spanbert.sh --cpu --max-update 4
# is a smoke run. A relaunch resumes from checkpoint_last.pt (the newest intact one).

set -euo pipefail

RECIPES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$RECIPES/../.." && pwd)
RECIPE_NAME=recipes/pretrain/spanbert.sh
source "$ROOT/recipes/lib.sh"

TRAIN_TEXT=${TRAIN_TEXT:-}
VALID_TEXT=${VALID_TEXT:-}
ROBERTA_PATH=${ROBERTA_PATH:-}
MODEL_DIR=${MODEL_DIR:-}
BPE_DIR=${BPE_DIR:-gpt2_bpe}
MASKING=${MASKING:-span}
SPAN_MASKING=${SPAN_MASKING:-geometric}
NGRAMS=${NGRAMS:-}
TOKENS_PER_SAMPLE=${TOKENS_PER_SAMPLE:-512}
BREAK_MODE=${BREAK_MODE:-complete_doc}
BATCH_SIZE=${BATCH_SIZE:-16}
UPDATE_FREQ=${UPDATE_FREQ:-1}
LR=${LR:-1e-4}
TOTAL_UPDATES=${TOTAL_UPDATES:-10000}
WARMUP_UPDATES=${WARMUP_UPDATES:-$(( TOTAL_UPDATES * 6 / 100 ))}
SAVE_INTERVAL=${SAVE_INTERVAL:-1000}
SBO_WEIGHT=${SBO_WEIGHT:-1.0}
SEED=${SEED:-1}
WORKERS=${WORKERS:-$(nproc)}

count_gpus "$@"

# ---- check the inputs before spending any time -------------------------------------
[ -n "$TRAIN_TEXT" ] && [ -n "$VALID_TEXT" ] || die "set TRAIN_TEXT and VALID_TEXT (raw text files, one paragraph a line)"
for f in "$TRAIN_TEXT" "$VALID_TEXT"; do
    [ -f "$f" ] || die "$f does not exist"
    [ -s "$f" ] || die "$f is empty: span masking needs text"
done
case "$MASKING" in span|whole-word|token) ;; *) die "MASKING=$MASKING: expected span, whole-word or token" ;; esac
case "$SPAN_MASKING" in geometric|ngram) ;; *) die "SPAN_MASKING=$SPAN_MASKING: expected geometric or ngram" ;; esac
case "$BREAK_MODE" in complete_doc|complete|eos|none) ;; *) die "BREAK_MODE=$BREAK_MODE: expected complete_doc, complete, eos or none" ;; esac
[ -z "$NGRAMS" ] || [ -f "$NGRAMS" ] || die "NGRAMS=$NGRAMS does not exist"
use_pretrained_encoder "$@"
need_gpt2_files
ARCH=${ARCH:-$([ -n "$MODEL_DIR" ] && echo roberta_spanbert || echo roberta_spanbert_base)}
name=$(basename "$TRAIN_TEXT"); name=${name%.*}
prefix=${MODEL_DIR:+$(basename "$MODEL_DIR")/}
DATA_DIR=${DATA_DIR:-data-bin/pretrain/$prefix$name}
OUT_DIR=${OUT_DIR:-runs/pretrain/$prefix$name-$([ "$MASKING" = span ] && echo "$SPAN_MASKING" || echo "$MASKING")}
# One recipe per OUT_DIR, never one that is or holds an input.
hold_output "$OUT_DIR" OUT_DIR "DATA_DIR=$DATA_DIR" "TRAIN_TEXT=$TRAIN_TEXT" "VALID_TEXT=$VALID_TEXT" \
    "MODEL_DIR=$MODEL_DIR" "ROBERTA_PATH=$ROBERTA_PATH" "BPE_DIR=$([ -n "$MODEL_DIR" ] || echo "$BPE_DIR")" \
    "NGRAMS=$NGRAMS"

# ---- raw text -> binarized folder (tokens and n-gram spans in one pass) ---------------
# Geometric, whole-word and token masking read only the tokens: their span files hold
# one word a span, written without loading an n-gram dictionary. A folder made for
# ngram serves every masking. Empty lines stay (one </s> each): complete_doc's breaks.
ngram=$([ "$MASKING" = span ] && [ "$SPAN_MASKING" = ngram ] && echo 1 || echo 0)
segmentation=$([ "$ngram" = 1 ] && echo greedy || echo none)
if [ -d "$DATA_DIR" ] && [ "$ngram" = 1 ] && [ -f "$DATA_DIR/segmentation" ] \
        && [ "$(cat "$DATA_DIR/segmentation")" != greedy ]; then
    die "$DATA_DIR was prepared without n-gram spans (for SPAN_MASKING=geometric, or MASKING whole-word or token): delete it or set DATA_DIR"
fi
if [ ! -d "$DATA_DIR" ]; then
    # Built in a folder of this process's own, renamed into place at the end; one build
    # of DATA_DIR at a time (a second recipe stops, naming this one), so the folders of
    # killed builds can go.
    hold_output "$DATA_DIR" DATA_DIR "TRAIN_TEXT=$TRAIN_TEXT" "VALID_TEXT=$VALID_TEXT" \
        "MODEL_DIR=$MODEL_DIR" "BPE_DIR=$([ -n "$MODEL_DIR" ] || echo "$BPE_DIR")" "NGRAMS=$NGRAMS"
    rm -rf "$DATA_DIR".tmp.*
    tmp=$DATA_DIR.tmp.$$
    for split in train valid; do
        text=$([ "$split" = train ] && echo "$TRAIN_TEXT" || echo "$VALID_TEXT")
        echo "preparing $DATA_DIR/$split from $text"
        span-preprocess binarize "$text" "$tmp/$split" "${encoder_args[@]}" \
            --srcdict "$SRCDICT" ${NGRAMS:+--ngrams "$NGRAMS"} --segmentation "$segmentation" \
            --workers "$WORKERS"
    done
    # GPT-2 word boundaries are read from the byte strings of the ids (docs/PRETRAIN.md).
    if [ -z "$MODEL_DIR" ]; then cp "$BPE_DIR/encoder.json" "$tmp/encoder.json"; fi
    echo "$segmentation" > "$tmp/segmentation"
    mv -T "$tmp" "$DATA_DIR"  # a half-written folder is never taken for a prepared one
fi
same_vocabulary "$DATA_DIR/dict.txt"

# ---- pre-train ------------------------------------------------------------------------
args=(
    "$DATA_DIR" --user-dir "$ROOT/span_plugin"
    --task spanbert_masked_lm --criterion spanbert_masked_lm --arch "$ARCH" "${size_args[@]}"
    --masking "$MASKING" --span-masking "$SPAN_MASKING" --sbo-weight "$SBO_WEIGHT"
    --tokens-per-sample "$TOKENS_PER_SAMPLE" --sample-break-mode "$BREAK_MODE" --seed "$SEED"
    --batch-size "$BATCH_SIZE" --update-freq "$UPDATE_FREQ" --required-batch-size-multiple 1
    --optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-06 --weight-decay 0.01 --clip-norm 1.0
    --lr-scheduler polynomial_decay --lr "$LR" --total-num-update "$TOTAL_UPDATES"
    --warmup-updates "$WARMUP_UPDATES" --max-update "$TOTAL_UPDATES"
    --dropout 0.1 --attention-dropout 0.1
    --save-interval-updates "$SAVE_INTERVAL" --validate-interval-updates "$SAVE_INTERVAL"
    --keep-interval-updates 2 --no-epoch-checkpoints
    --save-dir "$OUT_DIR/checkpoints" --tensorboard-logdir "$OUT_DIR/tensorboard"
    --log-format simple --log-interval 100
)
# First launch starts from the pretrained weights (fresh SBO head, optimizer, schedule);
# a relaunch resumes checkpoint_last.pt.
if [ -n "$PRETRAINED" ]; then args+=(--finetune-from-model "$PRETRAINED"); fi

mkdir -p "$OUT_DIR"
# The log is kept: results.json comes from its validations.
train_resumably "${args[@]}" "$@" 2>&1 | tee -a "$OUT_DIR/train.log"

# ---- results: the last validation of this run and the best loss so far -----------------
best="$OUT_DIR/checkpoints/checkpoint_best.pt"
python - "$OUT_DIR/train.log" "$best" "$OUT_DIR/results.json" <<'PY'
import json, re, sys
log, best, out = sys.argv[1:]
lines = [l for l in open(log) if "valid on 'valid' subset" in l]
if not lines:
    sys.exit(f"no validation in {log}: nothing to report")
stats = dict(re.findall(r"\| (\w+) ([-\d.]+)", lines[-1]))
keep = {k: float(v) for k, v in stats.items()
        if k in ("loss", "mlm_loss", "sbo_loss", "ppl", "best_loss", "num_updates")}
json.dump({"checkpoint": best, "valid": keep}, open(out, "w"), indent=2)
print(f"{out}: {keep}")
PY
echo "checkpoint: $best (fine-tune it: ROBERTA_PATH=$best recipes/glue/<TASK>.sh, docs/PRETRAIN.md)"
