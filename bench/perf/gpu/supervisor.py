"""The GPU check's supervisor: every step in its own process, in order, each within its budget and the total's;
the record of each call, and several calls combined into one."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.perf.gpu.aligner import step_aligner
from bench.perf.gpu.alignment import step_alignment
from bench.perf.gpu.environment import step_environment
from bench.perf.gpu.evidence import step_evidence
from bench.perf.gpu.gpu_tests import step_gpu_tests
from bench.perf.gpu.kernels import step_kernels
from bench.perf.gpu.page import write_page
from bench.perf.gpu.step import ENTRY, ROOT, child_env, end_tree, one_line
from bench.perf.gpu.tatoeba import step_tatoeba
from bench.perf.gpu.throughput import step_throughput
from bench.reporting import commit

TOTAL_BUDGET_S = 575  # one call's steps, under its command's timeout so a cut step is recorded (THE PLAN above)


STEPS = {  # name: (title, budget in seconds on the GPU, function)
    "environment": ("1. Environment", 15, step_environment),
    "gpu_tests": ("2. torchrun pretrain + resume, DDP probe, pytest -m gpu", 150, step_gpu_tests),
    "kernels": ("3. Attention with XLM-E's gated bias: flash, materialised, FlexAttention", 120, step_kernels),
    "throughput": ("4. Training throughput: every objective at XLM-R-base size on real data", 420, step_throughput),
    "alignment": ("5. Word alignment: polyalign vs transformers, AER", 110, step_alignment),
    "tatoeba": ("6. Tatoeba-14 with a layer sweep", 55, step_tatoeba),
    "evidence": ("7. Evidence above CPU scale: XLM-E vs MLM + TLM at 3e16 FLOPs", 565, step_evidence),
    "aligner": ("8. The aligner at GPU scale: self-training and DWA over the packed bitext", 565, step_aligner),
}
DRY_BUDGET_S = 120  # per step on a busy 2-core CPU: the dry run's steps take seconds, a budget is a safety net
# tiny trainings: evidence and aligner two each through the CLI and their measures, throughput eleven recipes
DRY_BUDGETS_S = {"evidence": 420, "throughput": 240, "aligner": 300}


def run_step(name: str, work: Path, logs: Path, dry_run: bool, budget: float) -> dict:
    """Run one step in a child process, killed at its budget; returns its record."""
    command = [sys.executable, str(ENTRY), "--step", name, "--work", str(work), "--logs", str(logs)]
    # The child stops its commands at its deadline and keeps a few seconds to save; then it is killed.
    command += ["--deadline", str(time.time() + budget - 5)] + (["--dry-run"] if dry_run else [])
    log = logs / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=child_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            code = None
            end_tree(process)
    seconds = time.perf_counter() - t0
    file = work / "steps" / f"{name}.json"
    record = json.loads(file.read_text()) if file.is_file() else {"parts": {}, "notes": []}
    record.update(name=name, title=STEPS[name][0], seconds=seconds, budget_s=budget)
    if code is None:
        record["status"] = f"failed: timed out after {seconds:.0f} s (budget {budget:.0f} s)"
    elif code != 0:
        record["status"] = f"failed: exit {code}: {one_line(log.read_text(errors='replace'))}"
    else:
        record["status"] = step_status(record["parts"])
    return record


def step_status(parts: dict) -> str:
    """A step is `ok` unless a part failed; skipped when every part was."""
    for name, part in parts.items():
        if part.get("status", "").startswith("failed"):
            return f"failed: {name}: {part['status'][len('failed: ') :]}"
    statuses = [p.get("status", "") for p in parts.values()]
    if statuses and all(s.startswith("skipped") for s in statuses):
        return statuses[0]
    return "ok" if statuses else "failed: recorded nothing"


def run_check(
    out: Path, dry_run: bool, steps: list[str] | None = None, work: Path | None = None, budgets: dict | None = None
) -> dict:
    """`budgets` (step: seconds) replaces steps' budgets for this call: a loan shared by several steps gives each
    less than a loan of its own would."""
    # Models, runs and data stay out of --out (the device tool brings back all of it); logs come back. A given
    # `work` folder is kept: a second call on the warm machine finds the first one's trainings and measures.
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
        return check_in(work, out, dry_run, steps or list(STEPS), budgets or {})
    with tempfile.TemporaryDirectory(prefix="gpu_check") as scratch:
        return check_in(Path(scratch), out, dry_run, steps or list(STEPS), budgets or {})


NOT_SELECTED = "skipped: not in --steps"


def check_in(work: Path, out: Path, dry_run: bool, selected: list[str], budgets: dict) -> dict:
    t0 = time.perf_counter()
    result = {
        "command": "bench/perf/gpu_check.py " + " ".join(sys.argv[1:]),
        "dry_run": dry_run,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": 0.0,
        "code": commit(),
        "host": platform.node(),
        # Every step is named from the start: a check cut off from outside leaves a page that says where.
        "steps": [
            {"name": n, "title": t, "status": "failed: not reached", "parts": {}} for n, (t, _, _) in STEPS.items()
        ],
    }
    for i, (name, (title, budget, _)) in enumerate(STEPS.items()):
        left = TOTAL_BUDGET_S - (time.perf_counter() - t0)
        budget = DRY_BUDGETS_S.get(name, DRY_BUDGET_S) if dry_run else min(budgets.get(name, budget), left)
        if name not in selected:
            record = {"name": name, "title": title, "status": NOT_SELECTED, "parts": {}}
        elif budget < 5:
            record = {"name": name, "title": title, "status": "skipped: total budget spent", "parts": {}}
        else:
            record = run_step(name, work, out / "logs", dry_run, budget)
        result["steps"][i] = record
        result["seconds"] = time.perf_counter() - t0
        write_results(out, result)
        print(f"{title}: {record['status']} ({record.get('seconds', 0):.0f} s)", flush=True)
    return result


def combine(files: list[Path]) -> dict:
    """The checks of several calls as one: each step from the call that ran it (a later call wins), the calls'
    seconds added, their commands and dates listed."""
    calls = [json.loads(f.read_text()) for f in files]
    result = dict(calls[-1], seconds=sum(c["seconds"] for c in calls))
    result["command"] = " ; ".join(c["command"] for c in calls)
    result["date"] = " ; ".join(c["date"] for c in calls)
    result["code"] = " ; ".join(dict.fromkeys(c["code"] for c in calls))
    steps = {s["name"]: s for s in calls[0]["steps"]}
    for call in calls[1:]:
        steps |= {s["name"]: s for s in call["steps"] if s["status"] != NOT_SELECTED}
    result["steps"] = list(steps.values())
    return result


def write_results(out: Path, result: dict) -> None:
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    write_page(result, out / "gpu_check.md")
