#!/usr/bin/env bash
# PPA bench (issue 15): the `ppa` recipe continued from ../shared/models/small-base for STEPS steps, in a few
# arms that each change one setting of the issue's calibration run (mean pooling, fp32 InfoNCE, momentum
# 0.99, queue 4,096, lr 2e-4), so that the page can say which of them limits the gain:
#   base     the calibration settings, STEPS steps                                  (does length alone help?)
#   lr       peak lr HIGH_LR instead of LR                                          (learning rate)
#   tau      temperature 0.1 instead of 0.05                                        (temperature; not by default)
#   aligned  from SENTENCE_MODEL instead of small-base (only when it is given)      (start model)
# and three arms that each change one setting of `lr` (the arm that learned most), to find what limits it:
#   notlm    -TLM (PPA Table 5's ablation): MoCo alone                                (the TLM term)
#   short    no minimum length (PPA §3.1 drops pairs with a side under 10 tokens)   (the pair filter)
#   inbatch  in-batch translation ranking (the best recipe's objective) in place of   (MoCo's queue and
#            MoCo + TLM, same pairs, batch, lr and steps                             key encoder)
#   scratch  `inbatch` from a randomly initialised model of small-base's size       (the start model)
#   nolag    `notlm` with momentum 0: keys from the current weights (no gradient)   (the key encoder's lag)
#   noproj   `notlm` without the projection head of Eq. 2 (projection_size 0)      (the head retrieval skips)
# and two that change one setting of `short`, after its batch accuracy showed the queue task won by freshness:
#   batchneg the batch's other keys as negatives too (batch_negatives: true)         (stale queue negatives)
#   m999     the paper's momentum 0.999 instead of MOMENTUM                          (the key encoder's drift)
# and two that change `batchneg`'s momentum to 0.9, so that the key encoder's time constant 1/(1-m) is 10 steps:
# 300 steps are then 30 time constants, as PPA's ~20,000 steps (10 epochs of 250k pairs at batch 128) are at
# its m = 0.999 (1,000 steps); at MOMENTUM 0.99 300 steps are 3:
#   m90      `batchneg` with momentum 0.9                                             (the key encoder's lag)
#   m90notlm `m90` without TLM                                                        (the same, MoCo alone)
#   m90queue `m90notlm` with the queue as the only negatives, as PPA                  (the freshness shortcut)
# Every start model and every trained model is measured on the representation MoCo trains (POOLING over the
# last layer; a layer sweep comes free): Tatoeba-14 acc@1, and retrieval among the held-out dev pairs of the
# training bitext (`prepare --dev-pairs 1000`: 1,000 pairs per language, never trained on). The MoCo loss
# and queue accuracy are logged at every step. Writes bench/results/ppa.md, ppa.json and ppa/.
# Heavy (about 30 CPU-minutes with the default arms): run the whole script under the shared CPU lock:
#   flock /tmp/polyalign-cpu.lock bench/ppa.sh PREPARED [SENTENCE_MODEL]
# PREPARED: a prepared-data folder made with --tokenizer-from ../shared/models/small-base --dev-pairs 1000
# (bench/best.sh's bench/work/prepared-all24, or /work/runs/prepared/all24). SENTENCE_MODEL: optional, a
# sentence-aligned model with the same tokenizer (e.g. bench/work/runs/best-sentences).
# Environment: STEPS (300), LR (2e-4), HIGH_LR (1e-3), QUEUE (4096), MOMENTUM (0.99), POOLING (mean),
# ARMS (default "base lr", plus "aligned" when SENTENCE_MODEL is given); PA / PY: polyalign and Python.
set -euo pipefail
cd "$(dirname "$0")/.."
PREPARED=${1:?usage: bench/ppa.sh PREPARED [SENTENCE_MODEL]}
ALIGNED=${2:-}
STEPS=${STEPS:-300}
LR=${LR:-2e-4}
HIGH_LR=${HIGH_LR:-1e-3}
QUEUE=${QUEUE:-4096}
MOMENTUM=${MOMENTUM:-0.99}
POOLING=${POOLING:-mean}
ARMS=${ARMS:-base lr${ALIGNED:+ aligned}}
PA=${PA:-.venv/bin/polyalign}
PY=${PY:-.venv/bin/python}
W=${W:-bench/work}/ppa
SMALL_BASE=../shared/models/small-base
TATOEBA=../shared/data/eval/tatoeba
[ -d "$PREPARED/dev" ] || { echo "$PREPARED/dev: no dev split; prepare with --dev-pairs 1000" >&2; exit 2; }
mkdir -p $W/runs $W/evals
rm -rf bench/results/ppa/{before,full,no-moco,no-tlm}  # the previous bench's folders (mlm start, 12 steps)

