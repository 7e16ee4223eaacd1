"""The GPU check's tests: torchrun pre-training through a checkpoint and --resume (one process), `pytest -m gpu`."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from bench.perf.gpu.step import NO_CUDA, Step, run_command, sample_prepared, torchrun


def step_gpu_tests(step: Step) -> None:
    import torch

    if not torch.cuda.is_available() and not step.dry_run:
        step.part("all", status=NO_CUDA)
        return
    pretrain_part(step)
    pytest_part(step)  # last: it takes what is left of the budget, the others have measured by then


def pytest_part(step: Step) -> None:
    """Every test marked `gpu` (each skips itself without CUDA: on the CPU, --dry-run, this checks the command)."""
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "tests", "-p", "no:cacheprovider"]
    command += ["--durations=0"]  # where the budget goes, in the log
    status, seconds = run_command(step, "pytest", command)
    log = step.log("pytest")
    counts = re.findall(r"^=*\s*(\d+ \w+.*) in [\d.]+s", log.read_text(errors="replace"), re.M) if log.is_file() else []
    summary = counts[-1] if counts else "no summary line"
    if status == "ok" and "passed" not in summary:
        status = f"skipped: {summary}"  # every test skipped (no CUDA)
    step.part("pytest -m gpu", status=status, seconds=seconds, summary=summary)


def pretrain_part(step: Step) -> None:
    """xlm (MLM + TLM) under torchrun, stopped at a checkpoint halfway, then resumed to the end."""
    n = 4 if step.dry_run else 20
    run = step.work / "pretrain-run"
    sets = [f"trainer.max_steps={n}", f"trainer.save_every={n // 2}", "trainer.log_every=1", "trainer.warmup_steps=1"]
    sets += ["trainer.distributed=ddp", "trainer.loader_workers=2"]
    if step.dry_run:
        sets += ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=4", "model.ffn_size=64"]
        sets += ["data.mono.max_tokens=512", "data.parallel.max_tokens=512", "trainer.loader_workers=0"]
    try:
        prepared = sample_prepared(step)
    except RuntimeError as e:
        step.part("torchrun pretrain + resume", status=f"failed: {e}")
        return
    args = ["-m", "polyalign.cli", "pretrain", "xlm", "--data", str(prepared), "--run-dir", str(run), "--no-progress"]
    first = args + [x for s in [*sets, f"trainer.stop_at={n // 2}"] for x in ("--set", s)]
    status, seconds = run_command(step, "pretrain", torchrun(*first))
    part = step.part("torchrun pretrain + resume", status=status, first_seconds=seconds)
    if status != "ok":
        return
    resume = ["-m", "polyalign.cli", "pretrain", "--run-dir", str(run), "--resume", "--no-progress"]
    status, seconds = run_command(step, "resume", torchrun(*resume, "--set", "trainer.stop_at=0"))
    part.update(resume_seconds=seconds)
    if status == "ok":
        status = check_run(run, n)
    step.part("torchrun pretrain + resume", status=status, **run_numbers(run))


def check_run(run: Path, steps: int) -> str:
    """`ok` when the metrics log every step once, finite, and both checkpoints are there."""
    import math

    records = metrics(run)
    logged = [r["step"] for r in records]
    if logged != list(range(1, steps + 1)):
        return f"failed: logged steps {logged}, expected 1..{steps}"
    if not all(math.isfinite(r["loss"]) for r in records):
        return "failed: a loss is not finite"
    saved = sorted(p.name for p in (run / "checkpoints").iterdir())
    if saved != [f"step-{steps // 2:07d}", f"step-{steps:07d}"]:
        return f"failed: checkpoints {saved}"
    return "ok"


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def run_numbers(run: Path) -> dict:
    if not (run / "metrics.jsonl").is_file():
        return {}
    records = metrics(run)
    last = {"steps": records[-1]["step"], "last_loss": records[-1]["loss"], "tokens_per_s": records[-1]["tokens_per_s"]}
    return last | {"loss_path": records[0].get("loss_path", "not recorded")}
