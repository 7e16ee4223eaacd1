"""A run folder held by one process, and the ways a run ends before its budget is spent.

The folder is checked before anything is written (new, empty, or a run of ours: never a folder of a user's
files), then locked: an exclusive flock on `.polyalign-run.lock` inside it (io.FolderLock), which the kernel
drops when the holder dies, so a lock left by a killed run is stale by construction. SIGINT and SIGTERM (a
scheduler's pre-emption) let the step finish and a checkpoint be written before the run stops. A failure
mid-run (a non-finite loss, a full disk) ends in one line that says what happened, what was kept, and the
command that continues; a fresh run that kept no checkpoint removes what it wrote, so that the fixed command
starts cleanly.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from polyalign.checkpoint import checkpoint_step, latest_checkpoint
from polyalign.config import Recipe
from polyalign.io import DataError, FolderLock, Stopped
from polyalign.train.run import RECIPE_FILE, Run

LOCK_FILE = ".polyalign-run.lock"
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """Raised by the loop once the step a signal arrived in is trained and saved."""


class RunGuard:
    """What the loop asks each step: whether a signal asked the run to stop (all processes agree)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.step = 0
        self.saved = False
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
        self.signum = signum

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():  # Python runs handlers in the main thread only
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def stop_requested(self, run: Run) -> bool:
        """After a step: stop here? With several processes, any one's signal stops all of them at this step
        (a CPU all-reduce over the bookkeeping group, so the device does not wait)."""
        self.step = run.step
        asked = self.signum is not None
        if run.world > 1:
            flag = torch.tensor([self.signum or 0], dtype=torch.int64)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=run.bookkeeping)
            asked, self.signum = bool(flag.item()), int(flag.item()) or None
        return asked


# ---------------------------------------------------------------------------------------------------------
# The folder


def check_run_folder(run_dir: Path, resume: bool) -> None:
    """A fresh run needs a new or empty folder (a stale lock aside); `--resume` a folder holding a run's recipe.
    Never a folder of someone's files: a run appends to metrics.jsonl and deletes old checkpoints."""
    if run_dir.exists() and not run_dir.is_dir():
        raise DataError(f"{run_dir}: a file, not a folder; --run-dir names the run's folder (new, or a run to resume)")
    entries = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_FILE) if run_dir.is_dir() else []
    if RECIPE_FILE in entries:
        if not resume:
            raise DataError(
                f"{run_dir}: a run already exists here; pass --resume to continue it or choose another --run-dir"
            )
    elif entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise DataError(
            f"{run_dir}: holds files that are not a polyalign run ({shown}) and no {RECIPE_FILE}; a run needs a new "
            "or empty folder: choose another --run-dir"
        )
    elif resume:
        raise DataError(f"{run_dir / RECIPE_FILE}: not found, so {run_dir} holds no run to resume; drop --resume")


def take_run_folder(run_dir: Path, resume: bool) -> FolderLock:
    """Create the folder if need be and lock it; the checks run again under the lock, where no other process
    can change the answer (two runs started together: one holds the lock, the other is refused)."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"{run_dir}: cannot create the run folder ({err.strerror}); choose another --run-dir") from None
    busy = f"{run_dir}: another process (pid {{pid}}) trains in this folder; wait for it or choose another --run-dir"
    try:
        lock = FolderLock(run_dir / LOCK_FILE, busy)
    except PermissionError as err:
        raise DataError(f"{run_dir}: cannot write in the folder ({err.strerror}); choose another --run-dir") from None
    try:
        check_run_folder(run_dir, resume)
    except BaseException:
        lock.release()
        raise
    return lock


def remove_fresh_run(run_dir: Path, created: bool) -> None:
    """What a fresh run that kept no checkpoint wrote: the folder when this run created it, else its entries
    (it was empty: check_run_folder)."""
    if created:
        shutil.rmtree(run_dir, ignore_errors=True)
        return
    for entry in run_dir.iterdir():
        if entry.name != LOCK_FILE:
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------
# How a run ends short


def continuation(run_dir: Path, resume: bool, removed: bool, fix: str = "") -> str:
    """What was kept, and the command that goes on from it (`fix`: a --set that avoids the failure)."""
    kept = latest_checkpoint(run_dir)
    sets = f" --set {fix}" if fix else ""
    if kept is not None:
        return (
            f"kept: checkpoint {kept.name} (step {checkpoint_step(kept)}); continue with "
            f"`polyalign pretrain --resume --run-dir {run_dir}{sets}`"
        )
    if removed:
        again = f"run the command again with{sets}" if fix else "run the command again"
        return f"no checkpoint was written, so {run_dir} was removed: {again}"
    return f"no checkpoint yet: `polyalign pretrain --resume --run-dir {run_dir}{sets}` starts it again from step 0"


def failure_line(err: BaseException, guard: RunGuard, recipe: Recipe, run_dir: Path) -> tuple[str, str] | None:
    """(what happened, a --set that avoids it) for a failure a user can act on; None for anything else."""
    if isinstance(err, FloatingPointError):  # the loop's non-finite loss: a tenth of the learning rate it names
        setting = getattr(err, "setting", "lr")
        return str(err), f"trainer.{setting}={getattr(recipe.trainer, setting) / 10:g}"
    if isinstance(err, OSError):  # a failed write() names no file: the run folder is where it wrote
        return f"step {guard.step}: cannot write {err.filename or run_dir}: {err.strerror or err}", ""
    return None


@contextmanager
def hold_run_folder(run_dir: Path, recipe: Recipe, resume: bool) -> Iterator[RunGuard]:
    """The run folder, checked and held by this process (rank 0 locks it) while the block trains into it; a
    signal or a failure in the block ends in one line (a Stopped or a DataError) saying what was kept."""
    check_run_folder(run_dir, resume)  # before anything is created
    rank0 = os.environ.get("RANK", "0") == "0"
    created = not run_dir.exists()
    lock = take_run_folder(run_dir, resume) if rank0 else None
    guard = RunGuard()
    guard.install()
    try:
        yield guard
    except BaseException as err:
        removed = rank0 and not resume and latest_checkpoint(run_dir) is None
        if removed:
            remove_fresh_run(run_dir, created)
        if isinstance(err, Interrupted):
            name = signal.Signals(guard.signum).name
            said = f"{name} at step {guard.step}: {continuation(run_dir, resume, removed)}"
            raise Stopped(said, 128 + guard.signum) from None
        said = failure_line(err, guard, recipe, run_dir)
        if said is None:
            raise
        what, fix = said
        raise DataError(f"{what}; {continuation(run_dir, resume, removed, fix)}") from None
    finally:
        guard.restore()
        if lock is not None:
            lock.release()
