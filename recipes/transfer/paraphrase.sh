#!/usr/bin/env bash
# Transfer fine-tuning with phrasal and sentential paraphrases (Arase and Tsujii;
# docs/SPAN_PAIRS.md): task span_pair_classification on phrase pairs, then the heads are
# thrown away and the encoder is written where the GLUE recipes take it as their
# starting model, with no conversion step:
#   ROBERTA_PATH=$OUT_DIR/transferred.pt recipes/glue/MRPC.sh          (HEAD=span or plain)
#   MODEL_DIR=$OUT_DIR/transferred recipes/glue/MRPC.sh                 (started from MODEL_DIR)
# The written checkpoint holds no classification heads, so the GLUE run's heads always
# start fresh (fairseq would keep a checkpoint head whose name and shapes match).
# Same conventions as recipes/glue/common.sh.
#
# Inputs (environment variables, defaults in brackets):
#   PAIRS          a pairs JSON Lines file for training (docs/SPAN_PAIRS.md, section 1);
#                  replaces the aligner                                  []
#   PAIRS_VALID    its validation file; with PAIRS and no PAIRS_VALID, the last
#                  VALID_ROWS lines of PAIRS are held out                []
#   VALID_ROWS     see PAIRS_VALID                                       [200]
#   GLUE_DIR, ALIGN_FROM  without PAIRS: the weak aligner (span-preprocess align-pairs)
#                  on $GLUE_DIR/$ALIGN_FROM/train.tsv (MRPC labels 1, STS-B scores >= 4)
#                  for training and dev.tsv for validation      [glue_data, MRPC]
#   EXCLUDE        TSV files with a header (space-separated) whose sentences the aligner
#                  keeps out, compared as text (case, spaces, punctuation ignored): the
#                  TARGET task's dev.tsv and test.tsv, so no evaluation sentence is seen
#                  in transfer (the MSRpar genre of STS-B comes from MRPC), e.g.
#                  ALIGN_FROM=MRPC EXCLUDE="glue_data/STS-B/dev.tsv glue_data/STS-B/test.tsv"
#                  for an STS-B target. When it holds $ALIGN_FROM's own dev.tsv (the
#                  target is the source task), validation is the last VALID_ROWS
#                  paraphrase rows of its train.tsv instead (excluding a file from
#                  itself leaves no rows)                                  []
#   ALIGN_ARGS     more span-preprocess align-pairs options, e.g. --keep-identical
#                  (identical segments as positives too, aligner version 1's data)  []
#   PREPARE_ONLY   1: stop once DATA_DIR is ready (no training)         [0]
#   ROBERTA_PATH   pretrained roberta.{base,large}/model.pt              []
#   MODEL_DIR      a converted BERT-family model (span-convert bert): WordPiece, sizes
#                  read from the checkpoint; replaces ROBERTA_PATH and BPE_DIR
#                  [neither given: the packaged all-MiniLM-L6-v2 (recipes/lib.sh)]
#   FROM_SCRATCH   1: neither, a model from random weights (smoke runs)    [0]
#   BPE_DIR        GPT-2 BPE folder: encoder.json, vocab.bpe, dict.txt    [gpt2_bpe]
#   ARCH           [roberta_span_pair_base; MODEL_DIR: roberta_span_pair]
#   FEATURES       phrase pair vector: max4 (2019) | mean2 (2021)         [max4]
#   PHRASAL_WEIGHT, SENTENTIAL_WEIGHT   loss weights w_p, w_s             [1, 1]
#   SEED [1]  LR [2e-05]  BATCH_SIZE [32]  EPOCHS [2]  WARMUP [0.06: share of updates]
#   DATA_DIR       the span-pair folder; prepared when missing. Its default name is
#                  keyed by what makes the phrase pairs, so another source, EXCLUDE set,
#                  SEED, ALIGN_ARGS or aligner version gets another folder:
#                  [data-bin/transfer-$ALIGN_FROM-s$SEED-<key> or
#                  data-bin/transfer-<PAIRS name>-<key>; MODEL_DIR: data-bin/<model>/...;
#                  key: 8 hex digits of a sha256 over the aligner version, the source,
#                  exclusion and PAIRS files' contents, the seed and ALIGN_ARGS]
#                  An existing folder is used only if its provenance.json names this
#                  run's phrase-pair files (sha256) as its sources; else the recipe stops
#   OUT_DIR        checkpoints/, tensorboard/, aligned/ (the JSON Lines made by the
#                  aligner), transfer_data.txt (the DATA_DIR it trains on: a relaunch on
#                  another one stops), transferred.pt (encoder only, heads stripped) and,
#                  with MODEL_DIR, transferred/ (a MODEL_DIR folder: that model.pt,
#                  dict.txt and the tokenizer)     [runs/transfer-...; -seed$SEED]
#   NUM_GPUS       GPUs to train on; 0 = CPU                           [all visible]
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE, DIST_TIMEOUT, MAX_RESTARTS
#                  several processes or nodes (torchrun): docs/DISTRIBUTED.md
#   BF16           1: bfloat16 (--bf16, no loss scaling) instead of fp16 on GPUs  [0]
#   WORKERS        preprocessing processes                             [nproc]
# Extra arguments go to fairseq-train last, so they override:
#   recipes/transfer/paraphrase.sh --cpu --max-update 4   is a smoke run.
# Relaunching resumes checkpoint_last.pt.

