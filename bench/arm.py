"""What a run trains: an arm (start, recipe, overrides), its budget, and the key its run folder is named by."""

from __future__ import annotations

import math
from dataclasses import dataclass

SMALL_BASE = "../shared/models/small-base"


@dataclass(frozen=True)
class Arm:
    name: str
    recipe: str | None
    """A built-in recipe or a YAML path; None: no training, the start model is measured as it is."""
    overrides: tuple[str, ...] = ()
    """`--set` strings; `{steps}`, `{warmup}` (a tenth) and `{half}` are filled with the run's step count."""
    init_from: str | None = SMALL_BASE
    """The start model; None trains from scratch."""
    preset: str | None = None
    """`pretrain --preset` (model size, batch, lr; the arm's overrides still win)."""
    seconds_per_step: float = 1.0
    """Estimated wall seconds per step on the 2-core machine (for the CPU-minute estimate only)."""
    flops_per_step: float | None = None
    """Estimated training FLOPs per step (FLOP budgets only: the estimated step count)."""
    continues: Arm | None = None
    """An arm whose run of the same seed this one starts from (trained first; `init_from` names its start)."""

    @property
    def trained(self) -> bool:
        return self.recipe is not None

    @property
    def lineage(self) -> tuple[Arm, ...]:
        """This arm and the arms it continues, itself first: every training its run needs."""
        return (self, *(self.continues.lineage if self.continues else ()))


@dataclass(frozen=True)
class Budget:
    steps: int | None = None
    """Optimizer steps (methods applied to an existing model)."""
    max_flops: float | None = None
    """Training FLOPs (`--set trainer.max_flops`, with max_steps from a 3-step probe of FLOPs per step)."""
    minutes: float | None = None
    """Training minutes (`--set trainer.max_minutes`): what learns fastest per CPU-minute."""

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.steps, self.max_flops, self.minutes)) != 1:
            raise ValueError(f"budget {self}: give exactly one of steps, max_flops and minutes")

    def key_text(self) -> str:
        """The budget in a run key: steps and FLOPs always, minutes only when set (so that adding a kind of budget
        renames no saved run)."""
        extra = f", minutes={self.minutes}" if self.minutes is not None else ""
        return f"Budget(steps={self.steps}, max_flops={self.max_flops}{extra})"

    def label(self) -> str:
        if self.minutes:
            return f"{self.minutes:g} training minutes"
        return f"{self.steps} steps" if self.steps is not None else f"{self.max_flops:.2g} training FLOPs"

    def amount(self) -> float:
        return next(x for x in (self.steps, self.max_flops, self.minutes) if x is not None)

    def estimated_steps(self, arm: Arm) -> int:
        if self.steps is not None:
            return self.steps
        if self.minutes:
            return math.ceil(self.minutes * 60 / arm.seconds_per_step)
        if not arm.flops_per_step:
            raise ValueError(f"arm {arm.name}: a FLOP budget needs flops_per_step for the estimate")
        return max(8, math.ceil(self.max_flops / arm.flops_per_step))


def key_text(key) -> str:
    """A run key as text, the text its folder's hash is taken of and the folder keeps (`key.txt`): Python's literal
    of the key's tuples, strings and None, a budget as `Budget.key_text`."""
    if isinstance(key, Budget):
        return key.key_text()
    if isinstance(key, tuple):
        return "(" + ", ".join(map(key_text, key)) + ("," if len(key) == 1 else "") + ")"
    if key is None or isinstance(key, str | int | float):
        return repr(key)
    raise TypeError(f"a run key holds tuples, strings, numbers, None and budgets, not {type(key).__name__}")


def fill(override: str, steps: int) -> str:
    """An arm's override with the run's step count filled in ({steps}, {warmup} = a tenth, {half})."""
    for name, value in (("steps", steps), ("warmup", max(1, steps // 10)), ("half", steps // 2)):
        override = override.replace("{" + name + "}", str(value))  # not str.format: values may hold YAML braces
    return override
