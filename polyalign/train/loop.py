"""The one pre-training loop: one step, a log line every `log_every` steps, a checkpoint every `save_every`,
until a budget (steps, minutes, FLOPs) is spent. It knows objectives only through their interface."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from functools import partial
from pathlib import Path

import torch
import yaml
from torch import nn

from polyalign.checkpoint import STATE_JSON, resume_checkpoint
from polyalign.config import Recipe, unpads_rows
from polyalign.data.loader import SlotBatches, StepBatches, StepLoader
from polyalign.device import to_device
from polyalign.io import atomic_write_text, read_json
from polyalign.model.compiling import compiled_regions
from polyalign.train.distributed import agree_on_stop, average_gradients, reduce_window
from polyalign.train.guard import Interrupted, RunGuard, hold_run_folder
from polyalign.train.head_warmup import HEAD_WARMUP_FILE, describe, warmup_record
from polyalign.train.metrics import MetricsLog, Window
from polyalign.train.optim import (
    drop_held_gradients,
    fit_warmup,
    training_only,
    update_parameters,
)
from polyalign.train.resume import check_new_steps, record_recipe
from polyalign.train.run import RECIPE_FILE, Run, build_run, end_warmup
from polyalign.train.saving import restore_run, save_run, warmup_under_way


def active_objectives(specs: list, step: int) -> list[str]:
    return [o.name for o in specs if o.active(step)]


def start_loader(run: Run) -> StepLoader:
    makers = {name: objective.make_training_batch for name, objective in run.module.objectives.items()}
    unpad = unpads_rows(run.recipe, run.device.type, run.module.model.config.position_bias)
    dataset = SlotBatches(run.slots, makers, partial(active_objectives, run.recipe.objectives), run.step, unpad)
    return StepLoader(dataset, run.cfg.loader_workers, pin=run.device.type == "cuda")


def train_step(run: Run, item: StepBatches) -> None:
    """One optimizer step on the step's micro-batches (one per slot; gradients all-reduced on the last), then
    the update (`update_parameters`). Nothing here waits for the device: losses and metrics are added up where
    they are. `run` is the run or one of its phases (the head warm-up)."""
    assert item.step == run.step, (item.step, run.step)
    A = len(item.slots)
    autocast = torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=run.cfg.precision == "bf16")
    ddp = isinstance(run.trained, nn.parallel.DistributedDataParallel)
    names: set[str] = set()
    for a, batches in enumerate(item.slots):
        batches = {n: to_device(b, run.device) for n, b in batches.items()}
        if run.sharded:
            run.module.set_requires_gradient_sync(a == A - 1)
        with run.trained.no_sync() if ddp and a < A - 1 else contextlib.nullcontext():
            with autocast:
                loss, metrics, (flops, model_flops) = run.trained(batches)
            (loss / A).backward()
        run.window.add_micro_batch(loss.detach().float(), metrics, flops, 1 / A, model_flops)
        names.update(metrics)
    if run.world > 1 and not run.sharded and not ddp:
        average_gradients(run.module.parameters(), run.world)
    drop_held_gradients(run.optimizer, run.step, run.cfg)
    run.grad_norm = update_parameters(run.optimizer, run.scheduler, run.module.parameters(), run.cfg.clip_norm)
    run.step += 1
    run.slot_states = item.slot_states
    run.window.end_step(item.tokens, sorted(names))


def fold_counters(run: Run) -> list[float]:
    """Reduce the window over processes (a host sync) and add its tokens, FLOPs and (mean) seconds to the
    counters, which are then the same on every process; returns the reduced window (see `reduce_window`).
    Loss and metric sums stay in the window for the next log line."""
    window = run.window
    values = reduce_window(window, run.world, time.perf_counter() - window.started).tolist()
    values[2] /= run.world
    run.counters["tokens"] += int(values[0])
    run.counters["flops"] += values[1]
    run.counters["seconds"] += values[2]
    if run.counted:  # the run's own model FLOPs (absent from older checkpoints); a warm-up counts the three above
        run.counters["model_flops"] = run.counters.get("model_flops", 0.0) + values[-1]
    window.tokens, window.flops, window.model_flops, window.started = 0, 0.0, 0.0, time.perf_counter()
    return values


def log_window(run: Run, log: MetricsLog | None) -> dict | None:
    """Reduce the window over processes (the one host sync, every log_every steps), add it to the counters,
    write a line (rank 0); every process raises together on a non-finite loss."""
    window = run.window
    if not window.steps:
        return None
    values = fold_counters(run)
    run.flops_per_step = values[1] / window.steps
    names = sorted(window.metrics)
    record = {
        "step": run.step,
        "loss": values[3] / run.world / window.steps,
        **{k: v / run.world / window.counts[k] for k, v in zip(names, values[4:-1], strict=True)},
        "lr": run.scheduler.get_last_lr()[0],
        "tokens_per_s": values[0] / max(values[2], 1e-9),
        **run.counters,
    }
    if run.compile_seconds:
        record["compile_seconds"], run.compile_seconds = run.compile_seconds, 0.0
    if run.loss_path:  # the first line of this process: which MLM loss ran
        record["loss_path"], run.loss_path = run.loss_path, ""
    if run.grad_norm is not None:  # under FSDP a replicated DTensor
        norm = run.grad_norm.full_tensor() if hasattr(run.grad_norm, "full_tensor") else run.grad_norm
        record["grad_norm"] = float(norm)
    run.window = Window(run.device)
    if not math.isfinite(record["loss"]):  # the same reduced value on every process: all stop here
        where, lower = ("step", "lr") if run.counted else ("head warm-up step", "head_warmup_lr")
        error = FloatingPointError(
            f"{where} {run.step}: loss is {record['loss']}; lower trainer.{lower} or check the data"
        )
        error.setting = lower  # the trainer setting whose tenth the failure's line proposes (guard.py)
        raise error
    if log is not None:
        log.write(record)
    return record


def flops_stop(step: int, flops: float, per_step: float, budget: float, horizon: int) -> int | None:
    """The step at which a run that has spent `flops` by `step` reaches `budget`: now if it has, else the step
    that `per_step` FLOPs per step predict, if that comes within `horizon` steps (before the next check);
    None when it does not."""
    if flops >= budget:
        return step
    if per_step <= 0:
        return None
    ahead = math.ceil((budget - flops) / per_step)
    return step + ahead if ahead <= horizon else None


def stop_step(run: Run) -> int:
    """The step all processes stop at: max_steps, stop_at, now once max_minutes are spent, or where max_flops are
    reached. Minutes and FLOPs are checked when the window is read, every log_every steps; a FLOPs budget that
    the last window's mean FLOPs per step say will be reached before the next check stops the run at that
    predicted step (exact when the steps' FLOPs are equal; with log_every 1, always the first step at or past
    the budget)."""
    cfg = run.cfg
    want = min(cfg.max_steps, cfg.stop_at) if cfg.stop_at else cfg.max_steps
    spent = run.counters["seconds"] + time.perf_counter() - run.window.started
    if cfg.max_minutes and spent >= cfg.max_minutes * 60:
        want = min(want, run.step)
    if cfg.max_flops:
        at = flops_stop(run.step, run.counters["flops"], run.flops_per_step, cfg.max_flops, cfg.log_every)
        want = min(want, at if at is not None else want)
    return int(agree_on_stop(want, run.device, run.world).item())


def pretrain(
    recipe: Recipe, run_dir: str | Path, resume: bool = False, progress: bool = True, device: str | None = None
) -> dict:
    """Train according to `recipe` into `run_dir`, which this process holds meanwhile (guard.py: SIGINT and
    SIGTERM save the step and stop; a failure says what was kept); returns a summary of the run and this call.
    `device`: where one process trains (default: its GPU when there is one, else the CPU)."""
    with hold_run_folder(Path(run_dir), recipe, resume) as guard:
        return train_in_folder(recipe, Path(run_dir), resume, progress, guard, device)


def train_in_folder(
    recipe: Recipe, run_dir: Path, resume: bool, progress: bool, guard: RunGuard, device: str | None = None
) -> dict:
    """The run's phases in turn, the head warm-up first when it has steps to train, through the one loop."""
    started = time.perf_counter()
    run = start_run(recipe, run_dir, resume, device)
    first_step = run.step
    log = MetricsLog(run_dir, run.step if resume else None) if run.rank == 0 else None
    bar = progress_bar(run) if progress and run.rank == 0 else None
    try:
        if run.warmup is not None:
            warm_heads(run, guard, resume)
        train_phase(run, run, guard, log, bar)
    finally:
        if bar is not None:
            bar.close()
        if log is not None:
            log.close()
    summary = {"run": str(run_dir), "step": run.step, **run.counters}
    summary |= {"new_steps": run.step - first_step, "command_seconds": time.perf_counter() - started}
    if run.head_warmup is not None:
        summary["head_warmup"] = run.head_warmup.summary()
    return summary


