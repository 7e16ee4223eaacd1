#!/usr/bin/env bash
# Issue 19's one bench harness: every claim of bench/evidence/claims.py (PPA, XLM-Align, ERNIE-M, XLM-E, VECO) as
# an A/B at equal compute, trained and measured by bench/evidence/run.py, one section at a time; then
# bench/evidence/write.py writes bench/results/evidence.md, evidence.json and evidence/*.png from every
# section's JSON (bench/results/evidence/sections/SECTION.json).
# CPU-minutes per section on the shared 2-core machine, worst case (seed 1 for every trained arm; about half
# when seed 0 settles every claim), run in this order: runs live in $W/evidence/runs under a hash of what they
# train, so a section reuses the runs and measures of the sections before it (the PPA ablations and XNLI reuse
# `ppa`'s full system and MLM + TLM; xlm-e-xnli reuses xlm-e-1's runs; veco reuses xlm-e-2's MLM + TLM).
# `python -m bench.evidence.claims` prints them from the claims:
#   ppa ~41   ppa-no-moco ~20   ppa-no-tlm ~13   ppa-xnli ~15   xlm-align ~44   ernie-m ~43   xlm-e-1 ~21
#   xlm-e-2 ~28   xlm-e-3 ~44   xlm-e-no-trtd ~11   xlm-e-xnli ~12 (~20 alone)   xlm-e-continued ~38
#   xlm-e-continued-300 ~41   xlm-e-warm-generator ~21   xlm-e-warm-small-generator ~16   xlm-e-held-embeddings ~26
#   xlm-e-same-input ~11 (the XLM-E diagnostics continued from small-base)   xlm-e-absolute-positions ~22
#   xlm-e-small-batch ~44 (from scratch at xlm-e-3's budget)   veco ~20 (~32 alone, from scratch with cpu-small)
#   xlm-align-aligned ~32, ernie-m-aligned ~30 (from a sentence-aligned start: need bench/work/runs/best-sentences,
#   bench/best.sh's stage 1)
#   plus ~4 to prepare bench/work/prepared-all24 when it is missing (bench/best.sh's folder, --dev-pairs 1000).
# Resumable: every (arm, seed) run leaves a `done` marker and every measure its JSON, so a rerun, or a run of an
# interrupted section, only does what is missing. The script takes no lock: run one section at a time under
# the shared CPU lock, e.g.
#   flock /tmp/polyalign-cpu.lock bench/evidence.sh ppa
#   PREPARED=bench/work/prepared-all24 flock /tmp/polyalign-cpu.lock bench/evidence.sh xlm-align
# (a run's hash includes the PREPARED path as written: another path for the same folder trains every arm again)
# No section: all of them (about 5 hours, 10 at worst), then the page. `bench/evidence.sh --write`: only the page
# (preparing the folder first when it is missing, ~4 min: the investigations read unigram floors from it).
# The FLOP-budget sections (xlm-e-*, veco) need `trainer.max_flops` in the trainer.
# Environment: PREPARED (prepared folder with a dev split), PY (Python), W (work folder, default bench/work).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
W=${W:-bench/work}
PREPARED=${PREPARED:-$W/prepared-all24}
EVAL=../shared/data/eval

# The same command as bench/best.sh, so the benches share the folder. --write needs it too: the investigations read
# the unigram floors of the sections' training text from it.
[ -d $PREPARED ] || $PY -m polyalign.cli prepare --mono ../shared/data/train/mono \
  --parallel ../shared/data/train/parallel --tokenizer-from ../shared/models/small-base --exclude $EVAL/tatoeba \
  --dev-pairs 1000 --out $PREPARED --no-progress
if [ "${1:-}" != --write ]; then
  SECTIONS=("$@")
  [ ${#SECTIONS[@]} -gt 0 ] || read -ra SECTIONS <<< "$($PY -c 'from bench.evidence.claims import sections; \
print(" ".join(sections()))')"
  for section in "${SECTIONS[@]}"; do
    # exit code 3: the section's start model is missing (xlm-align-aligned before bench/best.sh): skipped
    $PY -m bench.evidence.run $section --data $PREPARED --work $W/evidence --eval $EVAL --python $PY || \
      { rc=$?; [ $rc = 3 ] || exit $rc; }
  done
fi
$PY -m bench.evidence.write --data $PREPARED --command "PREPARED=$PREPARED flock /tmp/polyalign-cpu.lock bench/evidence.sh${*:+ $*}"
