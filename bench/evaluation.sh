#!/usr/bin/env bash
# Evaluation protocols on ../shared/models/small-base (issue 16): BUCC 2018 zh-en mining, Tatoeba-14 with cosine
# and with ratio-margin scores (layer sweep), then bench/results/evaluation.md. QA rows: bench/results/xtreme.md.
# A few CPU-minutes: run it under the shared CPU lock:
#   flock /tmp/polyalign-cpu.lock bench/evaluation.sh [MODEL] [ALIGNED_MODEL]
# ALIGNED_MODEL (e.g. bench/work/runs/best-words-hard from bench/best.sh) adds a BUCC row for a model that aligns.
set -euo pipefail
cd "$(dirname "$0")/.."
PA=${PA:-.venv/bin/polyalign}
PY=${PY:-.venv/bin/python}
MODEL=${1:-../shared/models/small-base}
ALIGNED=${2:-}
OUT=bench/results/evaluation
mkdir -p $OUT
$PA evaluate bucc --model $MODEL --data ../shared/data/eval/bucc2018 --pair zh-en --split dev --out $OUT/bucc --no-progress
if [ -n "$ALIGNED" ]; then
  $PA evaluate bucc --model $ALIGNED --data ../shared/data/eval/bucc2018 --pair zh-en --split dev \
    --out $OUT/bucc-aligned --no-progress
fi
for score in cosine margin; do
  $PA evaluate tatoeba --model $MODEL --langs tatoeba14 --layers all --score $score --out $OUT/tatoeba-$score --no-progress
done
$PY bench/evaluation_report.py --model $MODEL
