"""The optimizer and its schedule: AdamW on parameter groups, linear warmup and decay (shared with
fine-tuning), and `trainer.train_only`'s held parameters (VECO §4)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from polyalign.config import TrainerConfig


def linear_schedule(step: int, warmup_steps: int, total_steps: int) -> float:
    """The learning-rate factor at (0-based) `step`: 1) linear warmup to the peak over warmup_steps, 2) linear
    decay to zero at total_steps."""
    if step < warmup_steps:
        return (step + 1) / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def fit_warmup(config: TrainerConfig) -> tuple[TrainerConfig, str | None]:
    """A warm-up at least as long as the run never lets the learning rate reach trainer.lr: it is cut to 10% of
    max_steps, and the returned line says so (None when the warm-up fits)."""
    if config.warmup_steps < config.max_steps:
        return config, None
    fitted = config.max_steps // 10
    return dataclasses.replace(config, warmup_steps=fitted), (
        f"note: trainer.warmup_steps={config.warmup_steps} is not shorter than trainer.max_steps={config.max_steps}, "
        f"so the learning rate would never reach trainer.lr={config.lr:g}: warming up over {fitted} steps instead "
        "(10% of max_steps)"
    )


def parameter_groups(module: nn.Module, config: TrainerConfig) -> list[dict]:
    """Weight decay on matrices only (not on biases and LayerNorm gains, as in BERT/RoBERTa); parameters
    outside `train_only` get their own groups so their learning rate can be held at zero."""
    groups: dict[tuple[bool, bool], list] = {}
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        decay = p.ndim >= 2
        held = bool(config.train_only) and not any(s in name for s in config.train_only)
        groups.setdefault((decay, held), []).append(p)
    return [
        {"params": ps, "weight_decay": config.weight_decay if decay else 0.0, "held": held}
        for (decay, held), ps in sorted(groups.items())
    ]


def freeze_held_for_good(module: nn.Module, config: TrainerConfig) -> None:
    """Parameters `train_only` holds for the whole run (train_only_until 0) get no gradient at all: autograd then
    skips their backward, e.g. the dense (250k, C) gradient of held word embeddings, which would be dropped."""
    if config.train_only and config.train_only_until == 0:
        for name, p in module.named_parameters():
            if not any(s in name for s in config.train_only):
                p.requires_grad_(False)


def holding(step: int, config: TrainerConfig) -> bool:
    """Whether `train_only` still holds the other parameters at (0-based) `step`."""
    return bool(config.train_only) and (config.train_only_until == 0 or step < config.train_only_until)


def learning_rate_factor(step: int, config: TrainerConfig, held: bool = False) -> float:
    """`linear_schedule` over max_steps. Held parameters: 0 while held, then the same schedule times a fresh
    linear warmup over warmup_steps from their release (train_only_until), so that parameters joining a run
    at full learning rate are warmed up like new ones."""
    if held and holding(step, config):
        return 0.0
    factor = linear_schedule(step, config.warmup_steps, config.max_steps)
    if held:  # released at train_only_until
        factor *= min(1.0, (step - config.train_only_until + 1) / max(1, config.warmup_steps))
    return factor


def drop_held_gradients(optimizer: torch.optim.Optimizer, step: int, config: TrainerConfig) -> None:
    """While held, drop the held groups' gradients: AdamW skips a parameter without one, so its moments do not
    accumulate (a zero learning rate alone would still update exp_avg and exp_avg_sq). Called after backward
    (DDP has reduced the gradients; every rank drops the same ones) and before clipping, so that the clipping
    norm is that of the parameters being trained."""
    if not holding(step, config):
        return
    for group in optimizer.param_groups:
        if group["held"]:
            for p in group["params"]:
                p.grad = None


def update_parameters(
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    parameters: Iterable[nn.Parameter],
    clip_norm: float,
) -> torch.Tensor | None:
    """The trainer's update once the step's gradients are in: clip their norm over `parameters` (when clip_norm;
    a parameter without a gradient adds nothing), the optimizer's step, the schedule's next rate, gradients
    cleared. Returns the norm before clipping (None without clipping)."""
    norm = torch.nn.utils.clip_grad_norm_(parameters, clip_norm) if clip_norm else None
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


@contextmanager
def training_only(module: nn.Module, parameters: Iterable[nn.Parameter]) -> Iterator[None]:
    """Inside the block only `parameters` of `module` take a gradient (autograd then builds no graph for the
    others); after it, every flag as it was."""
    flags = [p.requires_grad for p in module.parameters()]
    kept = {id(p) for p in parameters}
    for p in module.parameters():
        p.requires_grad_(id(p) in kept)
    try:
        yield
    finally:
        for p, flag in zip(module.parameters(), flags, strict=True):
            p.requires_grad_(flag)


def optimized_parameters(optimizer: torch.optim.Optimizer) -> list[nn.Parameter]:
    """The optimizer's parameters in its own order (the order of its state_dict's indices)."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def build_optimizer(module: nn.Module, config: TrainerConfig):
    """AdamW over `parameter_groups` and its schedule (a factor per group: held groups follow their own)."""
    groups = parameter_groups(module, config)
    # fused: one vectorised kernel per tensor instead of ~10 elementwise passes (~8x faster on CPU)
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=tuple(config.betas), eps=config.eps, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, [lambda s, h=g["held"]: learning_rate_factor(s, config, h) for g in groups]
    )
    return optimizer, scheduler
