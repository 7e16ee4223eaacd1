#!/usr/bin/env bash
# VECO bench: `xlm` vs `veco` at equal steps on the same data, then translation from VECO weights.
#
# Both arms start from the foundation `mlm` run (bench/work/runs/mlm, its final checkpoint: MLM only, as VECO
# starts from XLM-R) and continue for K steps on bench/work/prepared-xnli15 with the same schedule:
#   xlm:  recipe `xlm`, MLM + TLM on every step;
#   veco: recipe `veco`, CA-MLM on two adjacent monolingual segments (even steps) and on translation pairs
#         + TLM (odd steps); the new cross-attention alone is trained for the first K/5 steps (VECO §4).
# Then Tatoeba-14 (layer sweep) and AER (OT, de-en and en-fr, layer sweep) for the start and both arms (VECO
# plugged out), and de->en translation fine-tuning for MT_STEPS steps from VECO (every weight), from the xlm
# arm (encoder-decoder attention new) and from random weights, scored with sacreBLEU.
#
# Heavy: run the whole script under the shared CPU lock (it takes no lock itself, so it never waits on itself):
#   PY=/work/main/.venv/bin/python flock /tmp/polyalign-cpu.lock bench/veco.sh
# Finished steps are skipped, so a rerun only adds what is missing. Pre-training runs in chunks of CHUNK steps
# (pause with trainer.stop_at, then --resume, which is exact), so a run's memory never grows past a chunk's.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export PYTHONPATH=$PWD
PA="$PY -m polyalign.cli"
K=${K:-120}
CHUNK=${CHUNK:-40}
MT_STEPS=${MT_STEPS:-150}
W=${W:-bench/work}
DATA=${DATA:-$W/prepared-xnli15}
START=${START:-$W/runs/mlm}
OUT=${OUT:-bench/results/veco}
EXTRA=${EXTRA:-}  # extra pretrain arguments, e.g. "--set model.hidden_size=32 ..." for a dry run on tiny models
mkdir -p $OUT
log() { echo "[$(date +%H:%M:%S)] $*"; }
last_step() { { ls $W/runs/$1/checkpoints 2>/dev/null || true; } | sed -n 's/^step-0*//p' | sort -n | tail -1; }

continue_from_start() {  # name recipe [--set ...]
  local run=$W/runs/veco-bench-$1 done
  while true; do
    done=$(last_step veco-bench-$1); done=${done:-0}
    [ "$done" -ge $K ] && return 0
    local stop=$(( done + CHUNK < K ? done + CHUNK : 0 ))
    log "pretrain $1: from step $done of $K, pausing at ${stop} (0: at the end); start $START"
    if [ "$done" -eq 0 ]; then
      rm -rf $run
      $PA pretrain $2 --data $DATA --init-from $START --run-dir $run --no-progress \
        --set trainer.max_steps=$K --set trainer.warmup_steps=$(( K / 10 )) --set trainer.lr=5e-4 \
        --set trainer.save_every=$CHUNK --set trainer.log_every=10 --set trainer.stop_at=$stop "${@:3}" $EXTRA
    else
      $PA pretrain --resume --run-dir $run --no-progress --set trainer.stop_at=$stop
    fi
  done
}
continue_from_start xlm xlm
continue_from_start veco veco --set 'trainer.train_only=[cross_attention]' --set trainer.train_only_until=$(( K / 5 ))

# Plug-out: the VECO encoder without cross-attention, evaluated like any encoder.
[ -d $W/veco-bench-plugged-out ] || $PA plug-out --model $W/runs/veco-bench-veco --out $W/veco-bench-plugged-out

declare -A MODELS=([start]=$START [xlm]=$W/runs/veco-bench-xlm [veco]=$W/veco-bench-plugged-out)
for name in start xlm veco; do
  if [ ! -f $OUT/$name/tatoeba.json ]; then
    log "tatoeba $name"
    $PA evaluate tatoeba --model ${MODELS[$name]} --data ../shared/data/eval/tatoeba --langs tatoeba14 \
      --layers all --out $OUT/$name > /dev/null
  fi
  if $PA evaluate alignment --help > /dev/null 2>&1; then
    for pair in de-en en-fr; do
      if [ ! -f $OUT/$name/alignment-$pair/alignment.json ]; then
        log "alignment $name $pair"
        $PA evaluate alignment --model ${MODELS[$name]} --gold ../shared/data/eval/word_alignment/$pair \
          --method ot --layers all --out $OUT/$name/alignment-$pair > /dev/null
      fi
    done
  fi
done

# Translation de->en: same architecture, data, schedule and steps for every initialisation.
translate() {  # name model init
  [ -f $OUT/translation/$1.json ] && return 0
  log "translation $1"
  $PY bench/veco_translation.py --model $2 --init $3 --pair de-en --steps $MT_STEPS --out $OUT/translation/$1.json
}
translate veco $W/runs/veco-bench-veco veco
translate random $W/runs/veco-bench-veco random
translate xlm $W/runs/veco-bench-xlm encoder

[ "$OUT" = bench/results/veco ] && $PY bench/veco_report.py
log done