def start_run(recipe: Recipe, run_dir: Path, resume: bool, device: str | None) -> Run:
    """The run built, and restored from its last checkpoint on a resume (which records the recipe's changes);
    a fresh run writes its recipe first."""
    checkpoint = resume_checkpoint(run_dir) if resume else None
    if checkpoint is not None:
        check_new_steps(recipe.trainer, checkpoint)  # before any work: a resume that would train nothing
    else:  # a resumed run keeps the warm-up it started with
        trainer, note = fit_warmup(recipe.trainer)
        recipe = dataclasses.replace(recipe, trainer=trainer)
        if note and os.environ.get("RANK", "0") == "0":
            print(note)
    warm_up = checkpoint is None or warmup_under_way(read_json(checkpoint / STATE_JSON))
    run, _ = build_run(recipe, run_dir, fresh=checkpoint is None, device_name=device, warm_up=warm_up)
    if checkpoint is not None:
        restore_run(run, checkpoint)
        if run.rank == 0:
            print(f"resuming from {checkpoint} at step {run.step}")
        changes = record_recipe(run_dir / RECIPE_FILE, recipe, run.step) if run.rank == 0 else []
        if changes:
            print(f"note: {run_dir / RECIPE_FILE} now says {'; '.join(changes)} (a comment in it keeps the change)")
    elif run.rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / RECIPE_FILE, yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    return run


