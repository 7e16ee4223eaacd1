"""The one step interface: a step has a name, the device it needs, a budget, and `run(context) -> record`.

A step's function measures and records its parts on the context as it goes (each saved at once, so a step cut at
its budget keeps what it measured); the runner (bench/run.py) gives it a context, runs it in a process of its own
when it has a budget, and keeps its record in a check record that bench/page.py draws.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_CUDA = "skipped: no CUDA"
UNFINISHED = "failed: unfinished at the step's deadline"  # a part's status while it runs: what stays if killed
NOT_SELECTED = "skipped: not in this call"


class Context:
    """What a step is given: where it works and logs, its deadline, whether it is a dry run (tiny sizes on the
    CPU), its arguments; and its record, saved after every part."""

    def __init__(self, name: str, work: Path, logs: Path, deadline: float, dry_run: bool, argv: tuple = ()):
        self.name, self.work, self.logs, self.deadline, self.dry_run = name, work, logs, deadline, dry_run
        self.argv = list(argv)
        self.file = work / "steps" / f"{name}.json"
        self.result: dict = {"parts": {}, "notes": []}
        self.save()

    def left(self) -> float:
        return self.deadline - time.time()

    def part(self, part_name: str, /, **values) -> dict:
        """Record (or update) one part of the step: a status and its measurements (a measurement may be called
        `name`: the part's own name is positional only)."""
        self.result["parts"].setdefault(part_name, {}).update(values)
        self.save()
        return self.result["parts"][part_name]

    def note(self, text: str) -> None:
        self.result["notes"].append(text)
        self.save()

    def save(self) -> None:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=2, default=str) + "\n")
        tmp.replace(self.file)

    def log(self, name: str) -> Path:
        return self.logs / f"{self.name}.{name}.log"


@dataclass(frozen=True)
class Step:
    """A measurement the runner can run: `measure(context)` records its parts on the context."""

    name: str
    title: str
    measure: Callable[[Context], None] = field(repr=False)
    kind: str = "probe"
    """What it is, for `--list`: a `probe`, a `perf` bench, a `gpu` step of the GPU check."""
    device: str = "cpu"
    """`cuda`: the step measures a GPU (without one it records `skipped: no CUDA`, or runs tiny with --dry-run)."""
    budget_s: float = 0.0
    """Wall-clock seconds on its device; 0: none (it runs in the runner's process)."""
    dry_budget_s: float = 120.0

    def run(self, ctx: Context) -> dict:
        self.measure(ctx)
        return ctx.result


# --------------------------------------------------------------------------------------------------------
# Running a step within its budget: a process of its own, ended with everything it started


