# Shared pieces of the recipes (GLUE, your own table, CoNLL NER, span pre-training),
# sourced by each after it sets RECIPE_NAME. Defines:
#   die MESSAGE              the recipe's error: its name, the message, exit 2
#   count_gpus ARGS...       NUM_GPUS: 0 when --cpu is among ARGS, else NUM_GPUS or all visible
#   use_pretrained_encoder   from MODEL_DIR (a span-convert folder: WordPiece, sizes read
#                            from the checkpoint) or ROBERTA_PATH (fairseq RoBERTa, GPT-2
#                            BPE files in BPE_DIR) or neither (from scratch): sets
#                            PRETRAINED, SRCDICT, encoder_args, size_args
#   need_gpt2_files          without MODEL_DIR: BPE_DIR must hold the GPT-2 BPE files
#   same_vocabulary DICT     DICT (a folder's dict.txt) must equal SRCDICT, the model's,
#                            and so must the dictionary ROBERTA_PATH records, if any,
#                            before a first launch (needs OUT_DIR)
#   count_updates ROWS_FILE  UPDATES (EPOCHS passes over ROWS_FILE's lines in batches of
#                            BATCH_SIZE) and WARMUP_UPDATES (the WARMUP share of them)
#   train_resumably ARGS...  fairseq-train ARGS (fp16 on GPU, every GPU through torchrun),
#                            after putting the newest intact checkpoint of
#                            $OUT_DIR/checkpoints in place, so a relaunch resumes

RECIPES_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Use the project's environment when it is not already active.
if ! command -v fairseq-train >/dev/null && [ -x "$RECIPES_ROOT/.venv/bin/fairseq-train" ]; then
    PATH="$RECIPES_ROOT/.venv/bin:$PATH"
fi

die() { echo "$RECIPE_NAME: $*" >&2; exit 2; }

count_gpus() {
    case " $* " in
        *" --cpu "*) NUM_GPUS=0 ;;
        *) NUM_GPUS=${NUM_GPUS:-$(python -c "import torch; print(torch.cuda.device_count())")} ;;
    esac
}

use_pretrained_encoder() {
    command -v fairseq-train >/dev/null \
        || die "fairseq-train not found: run 'bash install.sh' and 'source .venv/bin/activate'"
    [ -z "$ROBERTA_PATH" ] || [ -f "$ROBERTA_PATH" ] \
        || die "ROBERTA_PATH=$ROBERTA_PATH does not exist (give roberta.base/model.pt, or leave it empty to train from scratch)"
    if [ -n "$MODEL_DIR" ]; then
        [ -z "$ROBERTA_PATH" ] || die "give MODEL_DIR or ROBERTA_PATH, not both"
        local f
        for f in model.pt dict.txt; do
            [ -f "$MODEL_DIR/$f" ] || die "$MODEL_DIR/$f not found: MODEL_DIR is a folder made by 'span-convert bert'"
        done
        [ -f "$MODEL_DIR/tokenizer.json" ] || [ -f "$MODEL_DIR/vocab.txt" ] \
            || die "$MODEL_DIR has no tokenizer.json or vocab.txt"
        PRETRAINED=$MODEL_DIR/model.pt
        SRCDICT=$MODEL_DIR/dict.txt
        encoder_args=(--bpe wordpiece --wordpiece "$MODEL_DIR")
        # The encoder's sizes come from the checkpoint, never typed by hand.
        local sizes
        sizes=$(span-convert flags "$PRETRAINED") || die "could not read the model sizes of $PRETRAINED"
        read -r -a size_args <<< "$sizes"
    else
        PRETRAINED=$ROBERTA_PATH
        SRCDICT=$BPE_DIR/dict.txt
        encoder_args=(--gpt2-encoder-json "$BPE_DIR/encoder.json" --gpt2-vocab-bpe "$BPE_DIR/vocab.bpe")
        size_args=()
    fi
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

count_updates() {
    local rows
    rows=$(wc -l < "$1")
    UPDATES=$(( (rows + BATCH_SIZE - 1) / BATCH_SIZE * EPOCHS ))
    WARMUP_UPDATES=$(python -c "print(int(round($WARMUP * $UPDATES)))")
}

train_resumably() {
    local fp16=()
    if [ "$NUM_GPUS" -ge 1 ]; then
        fp16=(--fp16 --fp16-init-scale 4 --threshold-loss-scale 1 --fp16-scale-window 128)
    fi
    mkdir -p "$OUT_DIR"
    # A damaged checkpoint_last.pt is replaced by the newest intact checkpoint first
    # (stale *.tmp files of a killed save are removed).
    if [ -d "$OUT_DIR/checkpoints" ]; then
        python -m span_plugin.runtime.checkpoints resume "$OUT_DIR/checkpoints" \
            || die "could not prepare $OUT_DIR/checkpoints for resuming (see above)"
    fi
    if [ "$NUM_GPUS" -gt 1 ]; then
        torchrun --standalone --nproc_per_node "$NUM_GPUS" "$(command -v fairseq-train)" \
            "${fp16[@]}" --distributed-world-size "$NUM_GPUS" "$@"
    else
        fairseq-train "${fp16[@]}" "$@"
    fi
}
