#!/usr/bin/env bash
# Continued pre-training with SpanBERT's objective (span masking + span boundary
# objective): raw text -> binarized folder -> fairseq-train. docs/PRETRAIN.md.
#
# Inputs (environment variables, defaults in brackets):
#   TRAIN_TEXT     raw text, one paragraph (or sentence) a line, an empty line between
#                  documents (as ../shared/data/wikipedia; .gz too): one file, several
#                  (separated by spaces), or a folder of them (its files, by name).
#                  Several files are a corpus in shards: each is binarized into its own
#                  folder DATA_DIR/shard-NNN (SHARD_JOBS at a time), trained over in
#                  turn, one shard an epoch (colon-joined --data)              [required]
#   VALID_TEXT     raw validation text, same form (one file)                      [required]
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
#   NGRAMS         n-gram dictionary of the segmentation; empty: the packaged one;
#                  count: one counted over all of TRAIN_TEXT (kept in
#                  DATA_DIR.ngrams.txt.gz; delete it to count again)                  []
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
#   SHARD_JOBS     shards binarized at once, WORKERS shared among them  [min(WORKERS, shards)]
#   DATA_DIR       binarized folder (several files: its shard-NNN folders); prepared when
#                  missing; a finished shard is kept on relaunch, a half-written one redone
#                  [data-bin/pretrain/<TRAIN_TEXT name>, or .../<model>/... with MODEL_DIR]
#   PREPARE_ONLY   1: stop once the data is prepared (no training)                  [0]
#   OUT_DIR        checkpoints/, tensorboard/, train.log, results.json (losses of the
#                  last validation, and the best loss, checkpoint_best.pt's)
#                  [runs/pretrain/<TRAIN_TEXT name>-$SPAN_MASKING, or -$MASKING when not span]
#   NUM_GPUS       GPUs to train on (more than 1: torchrun); 0 = CPU  [all visible]
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE, DIST_TIMEOUT, MAX_RESTARTS
#                  several processes or nodes (torchrun): docs/DISTRIBUTED.md
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
PREPARE_ONLY=${PREPARE_ONLY:-0}

count_gpus "$@"

