"""What a resume must check and record: the recipe it continues is the run's own, it asks for new steps, and
the run's `recipe.yaml` says what the run now trains to (with a comment per change)."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from polyalign.checkpoint import STATE_JSON
from polyalign.config import Recipe, TrainerConfig
from polyalign.io import DataError, atomic_write_text, read_json


def check_recipe_name(run_dir: Path, saved: str, named: str | None) -> None:
    """A recipe named beside --resume must be the run's: a resume always continues the run's own recipe."""
    if named is not None and named != saved:
        raise DataError(
            f"--resume: {run_dir} is a run of recipe {saved!r}, not {named!r}; drop the recipe name to continue it, "
            "or start the other recipe in a new --run-dir"
        )


def check_new_steps(cfg: TrainerConfig, checkpoint: Path) -> int:
    """The checkpoint's step, or a DataError when the recipe's budget leaves the run nothing to train."""
    state = read_json(checkpoint / STATE_JSON)
    step, counters = state["step"], state["counters"]
    spent = {
        "trainer.max_steps": (cfg.max_steps <= step, f"{cfg.max_steps}", f"set it above {step}"),
        "trainer.stop_at": (0 < cfg.stop_at <= step, f"{cfg.stop_at}", "--set trainer.stop_at=0 runs to max_steps"),
        "trainer.max_flops": (
            0 < cfg.max_flops <= counters["flops"],
            f"{cfg.max_flops:.3g}",
            f"the run has spent {counters['flops']:.3g}",
        ),
        "trainer.max_minutes": (
            0 < cfg.max_minutes * 60 <= counters["seconds"],
            f"{cfg.max_minutes:g}",
            f"the run has trained {counters['seconds'] / 60:.1f} min",
        ),
    }
    for key, (none_left, value, fix) in spent.items():
        if none_left:
            raise DataError(
                f"--resume: {checkpoint.parent.parent} is at step {step} and {key}={value} leaves no step to train; "
                f"{fix}"
            )
    return step


def flat(tree, prefix: str = "") -> dict[str, object]:
    """A nested recipe tree as dotted keys -> values (lists whole)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, object] = {}
    for k, v in tree.items():
        out |= flat(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def record_recipe(path: Path, recipe: Recipe, step: int) -> list[str]:
    """Write the resumed recipe over the run's `recipe.yaml` when it differs, keeping the file's comment lines
    and adding one that names each change; returns the changes ("key: old -> new")."""
    text = path.read_text(encoding="utf-8")
    before = flat(yaml.safe_load(text))
    after = flat(yaml.safe_load(yaml.safe_dump(recipe.to_dict(), sort_keys=False)))
    changes = [f"{k}: {before.get(k)} -> {after.get(k)}" for k in after | before if before.get(k) != after.get(k)]
    if changes:
        history = [line for line in text.splitlines() if line.startswith("#")]
        history.append(f"# resumed at step {step}: {'; '.join(changes)}")
        body = yaml.safe_dump(recipe.to_dict(), sort_keys=False)
        atomic_write_text(path, "\n".join(history) + "\n" + body)
    return changes


def pad_moments_to_parameters(optimizer: torch.optim.Optimizer) -> None:
    """Give AdamW moments saved with fewer rows than their parameter now has (a run saved before the model padded
    its vocabulary to a multiple of 64 rows) zero rows at the end: the padding rows never get a gradient, so
    their moments are zero in a run that had them from the start."""
    for p, state in optimizer.state.items():
        for name, value in state.items():
            short = torch.is_tensor(value) and value.dim() == p.dim() > 0 and value.shape[0] < p.shape[0]
            if short and value.shape[1:] == p.shape[1:]:
                state[name] = torch.cat([value, value.new_zeros(p.shape[0] - value.shape[0], *p.shape[1:])])
