"""A run's checkpoints: what `save_run` writes of a Run (weights, optimizer, schedule position, counters, data
position, RNG; the head warm-up's own while it is under way) and how `restore_run` puts it back, exactly."""

from __future__ import annotations

from pathlib import Path

import torch

from polyalign.checkpoint import (
    load_checkpoint_state,
    load_model_weights,
    load_weights,
    optimizer_state_from_files,
    optimizer_to_files,
    save_checkpoint,
)
from polyalign.io import DataError
from polyalign.train.distributed import barrier, gather_objects
from polyalign.train.fsdp import gather_state, load_optimizer_state, load_state
from polyalign.train.head_warmup import PHASE, HeadWarmup
from polyalign.train.resume import pad_moments_to_parameters
from polyalign.train.run import Phase, Run

WARMUP_PREFIX = f"{PHASE}."
"""Where the warm-up's optimizer tensors lie in a checkpoint's state tensors, beside the run's `optimizer.`."""


def rng_tensors() -> dict[str, torch.Tensor]:
    out = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        out["rng.cuda"] = torch.cuda.get_rng_state()
    return out


def restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    if torch.cuda.is_available() and "rng.cuda" in tensors:
        torch.cuda.set_rng_state(tensors["rng.cuda"])


def warmup_under_way(state: dict) -> bool:
    """Whether a checkpoint's state was saved inside the head warm-up (it then holds the warm-up's step)."""
    return "step" in (state.get("head_warmup") or {})


def restore_run(run: Run, checkpoint: Path) -> None:
    """Weights, optimizer, schedule, counters, data position and RNG from a checkpoint, and the head warm-up's
    own when it was saved inside it (`run.warmup` then built for it). Slot s = rank·A + a holds the same data in any
    layout, so any processes x accumulation with the same product resumes it."""
    state, tensors = load_checkpoint_state(checkpoint)
    A = run.cfg.grad_accumulation
    saved = (state["world"], state["grad_accumulation"])
    if saved[0] * saved[1] != run.world * A:
        raise DataError(
            f"{checkpoint}: saved with {saved[0]} processes x {saved[1]} accumulation = {saved[0] * saved[1]} "
            f"micro-batches per step, now {run.world} x {A}; set trainer.grad_accumulation so the product matches"
        )
    optimizer_state = optimizer_state_from_files(tensors, state["optimizer"])
    if not state.get("optimizer_moments", True) and run.rank == 0:
        print(
            f"note: {checkpoint} holds no optimizer moments (trainer.checkpoint_optimizer=false): AdamW starts them "
            "afresh, so the loss curve is not the uninterrupted run's"
        )
    if run.sharded:
        weights = {
            f"{part}.{k}": v
            for part in ("model", "objectives")
            for k, v in load_weights(checkpoint / f"{part}.safetensors").items()
        }
        load_state(run.module, run.optimizer, weights, optimizer_state)
    else:
        load_model_weights(run.module.model, checkpoint / "model.safetensors", strict=True)
        load_model_weights(run.module.objectives, checkpoint / "objectives.safetensors", strict=True)
        run.optimizer.load_state_dict(optimizer_state)
        pad_moments_to_parameters(run.optimizer)
    run.counters = state["counters"]
    restore_position(run, state["step"], state["slots"])
    warmup = state.get("head_warmup")
    if run.warmup is not None and warmup_under_way(state):
        restore_warmup(run.warmup, warmup, tensors)
    elif warmup:  # done (or, resumed with other settings, cut short where it was saved)
        fields = {k: warmup[k] for k in ("heads", "tokens", "flops", "seconds")}
        run.head_warmup = HeadWarmup(**fields, steps=warmup.get("step", warmup["steps"]))
    # Dropout draws from a process's generator: a process the checkpoint had no counterpart for takes rank 0's.
    source = run.rank if f"rank{run.rank}.rng.torch" in tensors else 0
    restore_rng({k[len(f"rank{source}.") :]: v for k, v in tensors.items() if k.startswith(f"rank{source}.")})


