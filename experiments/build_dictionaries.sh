#!/usr/bin/env bash
# The n-gram dictionaries of the Span Fine-tuning grid, from general text only: every n-gram of 2..5
# words seen more than 10 times (the paper's rule) in the 65M words of Wikipedia in
# ../shared/data/wikipedia, in both word schemes (bert: WordPiece encoders; gpt2: GPT-2
# BPE, sentencepiece, fastBPE), checked against every GLUE task file so no task row is
# counted: Wikipedia holds some of QNLI's sentences as one-sentence paragraphs, and those
# lines are left out (the header's task_rows_dropped). Sizes are prefixes:
# `span-preprocess ngrams --from-dictionary` cuts them.
#   bash experiments/build_dictionaries.sh            # -> runs/dictionaries/wiki.{bert,gpt2}.txt.gz
#   PACKAGE=1 bash experiments/build_dictionaries.sh  # also rewrite the packaged defaults
# About 1-2 minutes per scheme on 2 idle cores.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared/data}
OUT=${OUT:-runs/dictionaries}
DEFAULT_SIZE=${DEFAULT_SIZE:-100000}
mkdir -p "$OUT"
for words in bert gpt2; do
    [ -f "$OUT/wiki.$words.txt.gz" ] || .venv/bin/span-preprocess ngrams --words "$words" \
        --text "$SHARED"/wikipedia/wiki.*.txt.gz --min-count 11 --max-n 5 \
        --task-rows "$SHARED/glue" --on-task-rows drop --out "$OUT/wiki.$words.txt.gz"
done
if [ "${PACKAGE:-0}" = 1 ]; then
    .venv/bin/span-preprocess ngrams --from-dictionary "$OUT/wiki.bert.txt.gz" \
        --top-k "$DEFAULT_SIZE" --out span_plugin/resources/ngrams.default.bert.txt.gz
    .venv/bin/span-preprocess ngrams --from-dictionary "$OUT/wiki.gpt2.txt.gz" \
        --top-k "$DEFAULT_SIZE" --out span_plugin/resources/ngrams.default.txt.gz
fi
