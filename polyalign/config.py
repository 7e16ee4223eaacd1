"""Recipes: what a pre-training run is, as typed dataclasses loaded from YAML with dotted overrides.

A recipe names the encoder, the objectives with their weights, the data streams and the trainer settings.
Built-in recipes live in `polyalign/recipes/`; any YAML path works too. Overrides look like
`trainer.max_steps=100` or `objectives.1.weight=0.5` (values are parsed as YAML).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from polyalign.data.streams import StreamConfig
from polyalign.io import DataError

RECIPES_DIR = Path(__file__).parent / "recipes"


@dataclass
class ObjectiveSpec:
    name: str
    """A key of polyalign.objectives.OBJECTIVES."""
    weight: float = 1.0
    """Its weight in the summed loss."""
    start_step: int = 0
    """First step at which it is trained (ERNIE-M §3.2 adds BTMLM in a second stage)."""
    every: int = 1
    """Train it on steps where step % every == offset (VECO §4 alternates monolingual and parallel batches)."""
    offset: int = 0
    config: dict = field(default_factory=dict)
    """Settings for the objective's own Config dataclass."""

    def active(self, step: int) -> bool:
        return step >= self.start_step and step % self.every == self.offset


@dataclass
class DataConfig:
    prepared: str | None = None
    """Folder written by `polyalign prepare`."""
    languages: list[str] | None = None
    """Train on these languages only (default: all in the prepared folder)."""
    mono: StreamConfig = field(default_factory=StreamConfig)
    parallel: StreamConfig = field(default_factory=StreamConfig)


@dataclass
class TrainerConfig:
    max_steps: int = 10_000
    """Optimizer steps; the linear schedule decays to zero here."""
    lr: float = 2e-4
    warmup_steps: int = 1_000
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    """AdamW betas, as in XLM-R, XLM-Align and XLM-E (Tables 10/11/6)."""
    eps: float = 1e-6
    clip_norm: float = 1.0
    """Gradient-norm clipping; 0 switches it off."""
    grad_accumulation: int = 1
    precision: str = "bf16"
    """`bf16`: bf16 autocast with fp32 master weights (CPU and CUDA); `fp32`: full precision."""
    seed: int = 0
    log_every: int = 10
    save_every: int = 500
    """Write a checkpoint every this many steps (and at the end)."""
    keep_checkpoints: int = 2
    """How many recent checkpoints to keep; 0 keeps all (for evaluation along the run)."""
    max_minutes: float = 0.0
    """Stop after this much wall-clock training time (saving a checkpoint); 0 = no limit."""
    stop_at: int = 0
    """Pause at this step (saving a checkpoint) without changing the schedule; 0 = run to max_steps."""
    threads: int = 0
    """torch intra-op threads; 0 keeps PyTorch's default."""
    train_only: list[str] = field(default_factory=list)
    """Parameter-name substrings: when set, only matching parameters are trained (until `train_only_until`)."""
    train_only_until: int = 0
    """Step at which `train_only` stops applying (VECO §4 trains only cross-attention at first); 0 = always."""
    loader_workers: int = 2
    """Processes that build batches ahead of the step (at most one per accumulation slot); 0 builds them in the
    training process. The batches are the same for any number."""
    activation_checkpointing: bool = False
    """Recompute each encoder layer in backward instead of storing its activations (less memory, ~1/3 more
    compute): for long sequences or large batches on a GPU."""
    compile: bool = False
    """torch.compile the model (CUDA: fuses elementwise ops; the first steps are slow while it compiles)."""

    def __post_init__(self) -> None:
        if self.precision not in ("bf16", "fp32"):
            raise ValueError(f"trainer.precision={self.precision!r}: use 'bf16' or 'fp32'")
        if self.grad_accumulation < 1:
            raise ValueError(f"trainer.grad_accumulation={self.grad_accumulation}: must be >= 1")


@dataclass
class Recipe:
    name: str
    objectives: list[ObjectiveSpec]
    model: dict = field(default_factory=dict)
    """EncoderConfig fields; `num_languages: auto` means one embedding per language of the data."""
    init_from: str | None = None
    """Start from this model folder (a polyalign checkpoint or a local Hugging Face folder)."""
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------------------


def _build(cls, value, where: str):
    """Build dataclass `cls` (or a typed container) from plain YAML data, rejecting unknown keys."""
    origin = typing.get_origin(cls)
    if dataclasses.is_dataclass(cls):
        if not isinstance(value, dict):
            raise DataError(f"{where}: expected a mapping, got {value!r}")
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(value) - names
        if unknown:
            raise DataError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(names)}")
        kwargs = {k: _build(hints[k], v, f"{where}.{k}") for k, v in value.items()}
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as err:
            raise DataError(f"{where}: {err}") from None
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in typing.get_args(cls) if a is not type(None)]
        return _build(inner[0], value, where)
    if origin is list:
        (item,) = typing.get_args(cls)
        return [_build(item, v, f"{where}.{i}") for i, v in enumerate(value or [])]
    if origin is tuple:
        return tuple(value)
    if cls is float and isinstance(value, int | float | str):
        return float(value)
    return value


def apply_override(tree: dict, override: str) -> None:
    """Set `a.b.0.c=value` in a nested dict/list tree."""
    if "=" not in override:
        raise DataError(f"override {override!r}: expected key.path=value")
    path, raw = override.split("=", 1)
    keys = path.split(".")
    node = tree
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    value = yaml.safe_load(raw)
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def resolve_recipe_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise DataError(f"{path}: recipe file not found")
        return path
    builtin = RECIPES_DIR / f"{name_or_path}.yaml"
    if not builtin.is_file():
        known = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
        raise DataError(f"recipe {name_or_path!r} not found; built-in recipes: {', '.join(known)}")
    return builtin


def load_recipe(name_or_path: str, overrides: list[str] | None = None) -> Recipe:
    path = resolve_recipe_path(name_or_path)
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise DataError(f"{path}:{mark.line + 1 if mark else '?'}: invalid YAML") from None
    tree.setdefault("name", path.stem)
    for o in overrides or []:
        apply_override(tree, o)
    return recipe_from_dict(tree, str(path))


def recipe_from_dict(tree: dict, where: str = "recipe") -> Recipe:
    return _build(Recipe, tree, where)
