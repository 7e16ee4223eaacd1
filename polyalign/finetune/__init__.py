"""Fine-tuning on XTREME-style tasks: one shared loop (loop.py), one small file per task format.

TASKS is the registry: name -> a factory building the task (pair classification takes the `transform` and
`encoder_wrapper` hooks, see pairs.py).
"""

from __future__ import annotations

from pathlib import Path

from polyalign.finetune.base import SETTINGS, Subsample, Task
from polyalign.finetune.loop import FinetuneConfig, apply_overrides, run_finetune
from polyalign.finetune.pairs import PAWSX, XNLI, PairClassification
from polyalign.finetune.qa import ExtractiveQA
from polyalign.finetune.tokens import NER, POS, TokenClassification
from polyalign.io import DataError

TASKS = {
    "xnli": lambda **hooks: PairClassification(XNLI, **hooks),
    "pawsx": lambda **hooks: PairClassification(PAWSX, **hooks),
    "ner": lambda: TokenClassification(NER),
    "pos": lambda: TokenClassification(POS),
    "qa": lambda: ExtractiveQA(),
}


def build_task(name: str, **hooks) -> Task:
    if name not in TASKS:
        raise DataError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
    return TASKS[name](**hooks)


def configure(task: Task, setting: str, overrides: list[str] | None = None) -> FinetuneConfig:
    """The loop's settings for `setting`: the papers' hyperparameters, then `overrides` (`--set` values:
    `finetune.KEY=VALUE` for the loop, `task.KEY=VALUE` for the task's options, which it sets on `task`)."""
    if setting not in SETTINGS:
        raise DataError(f"--setting {setting}: use one of {', '.join(SETTINGS)}")
    defaults = task.defaults.get(setting)
    if defaults is None:
        raise DataError(f"{task.name}: no {setting} protocol (the pack lacks the training data it needs)")
    config, task.options = apply_overrides(FinetuneConfig(**defaults), task.options, overrides or [])
    if getattr(task.options, "code_switch", False) and setting != "translate-train-all":
        raise DataError(
            f"--code-switch: PPA §2.3 code-switches translated training data; use --setting translate-train-all "
            f"(not {setting})"
        )
    return config


def finetune_task(
    loaded,
    task: Task | str,
    data_dir: str | Path,
    setting: str = "transfer",
    seeds: int = 3,
    overrides: list[str] | None = None,
    sample: Subsample | None = None,
    progress: bool = True,
) -> dict:
    """Fine-tune and score one task under its protocol: the papers' hyperparameters for the setting, then
    `overrides` (see `configure`)."""
    task = build_task(task) if isinstance(task, str) else task
    if seeds < 1:
        raise DataError(f"--seeds {seeds}: need at least 1")
    config = configure(task, setting, overrides)
    positions = loaded.model.config.max_positions
    if config.max_length > positions:
        raise DataError(
            f"{task.name}: max_length {config.max_length} exceeds the model's {positions} positions; "
            f"pass --set finetune.max_length={positions} (or less)"
        )
    sample = sample or Subsample()
    data = task.load(data_dir, setting, sample)
    changed = f"Overrides of the paper defaults: {', '.join(overrides)}." if overrides else ""
    describe = " ".join(p for p in (changed, sample.describe(data)) if p)
    return run_finetune(task, loaded, data, config, seeds, progress, describe, setting)


__all__ = ["TASKS", "FinetuneConfig", "Subsample", "build_task", "configure", "finetune_task"]
