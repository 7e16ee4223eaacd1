"""What the GPU check's steps share: the context they record on (bench/step.py), the commands they run, the device
they measure, the bundled sample prepared once per check."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.step import NO_CUDA, ROOT, UNFINISHED, one_line, run_command  # noqa: F401  (the steps' imports)
from bench.step import Context as Step

SHARED = ROOT.parent / "shared"
SAMPLE = ROOT / "polyalign" / "sample_data"


def polyalign_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "polyalign.cli", *args]


def torchrun(*args: str) -> list[str]:
    """torchrun, one process (NCCL refuses two ranks on one GPU): --standalone picks a free rendezvous port."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", *args]


def device_name(step: Step) -> str:
    import torch

    return "cuda" if torch.cuda.is_available() and not step.dry_run else "cpu"


def sample_prepared(step: Step) -> Path:
    """The bundled sample, prepared once per check (steps share it through the work folder)."""
    out = step.work / "prepared"
    if not (out / "meta.json").is_file():
        args = ["prepare", "--mono", str(SAMPLE / "mono"), "--parallel", str(SAMPLE / "parallel")]
        status, _ = run_command(step, "prepare", polyalign_cli(*args, "--out", str(out), "--vocab-size", "2000"))
        if status != "ok":
            raise RuntimeError(f"prepare: {status}")
    return out
