"""A run folder held by one process, and the ways a run ends before its budget is spent.

The folder is checked before anything is written (new, empty, or a run of ours: never a folder of a user's
files), then locked: an exclusive flock on `.polyalign-run.lock` inside it (io.FolderLock), which the kernel
drops when the holder dies, so a lock left by a killed run is stale by construction. SIGINT and SIGTERM (a
scheduler's pre-emption) let the step finish and a checkpoint be written before the run stops. A failure
mid-run (a non-finite loss, a full disk) ends in one line that says what happened, what was kept, and the
command that continues; a fresh run that kept no checkpoint removes what it wrote, so that the fixed command
starts cleanly.

Under torchrun the processes vote on a signal after each step, so all stop after the same one and rank 0 writes
the one checkpoint and says the one line. A process whose peer is gone (a collective fails: gloo's socket reset,
or the group's timeout, `trainer.process_timeout_s`), whose data-loader worker was killed, or whose GPU is full
stops with a line of its own (rank-prefixed on ranks other than 0, see distributed.speaker_prefix): what happened,
the last complete checkpoint, the torchrun command that continues. It attempts no collective from there, so no
checkpoint is written after a peer is gone: the last complete one stays as it was.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from polyalign.checkpoint import checkpoint_step, latest_checkpoint
from polyalign.config import Recipe
from polyalign.io import DataError, FolderLock, Stopped
from polyalign.train.distributed import lost_peer, lost_worker, relaunch, this_process
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

    def restore(self, ignoring: int | None = None) -> None:
        """The handlers from before `install`; `ignoring` is left ignored instead (never the default action)."""
        for s, handler in self._previous.items():
            signal.signal(s, signal.SIG_IGN if s == ignoring else handler)

    def stop_requested(self, run: Run) -> bool:
        """After a step: stop here? With several processes, any one's signal stops all of them at this step
        (a CPU all-reduce over the bookkeeping group, so the device does not wait)."""
        self.step = run.step
        asked = self.signum is not None
        if run.world > 1:
            flag = torch.tensor([self.signum or 0], dtype=torch.int64)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=run.bookkeeping)
            # A signal that came while this process waited in the all-reduce is not in `flag`: kept, it stops all
            # processes after the next step (the vote decides, so they still stop together).
            asked = bool(flag.item())
            self.signum = self.signum or int(flag.item()) or None
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


def continuation(run_dir: Path, resume: bool, removed: bool, fix: list[str] | tuple[str, ...] = ()) -> str:
    """What was kept, and the command that goes on from it (`fix`: --set values that avoid the failure), launched
    as this run was (one process, or torchrun's)."""
    kept = latest_checkpoint(run_dir)
    sets = "".join(f" --set {f}" for f in fix)
    go_on = relaunch(f"pretrain --resume --run-dir {run_dir}{sets}")
    if kept is not None:
        return f"kept: checkpoint {kept.name} (step {checkpoint_step(kept)}); continue with `{go_on}`"
    if removed:
        again = f"run the command again with{sets}" if fix else "run the command again"
        return f"no checkpoint was written, so {run_dir} was removed: {again}"
    return f"no checkpoint yet: `{go_on}` starts it again from step 0"


@dataclass
class Failure:
    """A failure a user can act on: what happened, the --set values that avoid it, the exit code, and whether
    every process met it alike (then rank 0 alone says it)."""

    what: str
    fix: list[str] = field(default_factory=list)
    code: int = 2
    shared: bool = False


def smaller_batches(recipe: Recipe, fresh: bool) -> tuple[str, list[str]]:
    """What a full GPU held (the micro-batch's token budgets) and the settings that halve it; a fresh start also
    doubles trainer.grad_accumulation, so its batch stays the same (a resume must keep processes x accumulation)."""
    data = recipe.data
    now = f"data.mono.max_tokens={data.mono.max_tokens}, data.parallel.max_tokens={data.parallel.max_tokens}"
    fix = [f"data.{kind}.max_tokens={max(1, getattr(data, kind).max_tokens // 2)}" for kind in ("mono", "parallel")]
    if fresh:
        fix.append(f"trainer.grad_accumulation={recipe.trainer.grad_accumulation * 2}")
    return now, fix


def describe_failure(err: BaseException, guard: RunGuard, recipe: Recipe, run_dir: Path, fresh: bool) -> Failure | None:
    """The failure `err` in a user's words; None for anything else (a fault of the code keeps its traceback)."""
    _, world = this_process()
    if isinstance(err, FloatingPointError):  # the loop's non-finite loss: a tenth of the learning rate it names
        setting = getattr(err, "setting", "lr")  # every process raises it on the same reduced loss
        return Failure(str(err), [f"trainer.{setting}={getattr(recipe.trainer, setting) / 10:g}"], shared=True)
    if isinstance(err, torch.cuda.OutOfMemoryError):
        now, fix = smaller_batches(recipe, fresh)
        return Failure(f"after step {guard.step}: the GPU ran out of memory with micro-batches of {now}", fix)
    if isinstance(err, OSError):  # a failed write() names no file: the run folder is where it wrote
        return Failure(f"step {guard.step}: cannot write {err.filename or run_dir}: {err.strerror or err}")
    worker = lost_worker(err)
    if worker is not None:
        return Failure(f"error: after step {guard.step}: {worker}", code=1)
    reason = lost_peer(err)
    if reason is not None:  # this process attempts no collective from here on: no checkpoint is written
        rank, _ = this_process()
        who = f"rank {1 - rank}" if world == 2 else "another process of the run"
        return Failure(f"error: after step {guard.step}: {who} is gone ({reason}); stopped without saving", code=1)
    return None


@contextmanager
def hold_run_folder(run_dir: Path, recipe: Recipe, resume: bool) -> Iterator[RunGuard]:
    """The run folder, checked and held by this process (rank 0 locks it) while the block trains into it; a
    signal or a failure in the block ends in one line (a Stopped or a DataError) saying what was kept. With
    several processes, what all of them meet alike (a signal, a non-finite loss) is said by rank 0 alone."""
    check_run_folder(run_dir, resume)  # before anything is created
    rank0 = os.environ.get("RANK", "0") == "0"
    created = not run_dir.exists()
    lock = take_run_folder(run_dir, resume) if rank0 else None
    guard = RunGuard()
    guard.install()
    failed = False
    try:
        yield guard
    except BaseException as err:
        failed = True
        fresh = not resume and latest_checkpoint(run_dir) is None
        removed = rank0 and fresh
        if removed:
            remove_fresh_run(run_dir, created)
        if isinstance(err, Interrupted):
            name = signal.Signals(guard.signum).name
            said = f"{name} at step {guard.step}: {continuation(run_dir, resume, removed)}"
            raise Stopped(said if rank0 else "", 128 + guard.signum) from None
        failure = describe_failure(err, guard, recipe, run_dir, fresh)
        if failure is None:
            raise
        said = f"{failure.what}; {continuation(run_dir, resume, removed, failure.fix)}"
        if failure.shared and not rank0:
            raise Stopped("", failure.code) from None
        raise (DataError(said) if failure.code == 2 else Stopped(said, failure.code)) from None
    finally:
        if failed and this_process()[1] > 1:
            # torchrun sends SIGTERM to the processes left once one has failed: it must not cut their line or exit
            guard.restore(ignoring=signal.SIGTERM)
        else:
            guard.restore()
        if lock is not None:
            lock.release()