def run_step(step: Step, work: Path, logs: Path, dry_run: bool, budget: float, argv: tuple = ()) -> dict:
    """The step's record with its status: in this process without a budget, else in a child (`python -m bench.run
    NAME --child`) killed at its budget."""
    t0 = time.perf_counter()
    code: int | None = 0
    if not budget:
        try:
            step.run(Context(step.name, work, logs, time.time() + 1e9, dry_run, argv))
        except Exception as e:  # noqa: BLE001  (recorded as the step's failure; the next step runs)
            code, error = 1, f"{type(e).__name__}: {e}"
    else:
        log = logs / f"{step.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        # The child stops its commands at its deadline and keeps a few seconds to save; then it is killed.
        command = [sys.executable, "-m", "bench.run", step.name, "--child", "--work", str(work), "--logs", str(logs)]
        command += ["--deadline", str(time.time() + budget - 5)] + (["--dry-run"] if dry_run else [])
        with open(log, "w") as out:
            process = subprocess.Popen(
                command, cwd=ROOT, env=child_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                code = process.wait(timeout=budget)
            except subprocess.TimeoutExpired:
                code = None
                end_tree(process)
        error = one_line(log.read_text(errors="replace"))
    seconds = time.perf_counter() - t0
    file = work / "steps" / f"{step.name}.json"
    record = json.loads(file.read_text()) if file.is_file() else {"parts": {}, "notes": []}
    record.update(name=step.name, title=step.title, seconds=seconds, budget_s=budget)
    if code is None:
        record["status"] = f"failed: timed out after {seconds:.0f} s (budget {budget:.0f} s)"
    elif code != 0:
        record["status"] = f"failed: exit {code}: {error}" if budget else f"failed: {one_line(error)}"
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


def check_record(title: str, command: str, steps: list[Step], dry_run: bool) -> dict:
    """A runner's record before its first step: every step named, so a run cut off from outside says where."""
    from bench.reporting import commit

    return {
        "title": title,
        "command": command,
        "dry_run": dry_run,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": 0.0,
        "code": commit(),
        "host": os.uname().nodename,
        "steps": [{"name": s.name, "title": s.title, "status": "failed: not reached", "parts": {}} for s in steps],
    }


def combine(files: list[Path]) -> dict:
    """The records of several calls as one: each step from the call that ran it (a later call wins), the calls'
    seconds added, their commands and dates listed."""
    calls = [json.loads(f.read_text()) for f in files]
    result = dict(calls[-1], seconds=sum(c["seconds"] for c in calls))
    for key in ("command", "date"):
        result[key] = " ; ".join(c[key] for c in calls)
    result["code"] = " ; ".join(dict.fromkeys(c["code"] for c in calls))
    steps = {s["name"]: s for s in calls[0]["steps"]}
    for call in calls[1:]:
        steps |= {s["name"]: s for s in call["steps"] if not s["status"].startswith("skipped: not in")}
    result["steps"] = list(steps.values())
    return result


ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception)\b")


def one_line(text: str) -> str:
    """What a person reads first when it failed: the last line that names an error (`torch._inductor.exc.
    InductorError: AssertionError: ...`, not the hint printed after it), else the last non-empty line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if ERROR_LINE.match(line)]
    return (errors[-1] if errors else lines[-1] if lines else "no output")[:300]


def run_command(ctx: Context, name: str, command: list[str], stdout: Path | None = None, env: dict | None = None):
    """Run a command to completion within what is left of the step's budget; (status, seconds). Its output goes
    to logs/, stdout to `stdout` when given."""
    log = ctx.log(name)
    log.parent.mkdir(parents=True, exist_ok=True)
    if ctx.left() < 1:
        return "skipped: step budget spent", 0.0
    t0 = time.perf_counter()
    with open(log, "w") as err, open(stdout or os.devnull, "w") as out:
        err.write("$ " + " ".join(command) + "\n")
        err.flush()
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=out if stdout else err,
            stderr=err,
            env=child_env(env),
            start_new_session=True,  # apart from the step's group: a timeout ends the command, not the step
        )
        try:
            code = process.wait(timeout=max(ctx.left(), 1))
        except subprocess.TimeoutExpired:
            end_tree(process)
            return f"failed: timed out after {time.perf_counter() - t0:.0f} s (step budget)", time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    if code != 0:
        return f"failed: exit {code}: {one_line(log.read_text(errors='replace'))}", seconds
    return "ok", seconds


def child_env(extra: dict | None = None) -> dict:
    """The environment of every command: this checkout's polyalign first, installed or not."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


def end_tree(process: subprocess.Popen, grace: float = 3.0) -> None:
    """End a process and everything it started: torchrun starts its workers in sessions of their own, and a step
    its commands, so a process group is not enough. SIGTERM first (torchrun then stops its workers itself)."""
    tree = [process.pid, *descendants(process.pid)]  # before any dies: orphans lose their parent link
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    process.wait()


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (bench/perf/torchrun_processes.py `children`, from /proc: Linux)."""
    from bench.perf.torchrun_processes import children

    kids = children(pid)
    return kids + [d for kid in kids for d in descendants(kid)]
