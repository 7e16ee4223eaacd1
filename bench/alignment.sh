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
# same batches and maskings; only DWA differs. Steps are chosen so the linear schedule ends near the budget
# (xlm ~5.2 s/step in bf16 on 2 cores; xlm-align adds a no-gradient labeling pass, ~6.3 s/step); max_minutes
# is the hard stop. Peak learning rate 2e-4 (XLM-Align Table 11), 10% warmup.
# Wait (without the lock) until the base run has finished: its latest checkpoint reached max_steps or max_minutes.
base_finished() {
  $PY - "$BASE" <<'PY'
import json, sys, yaml
from pathlib import Path
from polyalign.checkpoint import latest_checkpoint
run = Path(sys.argv[1])
trainer = yaml.safe_load((run / "recipe.yaml").read_text())["trainer"]
ckpt = latest_checkpoint(run)
state = json.loads((ckpt / "trainer_state.json").read_text()) if ckpt else {"step": 0, "counters": {"seconds": 0}}
done = state["step"] >= trainer["max_steps"] or 0 < trainer["max_minutes"] * 60 <= state["counters"]["seconds"]
sys.exit(0 if done else 1)
PY
}
until base_finished 2>/dev/null; do sleep 60; done

continue_run() {  # name recipe steps
  [ -d $W/runs/$1 ] && return 0
  flock $LOCK $PY -m polyalign.cli pretrain $2 --init-from $BASE --data $DATA --run-dir $W/runs/$1 --no-progress \
    --set trainer.max_steps=$3 --set trainer.warmup_steps=$(( $3 / 10 )) --set trainer.lr=2e-4 \
    --set trainer.max_minutes=$MINUTES --set trainer.save_every=1000
}
continue_run xlm-continued xlm $(( MINUTES * 60 * 10 / 52 ))
continue_run xlm-align xlm-align $(( MINUTES * 60 * 10 / 63 ))

flock $LOCK $PY bench/alignment.py --model xlm=$BASE --model xlm-continued=$W/runs/xlm-continued \
  --model xlm-align=$W/runs/xlm-align --command "bench/alignment.sh $MINUTES"
