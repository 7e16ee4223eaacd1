"""Where a rebuilt aligner's weights come from bit for bit: one bf16 training step's numbers (autocast linear layer,
forward and backward, as the trainer runs it) under each instruction set oneDNN may pick (ONEDNN_MAX_CPU_ISA) and
each thread count. Equal hashes: the setting does not change the arithmetic; different: two machines that differ in
it train different weights from the same command, and the difference grows over 1,000 steps.

  .venv/bin/python -m bench.probes.bf16_isa [--out bench/results/bf16_isa.json]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from bench.reporting import commit, machine, write_json

SETTINGS = [("default", 1), ("default", 2), ("AVX512_CORE", 2), ("AVX2", 2)]
"""(ONEDNN_MAX_CPU_ISA, threads): this machine's own choice (AVX512 with bf16 instructions where the CPU has them)
at one and two threads, then the older instruction sets a machine without them runs."""


def step_hashes() -> list[str]:
    """Hashes of the output and both gradients of one e5-small-shaped bf16 linear layer (384 -> 1536)."""
    import torch

    torch.manual_seed(0)
    x, w = torch.randn(512, 384, requires_grad=True), torch.randn(1536, 384, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.nn.functional.linear(x, w)
    y.float().square().sum().backward()
    return [hashlib.sha1(t.detach().float().numpy().tobytes()).hexdigest()[:12] for t in (y, x.grad, w.grad)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for isa, threads in SETTINGS:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        if isa != "default":
            env["ONEDNN_MAX_CPU_ISA"] = isa
        code = "from bench.probes.bf16_isa import step_hashes; print(' '.join(step_hashes()))"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        rows.append({"isa": isa, "threads": threads, "output/input grad/weight grad": out.stdout.split()})
        print(isa, threads, *rows[-1]["output/input grad/weight grad"], flush=True)
    if args.out:
        write_json(args.out, {"commit": commit(), "machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
