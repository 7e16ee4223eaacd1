#!/usr/bin/env bash
# The best recipe (issue 22) and the ablations that chose it; writes bench/results/best.md, best.json, best/.
#   stage 1  polyalign pretrain best-sentences    translation ranking from random init      (50 min)
#   stage 2  polyalign pretrain best-words        harder negatives, from stage 1            (60 min)
# The ablation that chose stage 2: arms of 11 minutes each from the same stage-1 model: contrast alone, + TLM,
# + DWA (with its TLM), and contrast with harder negatives (what best-words runs for longer). Then the learning
# curve (Tatoeba-14 at every checkpoint of both stages) and the sentence-length analysis of the final model.
# Heavy (about 175 CPU-minutes): run the whole script under the shared CPU lock (it takes no lock itself):
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

dev_layer() {  # the layer with the best dev-split retrieval (both directions), as the protocol chooses
  $PY -c "import json, sys; d = json.load(open(sys.argv[1])); \
print(max(d['sweep'], key=lambda r: r['average']['both'])['layer'])" $1/eval-dev/tatoeba.json
}

S1=$W/runs/best-sentences
S2=$W/runs/best-words
[ -d $S1 ] || $PA pretrain best-sentences --data $DATA --run-dir $S1 --no-progress
[ -d $S2 ] || $PA pretrain best-words --data $DATA --init-from $S1 --run-dir $S2 --no-progress
evaluate $S1
evaluate $S2
for arm in contrast tlm dwa hard; do
  run=$W/runs/best-words-$arm
  [ -d $run ] || $PA pretrain bench/best/words-$arm.yaml --data $DATA --init-from $S1 --run-dir $run --no-progress
  evaluate $run
done
for run in $S1 $S2; do  # learning curve: Tatoeba-14 (all layers in one pass) at every kept checkpoint
  for ckpt in $run/checkpoints/step-*; do
    out=$run/curve/$(basename $ckpt)
    [ -f $out/tatoeba.json ] || $PA evaluate tatoeba --model $ckpt --data $TATOEBA --langs tatoeba14 --out $out \
      --no-progress
  done
done
[ -f $S2/length.json ] || $PY bench/best_length.py --model $S2 --dev $DATA/dev --tatoeba $TATOEBA \
  --layer $(dev_layer $S2) --out $S2/length.json
$PY bench/best_report.py --work $W
