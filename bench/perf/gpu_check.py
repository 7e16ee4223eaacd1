"""One prepared GPU check: every path polyalign runs on a GPU, how fast, and one paper claim above CPU scale, in
calls that fit the loans of the GPU machine (15 minutes of device time each, the start and every wait included).

THE PLAN for a loan (device seconds, budgets from bench/perf/gpu/supervisor.py):
  start of the machine and transfers                                     ~30-120
  call 1 (timeout_s 320): environment, gpu tests, kernels                budgets 15 + 150 + 120 = 285
  call 2 (timeout_s 460, at once while warm): throughput                 budget 420: 12 arms, each ~10 to build,
                                                                         3 warm-up and 10 timed steps (~0.1-0.5 s);
                                                                         compiling an arm took ~60 on an H200
  the 30 s idle before give_back                                         ~30
  total                                                                  ~830-900
A loan shared by several steps gives each less with `--budget STEP=SECONDS` (throughput measures its arms in the
order of ARMS, the most asked-about first; the aligner's arms share theirs equally). Alignment, Tatoeba and the
evidence step run on a loan of their own: `--steps alignment,tatoeba`, and
`--steps evidence --work /tmp/gcw` (made twice on the warm machine when the first call is cut: the second finds the
trainings and measures already done in --work and finishes the rest).
The commands (here first: `python bench/perf/gpu_pack.py`, then carry bench/work/gpu-pack and .whl, the wheels the
image lacks):
  call 1: pip install --target /tmp/site .whl/*.whl; PYTHONPATH=/tmp/site POLYALIGN_COMMIT=<hash>
          timeout 305 python3 bench/perf/gpu_check.py --steps environment,gpu_tests,kernels --out /tmp/gc;
          tar czf $OUT/gpu_check.tgz -C /tmp/gc .; cp /tmp/gc/gpu_check.json $OUT/call1.json
  call 2: the same with --steps throughput, timeout 450, $OUT/call2.json
  here:   python bench/perf/gpu_check.py --combine call1.json call2.json --out bench/results/gpu

Usage on the device machine: python3 bench/perf/gpu_check.py --out $OUT [--steps a,b]
Every step at tiny sizes on the CPU, to check the script itself (a few minutes; tests/test_gpu_check.py):
    .venv/bin/python bench/perf/gpu_check.py --dry-run --out /tmp/gpu_check
--out defaults to $OUT when set, else bench/results/gpu. Writes gpu_check.md, gpu_check.json and logs/ (every
command's output) there.

Steps, each in its own process with a wall-clock budget (a step that overruns is killed and recorded
as failed, with what it had measured so far, and the next one starts):
1. environment: GPU, memory, driver / CUDA / torch versions, bf16, SDPA's flash kernel.
2. gpu tests: `torchrun --nproc_per_node 1 -m polyalign.cli pretrain xlm` with trainer.distributed=ddp through a
   checkpoint, then `--resume`; a torchrun DDP probe on NCCL (gloo on CPU); `pytest -m gpu tests/test_gpu.py`.
3. kernels: one layer's attention, forward + backward, at XLM-R-base shape (B 64, H 12, T 512, hs 64, bf16): SDPA's
   flash kernel without a bias, XLM-E's gated relative bias materialised, and through FlexAttention (its tile sizes
   and torch's); FlexAttention's values and gradients against the materialised bias in fp32 (bench/perf/gpu/kernels.py).
4. throughput: every recipe (so every objective) through the trainer's own step at XLM-R-base size on the data
   pack, packed rows where `data.pack` exists; tokens/s, MFU against the data sheet's bf16 peak and the measured
   8192^3 matmul, peak memory; MLM beside XLMRobertaForMaskedLM, MRTD beside ELECTRA; XLM-E with and without its gated
   bias (bench/perf/gpu/throughput.py).
5. alignment: `polyalign align` (argmax, layer 8) on 20,000 sentence pairs against the same computation written
   plainly with transformers (SimAlign's way), and `polyalign evaluate alignment`, with multilingual-e5-small
   (models/multilingual-e5-small; else `polyalign import-e5`; else a randomly initialised model of its shape).
6. tatoeba: `polyalign evaluate tatoeba --langs tatoeba14 --layers all` with the same model, seconds.
7. evidence: the evidence study's section xlm-e-gpu (XLM-E vs MLM + TLM from scratch, 3e16 FLOPs per arm, 12 x 768)
   on the carried data pack, measured and judged by the evidence page's rule (bench/perf/gpu/evidence.py).
8. aligner: the word aligner at GPU scale (bench/perf/gpu/aligner.py): from the trimmed multilingual-e5-small of
   `python bench/perf/aligner_pack.py` (carry bench/work/aligner-pack), self-training and DWA beside it over the
   packed bitext, WiSE-FT, AER on the 7 gold sets by the rule written there, `align` pairs/s; `--work` resumes it.
A step records `ok`, `skipped: <reason>` or `failed: <one line>`, and so does each of its parts.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script on the device machine: `bench` from this checkout
# What a step's process runs, and the names tests/test_gpu_check.py reaches through this script:
from bench.perf.gpu.alignment import hf_align  # noqa: E402
from bench.perf.gpu.evidence import step_evidence  # noqa: E402, F401
from bench.perf.gpu.gpu_tests import ddp_probe  # noqa: E402
from bench.perf.gpu.step import Step  # noqa: E402
from bench.perf.gpu.supervisor import (  # noqa: E402, F401
    NOT_SELECTED,
    STEPS,
    combine,
    run_check,
    run_step,
    step_status,
    write_results,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_out = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "bench" / "results" / "gpu"
    ap.add_argument("--out", type=Path, default=default_out, help="folder for gpu_check.md, .json and logs/")
    ap.add_argument("--dry-run", action="store_true", help="every step on the CPU at tiny sizes (< 1 minute)")
    ap.add_argument("--steps", help=f"comma list of steps to run (default all: {','.join(STEPS)})")
    ap.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="STEP=SECONDS",
        help="a step's wall-clock budget for this call, in place of its default (repeatable)",
    )
    ap.add_argument("--combine", nargs="+", type=Path, help="gpu_check.json files of several calls -> one page")
    ap.add_argument("--step", choices=list(STEPS), help=argparse.SUPPRESS)  # a step's own process
    ap.add_argument(
        "--work",
        type=Path,
        help="keep models and runs here (default: a temporary folder); a second "
        "call with the same folder skips finished trainings and measures",
    )
    ap.add_argument("--logs", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--ddp-probe", type=Path, help=argparse.SUPPRESS)  # a torchrun worker of the probe
    ap.add_argument("--hf-align", nargs=6, help=argparse.SUPPRESS)  # the transformers side of step 4
    args = ap.parse_args()
    if args.step:
        STEPS[args.step][2](Step(args.step, args.work, args.logs, args.deadline, args.dry_run))
    elif args.ddp_probe:
        ddp_probe(args.ddp_probe, args.dry_run)
    elif args.hf_align:
        folder, src, tgt, out, layer, device = args.hf_align
        hf_align(Path(folder), Path(src), Path(tgt), Path(out), int(layer), device)
    elif args.combine:
        args.out.mkdir(parents=True, exist_ok=True)
        write_results(args.out, combine(args.combine))
        print(f"wrote {args.out / 'gpu_check.md'} and gpu_check.json")
    else:
        steps = args.steps.split(",") if args.steps else list(STEPS)
        if unknown := [s for s in steps if s not in STEPS]:
            ap.error(f"--steps: unknown {', '.join(unknown)}; the steps are {', '.join(STEPS)}")
        budgets = {}
        for given in args.budget:
            name, _, seconds = given.partition("=")
            if name not in STEPS or not seconds.replace(".", "", 1).isdigit():
                ap.error(f"--budget {given}: STEP=SECONDS with a step of {', '.join(STEPS)}")
            budgets[name] = float(seconds)
        args.out.mkdir(parents=True, exist_ok=True)
        run_check(args.out, args.dry_run, steps, args.work, budgets)
        print(f"wrote {args.out / 'gpu_check.md'} and gpu_check.json")


if __name__ == "__main__":
    main()