set -euo pipefail
RECIPE_NAME=recipes/transfer/paraphrase.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/recipes/lib.sh"

PAIRS=${PAIRS:-}
PAIRS_VALID=${PAIRS_VALID:-}
VALID_ROWS=${VALID_ROWS:-200}
GLUE_DIR=${GLUE_DIR:-glue_data}
ALIGN_FROM=${ALIGN_FROM:-MRPC}
read -r -a exclude <<< "${EXCLUDE:-}"
exclude_args=(); [ "${#exclude[@]}" -eq 0 ] || exclude_args=(--exclude-sentences-of "${exclude[@]}")
read -r -a align_args <<< "${ALIGN_ARGS:-}"
PREPARE_ONLY=${PREPARE_ONLY:-0}
ROBERTA_PATH=${ROBERTA_PATH:-}
MODEL_DIR=${MODEL_DIR:-}
BPE_DIR=${BPE_DIR:-gpt2_bpe}
FEATURES=${FEATURES:-max4}
PHRASAL_WEIGHT=${PHRASAL_WEIGHT:-1}
SENTENTIAL_WEIGHT=${SENTENTIAL_WEIGHT:-1}
SEED=${SEED:-1}
LR=${LR:-2e-05}
BATCH_SIZE=${BATCH_SIZE:-32}
EPOCHS=${EPOCHS:-2}
WARMUP=${WARMUP:-0.06}
WORKERS=${WORKERS:-$(nproc)}
count_gpus "$@"

# ---- check the inputs before spending any time -------------------------------------
case "$FEATURES" in max4|mean2) ;; *) die "FEATURES=$FEATURES: expected max4 or mean2" ;; esac
case "$PREPARE_ONLY" in 0|1) ;; *) die "PREPARE_ONLY=$PREPARE_ONLY: expected 0 or 1" ;; esac
digests() { local f; for f in "$@"; do sha256sum < "$f" | cut -c1-64; done; }
holdout=0  # 1: validate on held-out train rows (EXCLUDE holds the source's own dev.tsv)
if [ -n "$PAIRS" ]; then
    [ -f "$PAIRS" ] || die "PAIRS=$PAIRS does not exist (a JSON Lines file of phrase pairs, docs/SPAN_PAIRS.md)"
    [ -z "$PAIRS_VALID" ] || [ -f "$PAIRS_VALID" ] || die "PAIRS_VALID=$PAIRS_VALID does not exist"
    [ "${#exclude[@]}" -eq 0 ] || die "EXCLUDE is the aligner's; with PAIRS, keep the target's sentences out of your file yourself"
    source_name=$(basename "$PAIRS" .jsonl)
    key_text="pairs $(digests "$PAIRS") valid $([ -n "$PAIRS_VALID" ] && digests "$PAIRS_VALID" || echo "last $VALID_ROWS")"
    tag=$source_name
else
    case "$ALIGN_FROM" in MRPC|STS-B) ;; *) die "ALIGN_FROM=$ALIGN_FROM: expected MRPC or STS-B (or give PAIRS)" ;; esac
    for f in "${exclude[@]}"; do [ -f "$f" ] || die "EXCLUDE: $f does not exist (the target task's dev.tsv and test.tsv)"; done
    for s in train dev; do
        [ -f "$GLUE_DIR/$ALIGN_FROM/$s.tsv" ] \
            || die "$GLUE_DIR/$ALIGN_FROM/$s.tsv not found: set GLUE_DIR to your glue_data folder, or give PAIRS"
    done
    for f in "${exclude[@]}"; do
        cmp -s "$f" "$GLUE_DIR/$ALIGN_FROM/train.tsv" \
            && die "EXCLUDE holds $f, the aligner's own source $GLUE_DIR/$ALIGN_FROM/train.tsv: every row would go. EXCLUDE takes the target task's dev.tsv and test.tsv"
        if cmp -s "$f" "$GLUE_DIR/$ALIGN_FROM/dev.tsv"; then holdout=1; fi
    done
    source_name=$ALIGN_FROM
    aligner_version=$(python -c "from span_plugin.preprocess.folders.align import ALIGNER_VERSION; print(ALIGNER_VERSION)") \
        || die "could not import span_plugin (run 'bash install.sh')"
    key_text="aligner $aligner_version source $(digests "$GLUE_DIR/$ALIGN_FROM/train.tsv" "$GLUE_DIR/$ALIGN_FROM/dev.tsv") seed $SEED args ${align_args[*]:-} exclude $(digests "${exclude[@]}" | sort | tr '\n' ' ') holdout $holdout $VALID_ROWS"
    tag=$ALIGN_FROM-s$SEED