def restore_position(run: Run | Phase, step: int, slot_states: list[dict]) -> None:
    """The step, the schedule at it and every slot's data state (`slot_states` of all processes' slots)."""
    run.step = step
    run.scheduler.last_epoch = run.step
    # The schedule's peak is the recipe's trainer.lr, not the one saved: a resume may lower it (`--set trainer.lr=`
    # after a loss turned NaN). Unchanged, this recomputes the saved rates exactly, as scheduler.step() does.
    run.scheduler.base_lrs = [run.cfg.lr] * len(run.optimizer.param_groups)
    for group, factor in zip(run.optimizer.param_groups, run.scheduler.lr_lambdas, strict=True):
        group["initial_lr"] = run.cfg.lr
        group["lr"] = run.cfg.lr * factor(run.step)
    run.scheduler._last_lr = [g["lr"] for g in run.optimizer.param_groups]
    A = run.cfg.grad_accumulation
    for a, slot in enumerate(run.slots):
        slot.load_state_dict(slot_states[run.rank * A + a])
    run.slot_states = [s.state_dict() for s in run.slots]


def restore_warmup(phase: Phase, saved: dict, tensors: dict[str, torch.Tensor]) -> None:
    """The warm-up phase where a checkpoint inside it left it: its optimizer, counters, step, schedule and slots
    (the weights it trains are the run's, restored with them)."""
    mine = {k[len(WARMUP_PREFIX) :]: v for k, v in tensors.items() if k.startswith(WARMUP_PREFIX)}
    optimizer_state = optimizer_state_from_files(mine, saved["optimizer"])
    if phase.sharded:
        load_optimizer_state(phase.module, phase.optimizer, optimizer_state)
    else:
        phase.optimizer.load_state_dict(optimizer_state)
    phase.counters = {k: saved[k] for k in ("tokens", "flops", "seconds")}
    restore_position(phase, saved["step"], saved["slots"])


def save_run(run: Run) -> None:
    """A checkpoint of the step just trained (of the warm-up's step while it is under way: the run is then at
    step 0); rank 0 writes what every process's slots and RNG hold."""
    phase = run.warmup
    rng = {f"rank{run.rank}.{k}": v for k, v in rng_tensors().items()}
    mine = (run.slot_states, rng, phase.slot_states if phase else [])
    gathered = gather_objects(mine, run.world, run.bookkeeping)
    slot_states = [s for g in gathered for s in g[0]]
    rng = {k: v for g in gathered for k, v in g[1].items()}
    # Under FSDP every process gathers its shards to rank 0, which writes full tensors as DDP's rank 0 does.
    weights, optimizer_state = gather_state(run.module, run.optimizer) if run.sharded else (None, None)
    warmup_optimizer = gather_state(run.module, phase.optimizer)[1] if phase and run.sharded else None
    if run.rank == 0:
        state = {
            "step": run.step,
            "counters": run.counters,
            "world": run.world,
            "grad_accumulation": run.cfg.grad_accumulation,
            "slots": slot_states,
            "recipe": run.recipe.name,
            "head_warmup": run.head_warmup.summary() if run.head_warmup else None,
            "optimizer_moments": run.cfg.checkpoint_optimizer,
        }
        tensors = dict(rng)
        if phase is not None:
            heads = list(run.module.objectives[PHASE].heads)
            summary = HeadWarmup(heads, phase.cfg.max_steps, **phase.counters).summary()
            moments, info = optimizer_to_files(saved_optimizer(warmup_optimizer or phase.optimizer.state_dict(), run))
            tensors |= {WARMUP_PREFIX + k: v for k, v in moments.items()}
            warm_slots = [s for g in gathered for s in g[2]]
            state["head_warmup"] = {**summary, "step": phase.step, "slots": warm_slots, "optimizer": info}
        save_checkpoint(
            run.run_dir,
            run.step,
            model=run.module.model,
            objectives=run.module.objectives,
            tokenizer=run.tokenizer,
            languages=run.languages,
            optimizer_state=saved_optimizer(optimizer_state or run.optimizer.state_dict(), run),
            state=state,
            state_tensors=tensors,
            keep=run.cfg.keep_checkpoints,
            weights=weights,
        )
    barrier(run.world, run.bookkeeping)


def saved_optimizer(optimizer_state: dict, run: Run) -> dict:
    """What a checkpoint keeps of an optimizer: all of it, or (trainer.checkpoint_optimizer false, weights only)
    its groups (the schedule's rates) without the moments."""
    if run.cfg.checkpoint_optimizer:
        return optimizer_state
    return {"state": {}, "param_groups": optimizer_state["param_groups"]}