def progress_bar(run: Run):
    from polyalign.progress import tqdm

    return tqdm(
        total=run.cfg.stop_at or run.cfg.max_steps,  # a run paused at `stop_at` ends there, not at max_steps
        initial=run.step,
        desc=run.recipe.name,
        unit="step",
        dynamic_ncols=True,
        mininterval=2.0,
    )


def warm_heads(run: Run, guard: RunGuard, resume: bool) -> None:
    """The head warm-up phase (run.warmup) to its last step, the heads' own parameters alone taking a gradient, its
    lines in their own log (a resume inside it drops those it trains again); then one line that says what it did."""
    log = None
    if run.rank == 0:
        shape = partial(warmup_record, run.warmup.cfg)
        log = MetricsLog(run.run_dir, run.warmup.step if resume else None, HEAD_WARMUP_FILE, False, shape)
    try:
        with training_only(run.module, run.warmup.trains):
            train_phase(run, run.warmup, guard, log)
    finally:
        if log is not None:
            log.close()
    done = end_warmup(run)
    if run.rank == 0:
        print(describe(done, run.run_dir / HEAD_WARMUP_FILE))


def train_phase(run: Run, phase: Run, guard: RunGuard, log: MetricsLog | None, bar=None) -> None:
    """The one loop: `phase` (the run itself, or its head warm-up) steps until its stop step, with a log line
    every log_every steps; a checkpoint of `run` (with the warm-up's state while it is under way) every
    save_every steps of the run's own and at its stop step, and after any step a signal asks the run to stop."""
    loader = start_loader(phase)
    first_step = phase.step
    stop = stop_step(phase)
    phase.window.started = time.perf_counter()  # the phase's time is its steps' (not the build's, nor a warm-up's)
    try:
        while phase.step < stop:
            item = next(loader)
            began = time.perf_counter()
            train_step(phase, item)
            if phase.step == first_step + 1 and compiled_regions(phase.module):  # torch.compile ran in it
                phase.compile_seconds = time.perf_counter() - began
            if phase.step % phase.cfg.log_every == 0 or phase.step == phase.cfg.max_steps:
                record = log_window(phase, log)
                stop = stop_step(phase)  # max_minutes and max_flops are read here, with the window
                if bar is not None and record is not None:
                    bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
            if bar is not None:
                bar.update(1)
            stopping = guard.stop_requested(run)  # a signal: this step is saved, then the run stops
            if stopping or (phase.counted and (phase.step % phase.cfg.save_every == 0 or phase.step == stop)):
                if phase.window.steps:
                    fold_counters(phase)  # counters must be totals over processes when saved
                save_run(run)
                phase.window.started = time.perf_counter()  # saving is not training time
            if stopping and (phase.step < stop or not phase.counted):  # after a warm-up, the run's own steps remain
                raise Interrupted
    finally:
        loader.close()
