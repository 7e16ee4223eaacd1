"""One prepared GPU check (issues 34, 46): every path polyalign runs on a GPU, how fast, and one paper claim above
CPU scale, in two commands that fit one 15-minute loan of the GPU machine.

THE PLAN (device seconds; the loan's 900 include the machine's start and every wait). Measured on the first loan
(one H200, 2026-11-26, bench/results/gpu/gpu_check.md): start and transfers ~30; call 1 179; call 2 489 with the
XLM-E arm cut at 1.9e16 FLOPs by a 3-minute guard (it ran at 105 model TFLOP/s, MLM + TLM at 225). The second loan
(one H200, 2026-11-27, bench/results/gpu/loan2.md) ran the evidence step alone: XLM-E finished its 641 steps in 4.8
minutes, but the step needs ~10.1 minutes (probes 0.4, MLM + TLM 2.4 + measures 1.2, XLM-E 4.9 + measures 1.2) and
the call's limit cut it after one gold set. So call 2 now keeps its runs in a fixed `--work` folder and is made
twice on the warm machine (call 2b finds the trainings and the measures already done and finishes the rest).
The third loan (one H200, 2026-11-27, bench/results/gpu/loan3/) ran that: call 2 578 s (both trainings, all measures but
XLM-E's last), call 2b 66 s, 688 s held with the start; the verdict was reached at equal FLOPs. Its call 2 was cut by
the command's own `timeout 578` before the supervisor's 590-s step budget, so call 2's record reads 'not reached';
the step budget is now 565 s and the total 575, under the command's timeout, so a cut step is recorded as cut.
  start of the machine and transfers                                     ~30-120
  call 1 (timeout_s 260): environment, gpu tests, throughput             budgets 15 + 100 + 120 = 235
  call 2 (timeout_s 600, at once while warm): the evidence step          budget 565: probes ~40, MLM + TLM ~135,
                                                                         XLM-E ~290 (5-minute guard), measures ~110
  call 2b (if call 2 was cut): the rest of the evidence step             ~80
  the 30 s idle before give_back                                         ~30
  total                                                                  ~970: over 900 with call 1, so a loan
                                                                         after the first two runs calls 2 and 2b
                                                                         only (call 1's steps passed on loan 1)
The commands (here first: `python bench/perf/gpu_pack.py`, then carry the pack and the wheels the image lacks):
  call 1: pip install --target /tmp/site .whl/*.whl; PYTHONPATH=/tmp/site POLYALIGN_COMMIT=<hash>
          timeout 250 python3 bench/perf/gpu_check.py --steps environment,gpu_tests,throughput --out /tmp/gc;
          tar czf $OUT/gpu_check.tgz -C /tmp/gc .; cp /tmp/gc/gpu_check.json $OUT/call1.json
  call 2: the same with --steps evidence --work /tmp/gcw, timeout 585, $OUT/call2.json (the image's typer needs the
          carried one); call 2b: the same command again at once if call 2 was cut (~80 s more)
  here:   python bench/perf/gpu_check.py --combine call1.json call2.json --out bench/results/gpu
          (then copy evidence/xlm-e-gpu.json to bench/results/evidence/sections/ and `python -m bench.page evidence`)
Steps 4 and 5 (alignment, Tatoeba speed) run when a loan has time left: `--steps alignment,tatoeba`.

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
3. throughput: an XLM-R-base-sized encoder (12 x 768, 12 heads, FFN 3072, vocabulary 250,002, sequences of 512,
   bf16 autocast), polyalign's MLM step against transformers' XLMRobertaForMaskedLM on the same batches with
   the same AdamW; then polyalign with activation checkpointing and with torch.compile. tokens/s, MFU against
   the card's dense bf16 peak, peak memory.
4. alignment: `polyalign align` (argmax, layer 8) on 20,000 sentence pairs against the same computation written
   plainly with transformers (SimAlign's way), and `polyalign evaluate alignment`, with multilingual-e5-small
   (models/multilingual-e5-small; else `polyalign import-e5`; else a randomly initialised model of its shape).
5. tatoeba: `polyalign evaluate tatoeba --langs tatoeba14 --layers all` with the same model, seconds.
6. evidence: the evidence study's section xlm-e-gpu (XLM-E vs MLM + TLM from scratch, 3e16 FLOPs per arm, 12 x 768)
   on the carried data pack, measured and judged by the evidence page's rule (bench/perf/gpu/evidence.py).
7. aligner: the word aligner at GPU scale (bench/perf/gpu/aligner.py): from the trimmed multilingual-e5-small of
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
        args.out.mkdir(parents=True, exist_ok=True)
        run_check(args.out, args.dry_run, steps, args.work)
        print(f"wrote {args.out / 'gpu_check.md'} and gpu_check.json")


if __name__ == "__main__":
    main()