fi
use_pretrained_encoder "$@"
if [ -n "$MODEL_DIR" ]; then
    layout_args=(--init-token 0)  # BERT: [CLS] A [SEP] B [SEP], one separator
    ARCH=${ARCH:-roberta_span_pair}
else
    layout_args=(--init-token 0 --separator-token 2)  # RoBERTa: <s> A </s> </s> B </s>
    ARCH=${ARCH:-roberta_span_pair_base}
fi
prefix=${MODEL_DIR:+$(basename "$MODEL_DIR")/}
words=$([ -n "$MODEL_DIR" ] && echo bert || echo gpt2)  # the aligner's words: the encoder's
key=$(printf '%s words %s' "$key_text" "$words" | sha256sum | cut -c1-8)
DATA_DIR=${DATA_DIR:-data-bin/${prefix}transfer-$tag-$key}
OUT_DIR=${OUT_DIR:-runs/${prefix}transfer-$source_name$([ "$SEED" = 1 ] || echo "-seed$SEED")}
# One recipe per OUT_DIR, never one that is or holds an input.
hold_output "$OUT_DIR" OUT_DIR "DATA_DIR=$DATA_DIR" "PAIRS=$PAIRS" "PAIRS_VALID=$PAIRS_VALID" \
    "GLUE_DIR=$([ -n "$PAIRS" ] || echo "$GLUE_DIR/$ALIGN_FROM")" "${exclude[@]/#/EXCLUDE=}" \
    "MODEL_DIR=$MODEL_DIR" "ROBERTA_PATH=$ROBERTA_PATH" "BPE_DIR=$([ -n "$MODEL_DIR" ] || echo "$BPE_DIR")"

# A run directory trains on one folder: resuming its checkpoints on other phrase pairs
# (another EXCLUDE or SEED) would mix two data sets.
data_abs=$(realpath -m "$DATA_DIR")
if [ -f "$OUT_DIR/transfer_data.txt" ] && [ "$(cat "$OUT_DIR/transfer_data.txt")" != "$data_abs" ]; then
    die "OUT_DIR=$OUT_DIR holds a run on $(cat "$OUT_DIR/transfer_data.txt"), not on $data_abs (other phrase pairs: another source, EXCLUDE, SEED or aligner). Set OUT_DIR to another folder, or remove it"
fi
mkdir -p "$OUT_DIR"
echo "$data_abs" > "$OUT_DIR/transfer_data.txt"

# ---- phrase pairs and the span-pair folder ---------------------------------------------
# The pairs are made on every launch (seconds): an existing folder must have been built
# from exactly these files (its provenance.json hashes them), or the recipe stops.
aligned=$OUT_DIR/aligned
mkdir -p "$aligned"
if [ -n "$PAIRS" ]; then
    train=$PAIRS valid=$PAIRS_VALID
    if [ -z "$valid" ]; then  # hold out the last VALID_ROWS lines
        rows=$(wc -l < "$PAIRS")
        [ "$rows" -gt "$VALID_ROWS" ] || die "$PAIRS has $rows lines: give PAIRS_VALID or a VALID_ROWS below that"
        head -n $(( rows - VALID_ROWS )) "$PAIRS" > "$aligned/train.jsonl"
        tail -n "$VALID_ROWS" "$PAIRS" > "$aligned/valid.jsonl"
        train=$aligned/train.jsonl valid=$aligned/valid.jsonl
    fi