evaluate() {  # model name: Tatoeba-14 and dev retrieval at the last layer with MoCo's pooling
  local layer
  layer=$($PY -c "import sys; from polyalign.checkpoint import load_model; \
print(load_model(sys.argv[1]).model.config.num_layers)" $1)
  [ -f $W/evals/$2/tatoeba/tatoeba.json ] || $PA evaluate tatoeba --model $1 --data $TATOEBA --langs tatoeba14 \
    --pooling $POOLING --layer $layer --layers all --out $W/evals/$2/tatoeba --no-progress >/dev/null
  [ -f $W/evals/$2/dev/tatoeba.json ] || $PA evaluate tatoeba --model $1 --data $PREPARED/dev --langs all \
    --pooling $POOLING --layer $layer --layers all --out $W/evals/$2/dev --no-progress >/dev/null
}

evaluate $SMALL_BASE start-small-base
[ -z "$ALIGNED" ] || evaluate $ALIGNED start-aligned

for arm in $ARMS; do
  init=$SMALL_BASE
  extra=()
  case $arm in
    base) ;;
    lr) extra=(--set trainer.lr=$HIGH_LR) ;;
    tau) extra=(--set objectives.0.config.temperature=0.1) ;;
    aligned) init=${ALIGNED:?the aligned arm needs SENTENCE_MODEL}; ;;
    notlm) extra=(--set trainer.lr=$HIGH_LR --set objectives.0.config.tlm=false) ;;
    short) extra=(--set trainer.lr=$HIGH_LR --set data.parallel.min_length=1) ;;
    inbatch) extra=(--set trainer.lr=$HIGH_LR --set objectives.0.name=contrast
                    --set "objectives.0.config={temperature: 0.05, pooling: $POOLING}") ;;
    noproj) extra=(--set trainer.lr=$HIGH_LR --set objectives.0.config.tlm=false
                   --set objectives.0.config.projection_size=0) ;;
    batchneg) extra=(--set trainer.lr=$HIGH_LR --set data.parallel.min_length=1
                     --set objectives.0.config.batch_negatives=true) ;;
    m999) extra=(--set trainer.lr=$HIGH_LR --set data.parallel.min_length=1 --set objectives.0.config.momentum=0.999) ;;
    m90|m90notlm) extra=(--set trainer.lr=$HIGH_LR --set data.parallel.min_length=1
                         --set objectives.0.config.batch_negatives=true --set objectives.0.config.momentum=0.9)
      [ $arm = m90 ] || extra+=(--set objectives.0.config.tlm=false) ;;
    m90queue) extra=(--set trainer.lr=$HIGH_LR --set data.parallel.min_length=1 --set objectives.0.config.momentum=0.9
                     --set objectives.0.config.tlm=false) ;;
    nolag) extra=(--set trainer.lr=$HIGH_LR --set objectives.0.config.tlm=false
                  --set objectives.0.config.momentum=0) ;;
    scratch) init=$W/random-init; extra=(--set trainer.lr=$HIGH_LR --set objectives.0.name=contrast
                    --set "objectives.0.config={temperature: 0.05, pooling: $POOLING}")
      # small-base's architecture and tokenizer, untrained: one step of the best recipe's stage 1 at lr 0
      [ -d $init ] || $PA pretrain best-sentences --data $PREPARED --run-dir $init --no-progress \
        --set trainer.max_steps=1 --set trainer.lr=0 --set trainer.warmup_steps=0 >/dev/null
      evaluate $init start-random ;;
    *) echo "unknown arm $arm (base, lr, tau, aligned, notlm, short, inbatch, scratch, nolag, noproj, batchneg, m999, m90, m90notlm, m90queue)" >&2; exit 2 ;;
  esac
  run=$W/runs/$arm
  if [ ! -f $run/done ]; then
    rm -rf $run $W/evals/$arm
    $PA pretrain ppa --data $PREPARED --init-from $init --run-dir $run --no-progress \
      --set trainer.max_steps=$STEPS --set trainer.warmup_steps=$(( STEPS / 10 )) --set trainer.lr=$LR \
      --set trainer.log_every=1 --set trainer.save_every=$STEPS \
      --set objectives.0.config.queue_size=$QUEUE --set objectives.0.config.momentum=$MOMENTUM \
      --set objectives.0.config.pooling=$POOLING "${extra[@]}"
    echo "$init" > $run/done
  fi
  evaluate $run $arm
done

$PY bench/ppa_report.py --work $W --arms $ARMS --command "env STEPS=$STEPS LR=$LR HIGH_LR=$HIGH_LR QUEUE=$QUEUE \
MOMENTUM=$MOMENTUM POOLING=$POOLING ARMS='$ARMS' flock /tmp/polyalign-cpu.lock bench/ppa.sh $PREPARED${ALIGNED:+ $ALIGNED}"
