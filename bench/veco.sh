#!/usr/bin/env bash
# VECO bench (bench/results/veco.md; trimmed in issue 19): the `veco` recipe as it ships, continuing
# ../shared/models/small-base (VECO starts from XLM-R) with its cross-attention-only first stage (§4), then
# plug-in fine-tuning on XNLI (§3.1) at smoke scale. What the one harness measures is no longer here: CA-MLM +
# TLM against MLM + TLM and translation from VECO / encoder-only / random weights are section `veco` of
# bench/evidence.sh (bench/results/evidence.md), whose VECO arms train from scratch with every weight from step 1
# (VECO Table 5's small models). What stays here is measured nowhere else: the recipe's staged continuation of a
# pretrained encoder and plug-in fine-tuning. The earlier runs of the removed parts (xlm arm, Tatoeba-14, AER,
# translation) are in git history (bench/results/veco.md before issue 19).
#
# The run continues ../shared/models/small-base (MLM + TLM, no cross-attention) for K steps on $W/prepared-all24
# (every language of ../shared/data/train with small-base's tokenizer, Tatoeba sentences excluded, 1,000 pairs per
# language held out: the folder bench/best.sh prepares) with recipe `veco` as it stands (CA-MLM on adjacent
# segments on even steps with 15% masked, on translation pairs + TLM on odd steps with 25%; VECO Table 8); its
# first stage trains only the new cross-attention for the recipe's 10% of the steps, then everything, the
# released parameters warming up again (§4). Then `polyalign finetune xnli --plug-in` on it (one seed, FT_TRAIN
# pairs, one epoch: a smoke run that plug-in fine-tuning works on real data, not a measurement of its effect).
#
# About 5 CPU-minutes with the defaults (plus ~4 to prepare $W/prepared-all24 when it is missing). Heavy: run it
# under the shared CPU lock (it takes no lock itself):
#   PY=/work/main/.venv/bin/python flock /tmp/polyalign-cpu.lock bench/veco.sh
# Finished steps are skipped, so a rerun only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export PYTHONPATH=$PWD
PA="$PY -m polyalign.cli"
K=${K:-60}
TOKENS=${TOKENS:-4096}  # per objective and step (the recipes' 8192 halved for time)
FT_TRAIN=${FT_TRAIN:-2000}
W=${W:-bench/work}
START=${START:-../shared/models/small-base}
DATA=${DATA:-$W/prepared-all24}
EVAL=${EVAL:-../shared/data/eval}
OUT=${OUT:-bench/results/veco}
EXTRA=${EXTRA:-}  # extra pretrain arguments, e.g. "--set data.languages=[de,en]" for a dry run
# Results and runs of another start model (this bench before issue 14 continued bench/work/runs/mlm) are not
# reused: they are removed once, and $OUT/init.txt records the start of what is there.
if [ "$(cat $OUT/init.txt 2>/dev/null)" != "$START" ]; then
  rm -rf $OUT $W/runs/veco-bench-veco
fi
mkdir -p $OUT
echo "$START" > $OUT/init.txt
log() { echo "[$(date +%H:%M:%S)] $*"; }

# The same command as bench/best.sh, so the two share the folder.
[ -d $DATA ] || $PA prepare --mono ../shared/data/train/mono --parallel ../shared/data/train/parallel \
  --tokenizer-from $START --exclude $EVAL/tatoeba --dev-pairs 1000 --out $DATA --no-progress

continue_from_start() {  # name recipe [--set ...]
  local run=$W/runs/veco-bench-$1
  [ -d $run/checkpoints ] && return 0
  log "pretrain $1: $K steps from $START"
  rm -rf $run
  $PA pretrain $2 --data $DATA --init-from $START --run-dir $run --no-progress \
    --set trainer.max_steps=$K --set trainer.warmup_steps=$(( K / 10 )) --set trainer.lr=5e-4 \
    --set trainer.save_every=$K --set trainer.log_every=5 \
    --set data.mono.max_tokens=$TOKENS --set data.parallel.max_tokens=$TOKENS "${@:3}" $EXTRA
}
# The recipe's first stage is 400 of 4000 steps; scaled to K steps like the warmup.
continue_from_start veco veco --set trainer.train_only_until=$(( K / 10 ))

# Plug-in fine-tuning as a task (VECO §3.1, translate-train-all): the cross-attention plugged in, each input
# read with its translation, the classifier on [H^L : S^L]. Smoke scale.
if [ ! -f $OUT/plug-in/finetune.json ]; then
  log "finetune xnli --plug-in"
  $PA finetune xnli --plug-in --setting translate-train-all --model $W/runs/veco-bench-veco --data $EVAL \
    --seeds 1 --max-train $FT_TRAIN --max-select 100 --max-eval 100 --set epochs=1 --out $OUT/plug-in --no-progress
fi

[ "$OUT" = bench/results/veco ] && $PY bench/veco_report.py --command "K=$K TOKENS=$TOKENS FT_TRAIN=$FT_TRAIN \
flock /tmp/polyalign-cpu.lock bench/veco.sh"
log done
