#!/usr/bin/env bash
# Every method benchmark after the foundation (bench/foundation.sh), one after another, each under
# /tmp/polyalign-cpu.lock, with the budgets used for the published bench/results: sized so that all of them fit
# in about an hour of a 2-core machine, which makes them smoke-scale measurements (see each report). Every
# script skips what it has already finished, so a rerun only adds what is missing; larger budgets are arguments
# or variables of each script (see its header).
# Usage: bench/all.sh            (needs bench/work/runs/{mlm,xlm} from bench/foundation.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
LOCK=/tmp/polyalign-cpu.lock
export PY=${PY:-$PWD/.venv/bin/python} PA=${PA:-$PWD/.venv/bin/polyalign}
step() { local name=$1; shift; echo "== $name $(date +%H:%M:%S)"; "$@" || echo "== $name FAILED (exit $?)"; }

step ernie-m flock $LOCK bench/ernie-m.sh                # Table 6 (40 steps each) and Figure 5 (20 steps per ratio)
step alignment bench/alignment.sh 3                      # takes the lock per step; 3 idle minutes per arm
step ppa flock $LOCK bench/ppa.sh bench/work/prepared-all24 # 300 steps per arm (the folder: bench/best.sh)
step scale bench/scale.sh                                # takes the lock per step
step veco flock $LOCK bench/veco.sh                      # 60 steps of the veco recipe from small-base, plug-in XNLI
step xtreme env EXTRA="--max-train 400 --max-select 200 --max-eval 150" flock $LOCK bench/xtreme.sh
# The papers' claims as A/B at equal compute (bench/results/evidence.md), one section at a time under the lock
for section in $($PY -c 'from bench.evidence.claims import sections; print(" ".join(sections()))'); do
  step evidence-$section flock $LOCK bench/evidence.sh $section
done
echo "== done $(date +%H:%M:%S)"
