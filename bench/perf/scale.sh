#!/usr/bin/env bash
# Scale bench. (1) Peak RSS of `prepare` and of training on a corpus and on the same corpus 10x larger.
# (2) torchrun DDP with 2 gloo processes against 1 process with 2 accumulation steps (recipe `mlm` size):
# the trainer's data slots give both the same micro-batches, so the loss curves must agree.
# Heavy steps take /tmp/polyalign-cpu.lock. Writes bench/results/scale.{md,json} via bench/perf/scale_report.py.
# Usage: bench/perf/scale.sh            (PY=path/to/python to use another interpreter; ~15 min on 2 cores)
#        NO_LOCK=1 flock /tmp/polyalign-cpu.lock bench/perf/scale.sh     (to hold the lock for the whole bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
PA="$PY -m polyalign.cli"
LOCK=/tmp/polyalign-cpu.lock
locked() { if [ -n "${NO_LOCK:-}" ]; then "$@"; else flock $LOCK "$@"; fi; }
W=bench/work/scale
SHARED=../shared/data/train
RSS=$W/rss.jsonl
mkdir -p $W

# 1x corpus: English and German monolingual text plus the en-de parallel pair. 10x: every file concatenated
# 10 times (gzip members concatenate into one valid stream), so lines and tokens are exactly 10x.
make_corpus() {  # name copies
  local dir=$W/corpus-$1
  [ -d "$dir" ] && return 0
  mkdir -p "$dir/mono" "$dir/parallel"
  for f in mono/en.txt.gz mono/de.txt.gz parallel/en-de.en.gz parallel/en-de.de.gz; do
    for _ in $(seq "$2"); do cat "$SHARED/$f"; done > "$dir/$f"
  done
}
make_corpus 1x 1
make_corpus 10x 10

rm -f $RSS
# prepare = sample tokenizer text, train SentencePiece (fixed sample size), tokenize everything into shards.
for size in 1x 10x; do
  rm -rf $W/prepared-$size
  locked $PY -m bench.perf.peak_rss $RSS prepare-$size -- $PA prepare --out $W/prepared-$size \
    --mono $W/corpus-$size/mono --parallel $W/corpus-$size/parallel --vocab-size 8000 --tokenizer-sample-lines 100000
done
# training = recipe `xlm` (MLM on mono + TLM on parallel: both kinds of stream), 10 steps and a checkpoint.
for size in 1x 10x; do
  rm -rf $W/run-$size
  locked $PY -m bench.perf.peak_rss $RSS train-$size -- $PA pretrain xlm --data $W/prepared-$size \
    --run-dir $W/run-$size --no-progress --set trainer.max_steps=10 --set trainer.save_every=10 --set trainer.log_every=1
done

# DDP: dropout off, so that the only difference left is the order of floating-point reductions.
DATA=bench/work/prepared-xnli15
COMMON=(--data $DATA --no-progress --set trainer.max_steps=20 --set trainer.warmup_steps=2 --set trainer.log_every=1
  --set trainer.save_every=1000 --set model.dropout=0.0)
rm -rf $W/ddp $W/single
locked env OMP_NUM_THREADS=1 $PY -m torch.distributed.run --standalone --nproc_per_node 2 \
  -m polyalign.cli pretrain mlm --run-dir $W/ddp "${COMMON[@]}" --set trainer.threads=1
locked $PA pretrain mlm --run-dir $W/single "${COMMON[@]}" --set trainer.grad_accumulation=2
$PY -m bench.perf.scale_report
