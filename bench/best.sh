#!/usr/bin/env bash
# The best recipe (issue 22) and the ablations that chose it; writes bench/results/best.md, best.json, best/.
#   stage 1  polyalign pretrain best-sentences    translation ranking from random init      (50 min)
#   stage 2  polyalign pretrain best-words        + word-level objective, from stage 1      (11 min)
# Stage-2 arms at equal minutes from the same stage-1 model: contrast alone, + TLM, + DWA (with its TLM), and
# contrast with harder negatives.
# Heavy (about 100 CPU-minutes): run the whole script under the shared CPU lock (it takes no lock itself):
#   flock /tmp/polyalign-cpu.lock bench/best.sh
# PA / PY name the polyalign command and the Python interpreter (default: the repository's .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PA=${PA:-.venv/bin/polyalign}
PY=${PY:-.venv/bin/python}
W=${W:-bench/work}
DATA=$W/prepared-all24
TATOEBA=../shared/data/eval/tatoeba
GOLD=../shared/data/eval/word_alignment

# Every language of ../shared/data/train, the Tatoeba test sentences excluded from training, 1,000 pairs per
# language held out as the dev split that every choice below is made on.
[ -d $DATA ] || $PA prepare --mono ../shared/data/train/mono --parallel ../shared/data/train/parallel \
  --tokenizer-from ../shared/models/small-base --exclude $TATOEBA --dev-pairs 1000 --out $DATA --no-progress

evaluate() {  # run: Tatoeba on the dev split and the test set (every training language), AER on 7 gold sets
  local run=$1 langs
  # every training language with a Tatoeba file here (the others are held out and measured elsewhere)
  langs=$($PY -c "import sys; from pathlib import Path; from polyalign.checkpoint import load_model; \
from polyalign.languages import to_tatoeba; codes = [to_tatoeba(c) for c in load_model(sys.argv[1]).languages]; \
print(','.join(c for c in codes if Path(sys.argv[2], f'tatoeba.{c}-eng.{c}').is_file()))" $run $TATOEBA)
  [ -f $run/eval-dev/tatoeba.json ] || $PA evaluate tatoeba --model $run --data $DATA/dev --langs all --layers all \
    --out $run/eval-dev --no-progress
  [ -f $run/eval-test/tatoeba.json ] || $PA evaluate tatoeba --model $run --data $TATOEBA --langs $langs \
    --layers all --out $run/eval-test --no-progress
  for g in $(ls $GOLD); do
    [ -f $run/eval-aer/$g/alignment.json ] || $PA evaluate alignment --model $run --gold $GOLD/$g --method ot \
      --encoding pair --layers all --out $run/eval-aer/$g --no-progress
  done
}

S1=$W/runs/best-sentences
[ -d $S1 ] || $PA pretrain best-sentences --data $DATA --run-dir $S1 --no-progress
evaluate $S1
for arm in contrast tlm dwa hard; do
  run=$W/runs/best-words-$arm
  [ -d $run ] || $PA pretrain bench/best/words-$arm.yaml --data $DATA --init-from $S1 --run-dir $run --no-progress
  evaluate $run
done
$PY bench/best_report.py --work $W
