#!/usr/bin/env bash
# Word-alignment benchmark (issue 3): continue the foundation `xlm` run for the same wall-clock budget as
# `xlm` (the control: MLM + TLM) and as `xlm-align` (MLM + TLM + DWA), then measure AER of all three (argmax,
# itermax, ot; every layer) and of eflomal on every gold set in ../shared/data/eval/word_alignment, plus
# alignment throughput. Heavy steps take /tmp/polyalign-cpu.lock so runs never share the 2 cores.
# Usage: bench/alignment.sh [minutes per continued run, default 10]
# From a worktree without its own .venv: PY=/work/main/.venv/bin/python bench/alignment.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-10}
PY=${PY:-.venv/bin/python}
export PYTHONPATH=$PWD
W=bench/work
LOCK=/tmp/polyalign-cpu.lock
DATA=$W/prepared-xnli15
BASE=$W/runs/xlm

# Both continuations start from the same checkpoint with the same seed, so MLM and the parallel stream see the
# same batches and maskings; only DWA differs. Budget: MINUTES of training each on an otherwise idle 2-core
# machine, as step budgets so the result does not depend on what else shares the machine (as in
# bench/foundation.sh): xlm takes 3.3 s/step (measured in bf16); an xlm-align step adds one no-gradient forward
# pass of the pair batch for self-labeling, i.e. 7/6 of an xlm step by FLOPs (MLM and TLM batches have the same
# token budget, and backward = 2 forwards). Peak learning rate 2e-4 (XLM-Align Table 11), 10% warmup.
XLM_STEPS=$(( MINUTES * 60 * 10 / 33 ))
ALIGN_STEPS=$(( XLM_STEPS * 6 / 7 ))
continue_run() {  # name recipe steps
  [ -d $W/runs/$1 ] && return 0
  flock $LOCK $PY -m polyalign.cli pretrain $2 --init-from $BASE --data $DATA --run-dir $W/runs/$1 --no-progress \
    --set trainer.max_steps=$3 --set trainer.warmup_steps=$(( $3 / 10 )) --set trainer.lr=2e-4 \
    --set trainer.save_every=1000
}
continue_run xlm-continued xlm $XLM_STEPS
continue_run xlm-align xlm-align $ALIGN_STEPS

[ -f bench/results/alignment.json ] && exit 0  # done; delete it to measure again
flock $LOCK $PY bench/alignment.py --model xlm=$BASE --model xlm-continued=$W/runs/xlm-continued \
  --model xlm-align=$W/runs/xlm-align --command "bench/alignment.sh $MINUTES"
