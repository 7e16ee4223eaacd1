"""The GPU check: the runner (bench/run.py) given the GPU steps below and a budget, in the order 15 lent minutes
must prove things (device seconds; the machine's start, the transfers and the idle wait count too).

  call 1 (hard cap ~150 s): `gpu-call-1` = environment, gpu-tests (`pytest -m gpu`, torchrun pretrain + --resume at
         world size 1: NCCL refuses two ranks on one GPU), profile (3 MLM steps at 512-token rows: top kernels,
         graph breaks and recompiles, host syncs, the loss path)
  call 2 (at once while warm, ~420 s): `gpu-call-2` = throughput: MLM, TLM and XLM-E at 512-token rows, packed
         where the recipe packs, beside transformers' XLMRobertaForMaskedLM on the same examples padded per batch
         (SDPA, eager; compiled beside it if time allows); the other recipes and 128-token rows with time left
  with a loan of its own: kernels (attention with XLM-E's gated bias), aligner (the word aligner at GPU scale)

The commands (here first: `python -m bench.run gpu-pack`, then carry bench/work/gpu-pack and .whl, the wheels the
image lacks):
  call 1: pip install --target /tmp/site .whl/*.whl; PYTHONPATH=/tmp/site POLYALIGN_COMMIT=<hash> timeout 160
          python3 -m bench.run gpu-call-1 --out $OUT/gc1
  call 2: ... timeout 450 python3 -m bench.run gpu-call-2 --out $OUT/gc2
  here:   python -m bench.run gpu-check --combine gc1/gpu_check.json gc2/gpu_check.json
          --out bench/results/gpu/check-<commit>
A step's budget for one call: `--budget STEP=SECONDS` (repeatable); the evidence study's GPU section runs through
the study runner: `python -m bench.run evidence xlm-e-gpu --device cuda --data <the pack's prepared folder>`.
Every step at tiny sizes on the CPU, to check the steps themselves (a few minutes; tests/test_gpu_check.py):
    python -m bench.run gpu-check --dry-run --out /tmp/gpu_check
Writes gpu_check.json (the record) and gpu_check.md (drawn from it by bench/page.py) and logs/ into --out.
A step records `ok`, `skipped: <reason>` or `failed: <one line>`, and so does each of its parts.
"""

from __future__ import annotations

from bench.perf.gpu.aligner import step_aligner
from bench.perf.gpu.environment import step_environment
from bench.perf.gpu.gpu_tests import step_gpu_tests
from bench.perf.gpu.kernels import step_kernels
from bench.perf.gpu.profile import step_profile
from bench.perf.gpu.throughput import step_throughput
from bench.step import Step

GPU = dict(kind="gpu", device="cuda")
STEPS = (
    Step("environment", "1. Environment", step_environment, budget_s=10, **GPU),
    Step("gpu-tests", "2. pytest -m gpu, torchrun pretrain + resume", step_gpu_tests, budget_s=80, **GPU),
    Step("profile", "3. Profile of 3 MLM steps at 512-token rows", step_profile, budget_s=60, dry_budget_s=240, **GPU),
    Step(
        "throughput", "4. Training throughput at 512-token rows", step_throughput, budget_s=420, dry_budget_s=300, **GPU
    ),
    Step(
        "kernels",
        "5. Attention with XLM-E's gated bias: flash, materialised, FlexAttention",
        step_kernels,
        budget_s=120,
        **GPU,
    ),
    Step(
        "aligner",
        "6. The aligner at GPU scale: self-training and DWA",
        step_aligner,
        budget_s=565,
        dry_budget_s=300,
        **GPU,
    ),
)
CALLS = {
    "gpu-check": tuple(s.name for s in STEPS),
    "gpu-call-1": ("environment", "gpu-tests", "profile"),
    "gpu-call-2": ("throughput",),
}
"""The GPU check's calls by name: each is the runner given these steps (`python -m bench.run NAME`)."""
TOTAL_BUDGET_S = {"gpu-call-1": 150, "gpu-call-2": 440, "gpu-check": 575}
"""A call's steps together, under its command's timeout so that a cut step is recorded."""
