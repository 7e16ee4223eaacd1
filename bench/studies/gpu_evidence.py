"""The arms and sizes of the evidence study's one claim sized for a GPU: XLM-E's MRTD + TRTD against
MLM + TLM from scratch at 3e16 training FLOPs per arm, ~400x the largest CPU budget (8e13), an XLM-R-base-sized
encoder (12 x 768). The claim is built by the CPU rows' builder (bench/studies/evidence/xlm_e.py, `GPU_CLAIMS`).

The CPU rows of the same claim (sections xlm-e-1..3) read "not reproduced: scale": at 8e13 FLOPs the discriminators
never beat the majority class and the generators stay above the unigram floor. This section asks whether the claim
holds once the premises can. It runs on a GPU only (`Setup.device`): `python -m bench.run evidence xlm-e-gpu
--device cuda`, on the data pack of bench/perf/gpu_pack.py. Same measures, checks and rule as the CPU rows.
"""

from __future__ import annotations

from bench.arm import Arm
from polyalign.languages import XNLI_LANGUAGES

GPU_FLOPS = 3e16
GPU_MODEL = ("model.hidden_size=768", "model.num_layers=12", "model.num_heads=12", "model.ffn_size=3072")
# 2 x 16,384 tokens per objective and step in two accumulation slots (a batch-building process each: one process
# builds ~0.8M tokens/s, measured on the CPU here). lr 3e-4 and clipping at 1.0 for both arms: a post-norm 12-layer
# encoder gets ~800 steps and 10% warm-up; the recipes' 5e-4 was sized for 6 x 384. max_minutes guards the GPU
# lease: an arm slower than planned stops short of the budget, its logged FLOPs say so, and the rule reads unequal
# compute. On one H200, MLM + TLM spends 3e16 in 133 s and XLM-E 1.9e16 in 180 s (a 3-minute guard cut XLM-E short);
# 5 minutes fits XLM-E's ~290 s in one call of a GPU loan.
GPU_TRAINING = (
    "data.mono.max_tokens=16384",
    "data.parallel.max_tokens=16384",
    "trainer.grad_accumulation=2",
    "trainer.loader_workers=2",
    "trainer.lr=3e-4",
    "trainer.clip_norm=1.0",
    "trainer.max_minutes=5.0",
)
# FLOPs per step: 6 x 85M non-embedding parameters x 65,536 tokens, plus attention and the heads (xlm-e: a 4-layer
# generator beside the 12-layer discriminator). Seconds per step: at ~350 TFLOP/s. Both only size the section.
GPU_XLM = Arm("xlm-gpu", "xlm", (*GPU_MODEL, *GPU_TRAINING), None, seconds_per_step=0.11, flops_per_step=3.6e13)
GPU_XLM_E = Arm("xlm-e-gpu", "xlm-e", (*GPU_MODEL, *GPU_TRAINING), None, seconds_per_step=0.14, flops_per_step=4.8e13)
GPU_LANGUAGES = XNLI_LANGUAGES