# ---- check the inputs before spending any time -------------------------------------
[ -n "$TRAIN_TEXT" ] && [ -n "$VALID_TEXT" ] || die "set TRAIN_TEXT and VALID_TEXT (raw text files, one paragraph a line)"
# TRAIN_TEXT: a folder (its files, by name, hidden ones apart), or files separated by spaces.
train_files=()
if [ -d "$TRAIN_TEXT" ]; then
    while IFS= read -r -d '' f; do train_files+=("$f"); done \
        < <(find "$TRAIN_TEXT" -maxdepth 1 -type f ! -name '.*' -print0 | LC_ALL=C sort -z)
    [ ${#train_files[@]} -ge 1 ] || die "TRAIN_TEXT=$TRAIN_TEXT is a folder without files"
else
    read -r -a train_files <<< "$TRAIN_TEXT"
fi
for f in "${train_files[@]}" "$VALID_TEXT"; do
    [ -f "$f" ] || die "$f does not exist"
    [ -s "$f" ] || die "$f is empty: span masking needs text"
done
case "$MASKING" in span|whole-word|token) ;; *) die "MASKING=$MASKING: expected span, whole-word or token" ;; esac
case "$SPAN_MASKING" in geometric|ngram) ;; *) die "SPAN_MASKING=$SPAN_MASKING: expected geometric or ngram" ;; esac
case "$BREAK_MODE" in complete_doc|complete|eos|none) ;; *) die "BREAK_MODE=$BREAK_MODE: expected complete_doc, complete, eos or none" ;; esac
case "$PREPARE_ONLY" in 0|1) ;; *) die "PREPARE_ONLY=$PREPARE_ONLY: expected 1 (prepare the data, no training) or 0" ;; esac
[ -z "$NGRAMS" ] || [ "$NGRAMS" = count ] || [ -f "$NGRAMS" ] || die "NGRAMS=$NGRAMS does not exist (a dictionary file, count, or empty for the packaged one)"
[[ "$WORKERS" =~ ^[1-9][0-9]*$ ]] || die "WORKERS=$WORKERS: expected a whole number of processes"
use_pretrained_encoder "$@"
need_gpt2_files
ARCH=${ARCH:-$([ -n "$MODEL_DIR" ] && echo roberta_spanbert || echo roberta_spanbert_base)}
stem() { local n; n=$(basename "$1"); n=${n%.gz}; echo "${n%.*}"; }
shards=${#train_files[@]}
if [ -d "$TRAIN_TEXT" ]; then name=$(basename "$TRAIN_TEXT")
elif [ "$shards" = 1 ]; then name=$(stem "${train_files[0]}")
else name=$(stem "${train_files[0]}")-$shards-shards
fi
prefix=${MODEL_DIR:+$(basename "$MODEL_DIR")/}
DATA_DIR=${DATA_DIR:-data-bin/pretrain/$prefix$name}
DATA_DIR=${DATA_DIR%/}
OUT_DIR=${OUT_DIR:-runs/pretrain/$prefix$name-$([ "$MASKING" = span ] && echo "$SPAN_MASKING" || echo "$MASKING")}
train_inputs=()
for f in "${train_files[@]}"; do train_inputs+=("TRAIN_TEXT=$f"); done
# One recipe per OUT_DIR, never one that is or holds an input.
[ "$PREPARE_ONLY" = 1 ] || hold_output "$OUT_DIR" OUT_DIR "DATA_DIR=$DATA_DIR" "${train_inputs[@]}" \
    "VALID_TEXT=$VALID_TEXT" "MODEL_DIR=$MODEL_DIR" "ROBERTA_PATH=$ROBERTA_PATH" \
    "BPE_DIR=$([ -n "$MODEL_DIR" ] || echo "$BPE_DIR")" "NGRAMS=$([ "$NGRAMS" = count ] || echo "$NGRAMS")"

# ---- raw text -> binarized folders (tokens and n-gram spans in one pass) ---------------
# Geometric, whole-word and token masking read only the tokens: their span files hold
# one word a span, written without loading an n-gram dictionary. A folder made for
# ngram serves every masking. Empty lines stay (one </s> each): complete_doc's breaks.
ngram=$([ "$MASKING" = span ] && [ "$SPAN_MASKING" = ngram ] && echo 1 || echo 0)
segmentation=$([ "$ngram" = 1 ] && echo greedy || echo none)
if [ "$shards" = 1 ]; then folders=("$DATA_DIR")
else folders=(); for ((k = 0; k < shards; k++)); do folders+=("$(printf '%s/shard-%03d' "$DATA_DIR" "$k")"); done
fi
for d in "${folders[@]}"; do
    if [ -d "$d" ] && [ "$ngram" = 1 ] && [ -f "$d/segmentation" ] \
            && [ "$(cat "$d/segmentation")" != greedy ]; then
        die "$d was prepared without n-gram spans (for SPAN_MASKING=geometric, or MASKING whole-word or token): delete it or set DATA_DIR"
    fi
done
# A folder of one file made before the data record (no provenance.json) is used as it is.
legacy=$([ "$shards" = 1 ] && [ -d "$DATA_DIR" ] && [ ! -f "$DATA_DIR/provenance.json" ] && echo 1 || echo 0)
if [ "$legacy" = 0 ]; then
    # The folders are built whole by span-preprocess pretrain (each locks its own and
    # replaces what a killed build left); one that is finished and made from the same
    # text and settings is kept (--keep). Several files: DATA_DIR is held meanwhile.
    if [ "$shards" -gt 1 ]; then
        hold_output "$DATA_DIR" DATA_DIR "${train_inputs[@]}" "VALID_TEXT=$VALID_TEXT" \
            "MODEL_DIR=$MODEL_DIR" "BPE_DIR=$([ -n "$MODEL_DIR" ] || echo "$BPE_DIR")" \
            "NGRAMS=$([ "$NGRAMS" = count ] || echo "$NGRAMS")"
    fi
    ngram_args=()
    if [ "$ngram" = 1 ] && [ "$NGRAMS" = count ]; then
        # One dictionary over all of the corpus, in the encoder's word scheme.
        words=gpt2
        case " ${encoder_args[*]} " in
            *" wordpiece "*) words=bert ;;
            *" sentencepiece-line "*) words=spm ;;
        esac
        counted=$DATA_DIR.ngrams.txt.gz
        if [ ! -f "$counted" ]; then
            echo "counting n-grams over ${train_files[*]} into $counted"
            mkdir -p "$(dirname "$counted")"
            span-preprocess ngrams --text "${train_files[@]}" --out "$counted" --words "$words" \
                --workers "$WORKERS" || die "could not count the n-gram dictionary (see above)"
        fi
        ngram_args=(--ngrams "$counted")
    elif [ "$ngram" = 1 ] && [ -n "$NGRAMS" ]; then
        ngram_args=(--ngrams "$NGRAMS")
    fi
    build() {  # folder, train text, more arguments; WORKERS_EACH processes
        span-preprocess pretrain --keep --out "$1" --train "$2" "${@:3}" "${encoder_args[@]}" \
            --srcdict "$SRCDICT" ${ngram_args[@]+"${ngram_args[@]}"} --segmentation "$segmentation" \
            --workers "$WORKERS_EACH"
    }
    if [ "$shards" = 1 ]; then
        echo "preparing $DATA_DIR from ${train_files[0]} and $VALID_TEXT"
        WORKERS_EACH=$WORKERS
        build "$DATA_DIR" "${train_files[0]}" --valid "$VALID_TEXT" || die "could not prepare $DATA_DIR (see above)"
    else
        jobs_at_once=${SHARD_JOBS:-$(( WORKERS < shards ? WORKERS : shards ))}
        [[ "$jobs_at_once" =~ ^[1-9][0-9]*$ ]] || die "SHARD_JOBS=$jobs_at_once: expected a whole number"
        WORKERS_EACH=$(( WORKERS / jobs_at_once )); [ "$WORKERS_EACH" -ge 1 ] || WORKERS_EACH=1
        echo "preparing $shards shards in $DATA_DIR, $jobs_at_once at a time ($WORKERS_EACH processes each)"
        status=$(mktemp -d)  # one file per shard: its build's exit status
        for ((k = 0; k < shards; k++)); do
            while [ "$(jobs -rp | wc -l)" -ge "$jobs_at_once" ]; do wait -n || true; done
            if grep -qsvx 0 "$status"/*; then break; fi  # a build failed: start no more
            # The first shard holds the validation split: fairseq validates on the
            # first folder of --data.
            valid_args=(); [ "$k" != 0 ] || valid_args=(--valid "$VALID_TEXT")
            ( rc=0; build "${folders[$k]}" "${train_files[$k]}" ${valid_args[@]+"${valid_args[@]}"} || rc=$?
              echo "$rc" > "$status/$k" ) &
        done
        wait
        failed=
        for ((k = 0; k < shards; k++)); do
            [ "$(cat "$status/$k" 2>/dev/null)" = 0 ] || failed=1
        done
        rm -rf "$status"
        [ -z "$failed" ] || die "could not prepare every shard of $DATA_DIR (see above); a relaunch keeps the finished ones"
    fi
fi
for d in "${folders[@]}"; do same_vocabulary "$d/dict.txt"; done
if [ "$PREPARE_ONLY" = 1 ]; then
    echo "data prepared: $(IFS=:; echo "${folders[*]}")"
    exit 0
fi
DATA=$(IFS=:; echo "${folders[*]}")  # several shards: one a epoch, in turn

# ---- pre-train ------------------------------------------------------------------------
args=(
    "$DATA" --user-dir "$ROOT/span_plugin"
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
train_resumably "${args[@]}" "$@" 2>&1 | tee -a "$OUT_DIR/train$NODE_SUFFIX.log"
only_node_rank_zero

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