else
    # The weak aligner (docs/SPAN_PAIRS.md, section 2); the seed makes it repeatable.
    common=(--seed "$SEED" --words "$words" "${exclude_args[@]}" "${align_args[@]}")
    if [ "$holdout" = 1 ]; then
        echo "EXCLUDE holds $GLUE_DIR/$ALIGN_FROM/dev.tsv itself: validating on the last $VALID_ROWS paraphrase rows of $GLUE_DIR/$ALIGN_FROM/train.tsv instead"
        echo "aligning $GLUE_DIR/$ALIGN_FROM/train.tsv"
        span-preprocess align-pairs --input "$GLUE_DIR/$ALIGN_FROM/train.tsv" --out "$aligned/train.jsonl" \
            --holdout-rows "$VALID_ROWS" --holdout-out "$aligned/dev.jsonl" "${common[@]}" \
            || die "the aligner failed on $GLUE_DIR/$ALIGN_FROM/train.tsv (see above)"
    else
        for s in train dev; do
            echo "aligning $GLUE_DIR/$ALIGN_FROM/$s.tsv"
            span-preprocess align-pairs --input "$GLUE_DIR/$ALIGN_FROM/$s.tsv" \
                --out "$aligned/$s.jsonl" "${common[@]}" \
                || die "the aligner failed on $GLUE_DIR/$ALIGN_FROM/$s.tsv (see above)"
        done
    fi
    train=$aligned/train.jsonl valid=$aligned/dev.jsonl
fi
if [ -d "$DATA_DIR" ]; then
    span-preprocess check "$DATA_DIR" --built-from "train=$train" "valid=$valid" >/dev/null \
        || die "DATA_DIR=$DATA_DIR was not built from this run's phrase pairs (see above): remove it to rebuild it, or set DATA_DIR to another folder"
    echo "using $DATA_DIR (built from these phrase pairs)"
else
    need_gpt2_files
    echo "preparing $DATA_DIR"
    # written whole or not at all, one build at a time (span-preprocess)
    span-preprocess pairs --out "$DATA_DIR" --name "transfer-$source_name" \
        --train "$train" --valid "$valid" --label-column label --positive-label 1 \
        "${encoder_args[@]}" --srcdict "$SRCDICT" --workers "$WORKERS"
fi
if [ "$PREPARE_ONLY" = 1 ]; then
    echo "transfer data: $DATA_DIR"
    exit 0
fi
# The task checks an existing folder when it loads it (phrase files, record hashes).
same_vocabulary "$DATA_DIR/input0/dict.txt"
count_updates "$DATA_DIR/raw/train.input0" "$@"

# ---- transfer fine-tuning ------------------------------------------------------------------
args=(
    "$DATA_DIR" --user-dir "$ROOT/span_plugin"
    --task span_pair_classification --criterion span_pair_classification --arch "$ARCH"
    --num-classes 2 "${layout_args[@]}" --max-positions 512 "${size_args[@]}"
    --phrase-features "$FEATURES" --phrasal-weight "$PHRASAL_WEIGHT"
    --sentential-weight "$SENTENTIAL_WEIGHT"
    --shorten-method truncate --seed "$SEED"
    --batch-size "$BATCH_SIZE" --max-tokens 4400 --required-batch-size-multiple 1
    --optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-06 --weight-decay 0.1 --clip-norm 0.0
    --lr-scheduler polynomial_decay --lr "$LR" --total-num-update "$UPDATES"
    --warmup-updates "$WARMUP_UPDATES" --max-update "$UPDATES" --max-epoch "$EPOCHS"
    --dropout 0.1 --attention-dropout 0.1
    --best-checkpoint-metric loss --no-epoch-checkpoints
    --save-dir "$OUT_DIR/checkpoints" --tensorboard-logdir "$OUT_DIR/tensorboard"
    --log-format simple --log-interval 100
    --find-unused-parameters  # RoBERTa's LM head is not used
)
if [ -n "$PRETRAINED" ]; then args+=(--finetune-from-model "$PRETRAINED"); fi
train_resumably "${args[@]}" "$@"
only_node_rank_zero

# ---- the encoder, heads stripped, as the GLUE recipes' starting model ----------------------
best=$OUT_DIR/checkpoints/checkpoint_best.pt
if [ -n "$MODEL_DIR" ]; then
    python -m span_plugin.runtime.transfer strip "$best" "$OUT_DIR/transferred" --model-dir "$MODEL_DIR" \
        || die "could not write $OUT_DIR/transferred from $best (see above)"
    echo "transferred encoder: $OUT_DIR/transferred/model.pt"
    echo "fine-tune it: MODEL_DIR=$OUT_DIR/transferred recipes/glue/MRPC.sh   (HEAD=span or HEAD=plain)"
else
    python -m span_plugin.runtime.transfer strip "$best" "$OUT_DIR/transferred.pt" \
        || die "could not write $OUT_DIR/transferred.pt from $best (see above)"
    echo "transferred encoder: $OUT_DIR/transferred.pt"
    echo "fine-tune it: ROBERTA_PATH=$OUT_DIR/transferred.pt BPE_DIR=$BPE_DIR recipes/glue/MRPC.sh   (HEAD=span or HEAD=plain; a large encoder also needs ARCH=roberta_span_large or roberta_large)"
fi
