#!/usr/bin/env bash
# Preset sweep (issue 19): which model size, learning rate and batch learn fastest per CPU-minute on this machine.
# Each config of the grid below trains the `xlm` recipe (MLM + TLM) FROM SCRATCH for MINUTES minutes of
# wall-clock training time (trainer.max_minutes), with a 30-step warmup and then an lr that is in effect
# constant (the linear decay runs over 100,000 steps, of which a run reaches a few hundred). Single epoch: every
# batch is new, so the training MLM loss estimates the held-out MLM loss. bench/preset_sweep_report.py compares
# the MLM loss against training seconds and writes bench/results/preset.md, preset.json and preset/*.png;
# the winner becomes polyalign/recipes/presets/cpu-small.yaml (by hand).
# Heavy: about (number of configs) x (MINUTES + 0.5) CPU-minutes (27 with the defaults). Run it under the lock:
#   flock /tmp/polyalign-cpu.lock bench/preset_sweep.sh PREPARED
# PREPARED: a prepared-data folder (e.g. /work/runs/prepared/all24, made with small-base's tokenizer).
# Environment: MINUTES (4), CONFIGS (all of the grid, in its order; a subset is a space-separated list of names),
# PA / PY: polyalign and Python; W: the work folder (bench/work; runs go to $W/preset/runs/CONFIG); RESULTS:
# where the page goes (bench/results; another folder for a trial run).
# Resumable: a config whose run has a `done` marker for the same MINUTES is skipped; any other is started again.
set -euo pipefail
cd "$(dirname "$0")/.."
PREPARED=${1:?usage: bench/preset_sweep.sh PREPARED}
MINUTES=${MINUTES:-4}
PA=${PA:-.venv/bin/polyalign}
PY=${PY:-.venv/bin/python}
W=${W:-bench/work}/preset
RESULTS=${RESULTS:-bench/results}

# The grid: name -> --set values over the `xlm` recipe (hidden 384, 6 layers, 6 heads, FFN 1536, lr 5e-4,
# 8,192 tokens per stream and step). Edit here; names say layers x hidden - lr [- tokens per stream].
SMALL="model.hidden_size=256 model.num_heads=4 model.ffn_size=1024"
declare -A GRID=(
  [6x384-5e-4]=""
  [6x384-1e-3]="trainer.lr=1e-3"
  [4x256-1e-3]="$SMALL model.num_layers=4 trainer.lr=1e-3"
  [4x256-2e-3]="$SMALL model.num_layers=4 trainer.lr=2e-3"
  [4x256-1e-3-4k]="$SMALL model.num_layers=4 trainer.lr=1e-3 data.mono.max_tokens=4096 data.parallel.max_tokens=4096"
  [2x256-1e-3]="$SMALL model.num_layers=2 trainer.lr=1e-3"
)
ORDER="6x384-5e-4 6x384-1e-3 4x256-1e-3 4x256-2e-3 4x256-1e-3-4k 2x256-1e-3"
CONFIGS=${CONFIGS:-$ORDER}
for name in $CONFIGS; do
  [ -n "${GRID[$name]+set}" ] || { echo "unknown config $name; known: $ORDER" >&2; exit 2; }
done
[ -d "$PREPARED" ] || { echo "$PREPARED: no prepared-data folder" >&2; exit 2; }
mkdir -p $W/runs

for name in $CONFIGS; do
  run=$W/runs/$name
  [ "$(cat $run/done 2>/dev/null)" = "$MINUTES" ] && continue
  rm -rf $run
  sets=()
  for s in ${GRID[$name]}; do sets+=(--set "$s"); done
  echo "preset sweep: $name, $MINUTES min" >&2
  $PA pretrain xlm --data $PREPARED --run-dir $run --no-progress \
    --set trainer.max_minutes=$MINUTES --set trainer.max_steps=100000 --set trainer.warmup_steps=30 \
    --set trainer.log_every=5 --set trainer.save_every=100000 "${sets[@]}"
  echo "$MINUTES" > $run/done
done

$PY bench/preset_sweep_report.py --work $W --configs $CONFIGS --minutes $MINUTES --results $RESULTS --command \
  "env MINUTES=$MINUTES$([ "$CONFIGS" = "$ORDER" ] || echo " CONFIGS='$CONFIGS'") flock /tmp/polyalign-cpu.lock bench/preset_sweep.sh $PREPARED"
