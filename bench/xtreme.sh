#!/usr/bin/env bash
# XTREME-style fine-tuning of the foundation checkpoints `mlm` and `xlm`: XNLI, PAWS-X, NER, POS, QA under
# cross-lingual transfer, the same protocol for both models, then bench/results/xtreme.{md,json}.
# Run it under the CPU lock:  flock /tmp/polyalign-cpu.lock bench/xtreme.sh
# Resumable: a (task, model) pair whose finetune.json exists is skipped.
#
# Budget (~40-100 min on 2 cores for both models, depending on what else runs): paper hyperparameters (lr, batch, layer decay, weight
# decay, warmup) with fewer epochs and seeded subsamples of the larger sets, all listed in each result's
# protocol line. max_length is 128 everywhere, QA included, because the foundation models were pre-trained
# on sequences of at most 128 tokens (positions beyond are untrained).
set -euo pipefail
cd "$(dirname "$0")/.."
PA=${PA:-.venv/bin/polyalign}
RUNS=${RUNS:-bench/work/runs}
OUT=${OUT:-bench/results/xtreme}
REPORT=${REPORT:-bench/results/xtreme}
MODELS=${MODELS:-"mlm xlm"}
EXTRA=${EXTRA:-}  # appended to every command, e.g. a dry run: EXTRA="--max-train 16 --max-eval 16 --max-select 16"
mkdir -p $OUT

run() {  # task seeds [options...]; both models, task by task so that finished tasks have both
  local task=$1 seeds=$2
  shift 2
  for model in $MODELS; do
    [ -f $OUT/$model/$task/finetune.json ] && continue
    echo "== $task $model $(date +%H:%M:%S)"
    # shellcheck disable=SC2086
    $PA finetune "$task" --model $RUNS/$model --seeds "$seeds" --out $OUT/$model/$task --no-progress "$@" $EXTRA \
      || echo "== $task $model FAILED (exit $?)"
  done
}

# XNLI: English dev (minus 20% of premise groups for selection), 2 epochs (paper 5), 400 test pairs per language.
run xnli 3 --set epochs=2 --max-eval 400
# NER: 3,000 English training sentences, 1 epoch (paper: 20,000, 10 epochs), 1,000 dev and 500 test sentences.
run ner 3 --set epochs=1 --max-train 3000 --max-select 1000 --max-eval 500
# POS: 4,000 EWT training sentences, 2 epochs (paper 10), 1,000 dev sentences, 400 PUD sentences per language.
run pos 1 --set epochs=2 --max-train 4000 --max-select 1000 --max-eval 400
# PAWS-X: English dev training rows (1,200 of 2,000), 3 epochs (paper 10).
run pawsx 1 --set epochs=3
# QA: MLQA en dev (minus 20% of question ids), windows of 128 with doc_stride 64, questions cut to 32 tokens,
# 2 epochs (as the paper), 200 XQuAD questions per language.
run qa 1 --set max_length=128 --set doc_stride=64 --set max_query_length=32 --max-eval 200

${PY:-.venv/bin/python} bench/xtreme_report.py "$OUT" "$REPORT.md" "$REPORT.json"
