"""What every step of the GPU check shares: the sizes it runs at, the record it saves after every part, and the
commands it runs within its budget (each in a session of its own, ended with everything it started)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ENTRY = ROOT / "bench" / "perf" / "gpu_check.py"  # what a step's process, a probe and the plain aligner run
SHARED = ROOT.parent / "shared"
SAMPLE = ROOT / "polyalign" / "sample_data"
NO_CUDA = "skipped: no CUDA"
UNFINISHED = "failed: unfinished at the step's deadline"  # a part's status while it runs: what stays if killed


@dataclass(frozen=True)
class Sizes:
    """What a check runs at: the real sizes on a GPU, tiny ones for --dry-run on the CPU."""

    throughput: str  # the preset of bench/perf/speed.py the throughput step compares the stacks at
    compile_backend: str
    pretrain_steps: int
    pairs: int
    align_model: dict  # the random stand-in's shape; vocab_size is the least it gets
    align_layer: int


FULL = Sizes(
    throughput="gpu-xlmr-base",
    compile_backend="inductor",
    pretrain_steps=20,
    pairs=20_000,
    align_model=dict(vocab_size=250_037, hidden_size=384, num_layers=12, num_heads=12, ffn_size=1536),
    align_layer=8,
)
DRY = Sizes(
    throughput="gpu-dry",
    compile_backend="eager",  # dynamo's tracing without inductor's code generation: seconds instead of minutes
    pretrain_steps=4,
    pairs=200,
    align_model=dict(vocab_size=0, hidden_size=32, num_layers=2, num_heads=4, ffn_size=64),
    align_layer=2,
)


# ---------------------------------------------------------------------------------------------------------
# One step's process: a result that is saved after every part, so that a step killed at its budget keeps what
# it measured.


class Step:
    def __init__(self, name: str, work: Path, logs: Path, deadline: float, dry_run: bool):
        self.name, self.work, self.logs, self.deadline, self.dry_run = name, work, logs, deadline, dry_run
        self.sizes = DRY if dry_run else FULL
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


ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception)\b")


def one_line(text: str) -> str:
    """What a person reads first when it failed: the last line that names an error (`torch._inductor.exc.
    InductorError: AssertionError: ...`, not the hint printed after it), else the last non-empty line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if ERROR_LINE.match(line)]
    return (errors[-1] if errors else lines[-1] if lines else "no output")[:300]


def run_command(step: Step, name: str, command: list[str], stdout: Path | None = None, env: dict | None = None):
    """Run a command to completion within what is left of the step's budget; (status, seconds). Its output goes
    to logs/, stdout to `stdout` when given."""
    log = step.log(name)
    log.parent.mkdir(parents=True, exist_ok=True)
    if step.left() < 1:
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
            code = process.wait(timeout=step.left())
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
    """Every process below `pid`, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # the field after the state
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def polyalign_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "polyalign.cli", *args]


def torchrun(*args: str) -> list[str]:
    """torchrun, one process: --standalone picks a free rendezvous port itself."""
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
