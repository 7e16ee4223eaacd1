"""What every real-start claim shares: the start (multilingual-e5-small), the data prepared with its tokenizer, the
budget, the continued-training settings, and the override that leaves a new MLM head cold."""

from __future__ import annotations

from functools import partial

from bench import claim as harness
from bench.arm import Arm, Budget

E5 = "models/multilingual-e5-small"
XNLI15 = ("en", "ar", "bg", "de", "el", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")
E5_DATA = "bench/work/prepared-e5"
STEPS = Budget(steps=200)
# Departures from the papers, the same for every arm so that only the objectives differ:
# - lr 5e-5 with 10% warmup: 200 steps continue a converged encoder, the scale of fine-tuning (PPA's own
#   post-pretraining lr is 3e-5, §3.3); XLM-Align's and ERNIE-M's 2e-4 belong to 150k+ steps of large batches.
# - 1,024 tokens per objective and step (the recipes' 8,192 for CPU time): 200 steps see ~0.2M tokens each.
# - e5 has no MLM head: the MLM/TLM arms' head (dense + LayerNorm; the output is tied to the embeddings) starts
#   new, in every arm alike. The trainer first trains such a head alone (trainer.head_warmup_steps, outside the
#   200 steps); the cold-head arms (a warm-up of 0, COLD) are diagnostics of what an untrained head does.
CONTINUED = ("trainer.lr=5e-5", "data.mono.max_tokens=1024", "data.parallel.max_tokens=1024")
COLD = "trainer.head_warmup_steps=0"
CONTINUED_COLD = (*CONTINUED, COLD)
COLD_HEAD = "cold head (diagnostic: the MLM head new and untrained): "
"""How a cold-head row's statement opens."""
START = Arm("start", None, init_from=E5)
claim = partial(harness.claim, budget=STEPS, start=E5, data=E5_DATA)
"""A claim of the study: the same start, data and budget for every one."""
