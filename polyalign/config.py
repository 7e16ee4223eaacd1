"""Recipes: what a pre-training run is, as typed dataclasses loaded from YAML with dotted overrides.

A recipe names the encoder, the objectives with their weights, the data streams and the trainer settings.
Built-in recipes live in `polyalign/recipes/`; any YAML path works too. Overrides look like
`trainer.max_steps=100` or `objectives.1.weight=0.5` (values are parsed as YAML).

A preset (`polyalign/recipes/presets/NAME.yaml`) is a partial recipe of `model:`, `data:` and `trainer:` keys
(a model size and the batch and learning-rate settings that go with it on some machine); it is merged over
any recipe before the overrides, so an override still wins, and the recipe's objectives are left as they are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from polyalign.data.streams import StreamConfig
from polyalign.io import DataError, read_text
from polyalign.schema import RecipeError, build_dataclass, flat_values, join_key

RECIPES_DIR = Path(__file__).parent / "recipes"
PRESETS_DIR = RECIPES_DIR / "presets"
PRESET_SECTIONS = ("model", "data", "trainer")
"""The recipe sections a preset may set: sizes, batches and schedules, never objectives."""


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
    stream: dict = field(default_factory=dict)
    """Overrides of data.mono / data.parallel for this objective's own stream (e.g. `max_examples: 64` for a
    smaller TLM batch beside a large contrastive one)."""

    def __post_init__(self) -> None:
        if self.start_step < 0 or self.every < 1 or not 0 <= self.offset < self.every:
            raise ValueError(
                f"start_step={self.start_step}, every={self.every}, offset={self.offset}: "
                "need start_step >= 0, every >= 1, 0 <= offset < every"
            )

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
    pack: bool | str = "auto"
    """Lay several examples (sentences; translation pairs, each read as one sequence) side by side in rows of the
    longest example's length, attention kept inside each, instead of padding every example to the longest of its
    batch; `max_tokens` then counts rows x length, nearly all real tokens. `auto`: on CUDA when every objective
    of the recipe reads packed rows (MLM, TLM, MRTD, TRTD, contrast), where no padding means fused attention
    kernels; on a CPU not, so the batches the project's CPU measurements were made on stay as they were. `true`
    packs on any device. Not `mono.pack` (lines joined into one example)."""
    unpad: bool | str = False
    """Run every dense layer on the batch's real tokens alone, attention per example (ModernBERT's unpadding,
    model/unpadded.py): variable-length flash attention on CUDA, the rows' own attention elsewhere (same values).
    `auto`: on CUDA with packed rows and no position bias (the variable-length kernel takes no additive bias);
    `true`: on any device, for recipes whose every objective reads packed rows; `false` computes padded rows."""

    def __post_init__(self) -> None:
        if isinstance(self.pack, str) and self.pack != "auto":
            raise ValueError(f"pack={self.pack!r}: use true, false or auto")
        if isinstance(self.unpad, str) and self.unpad != "auto":
            raise ValueError(f"unpad={self.unpad!r}: use true, false or auto")

    def for_objective(self, spec: ObjectiveSpec) -> DataConfig:
        """This data config with the objective's own stream overrides applied to both stream kinds."""
        if not spec.stream:
            return self
        where = f"objectives.{spec.name}.stream"
        try:
            return dataclasses.replace(
                self,
                mono=dataclasses.replace(self.mono, **spec.stream),
                parallel=dataclasses.replace(self.parallel, **spec.stream),
            )
        except (TypeError, ValueError) as err:
            raise DataError(f"{where}: {err}") from None


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
    """How many recent checkpoints to keep (1 = the last only); 0 keeps all (for evaluation along the run). Only
    this run's `checkpoints/step-NNNNNNN` folders are ever deleted, never anything else in the run folder."""
    checkpoint_optimizer: bool = True
    """Keep AdamW's moments in each checkpoint. `false` keeps weights, schedule, data position and RNG only, about
    a third of the size (multilingual-e5-small: ~470 MB instead of ~1.4 GB); a resume from such a checkpoint
    starts fresh moments (and says so), so its loss curve is not the uninterrupted run's."""
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
    process_timeout_s: float = 120.0
    """With several processes: how long one waits in a collective for the others before it gives up and stops
    (the process group's timeout). A peer that dies is usually noticed at once (its connection closes); this
    bounds the wait for one that hangs or whose machine is lost."""
    loader_workers: int = 2
    """Processes that build batches ahead of the step (at most one per accumulation slot); 0 builds them in the
    training process. The batches are the same for any number."""
    activation_checkpointing: bool = False
    """Recompute each encoder layer in backward instead of storing its activations (less memory, ~1/3 more
    compute): for long sequences or large batches on a GPU."""
    compile: bool | str = "auto"
    """torch.compile the training step: `auto` (on with CUDA, where it fuses the elementwise ops around the
    matrix products; off on a CPU, where compiling costs more than it saves), true or false. The first step
    compiles (minutes at XLM-R-base size); the first log line reports that step's time as `compile_seconds`."""
    distributed: str = "ddp"
    """With several processes: `ddp` keeps a full copy of weights and optimizer moments per process; `fsdp` shards
    them (FSDP2 `fully_shard` per encoder layer and at the root), for models that do not fit with DDP. Checkpoints
    hold full weights either way, so a run saved under one resumes under the other."""
    max_flops: float = 0.0
    """Stop (saving a checkpoint) once the run's training FLOPs reach this; 0 = no limit. Checked when the window is
    read, every `log_every` steps: the run stops at the first log step at or past the budget (a run compared at
    equal FLOPs wants log_every small against the run's length)."""
    head_warmup_steps: int = 200
    """When `init_from` has no trained MLM head (multilingual-e5-small ships none; an ELECTRA discriminator) and an
    objective reads one (MLM, TLM, DWA, CAMLM, BTMLM, CA-MLM, PPA's TLM, XLM-E's generator with `generator_init:
    model`), that head is first trained alone on MLM for this many steps, the encoder frozen: the loop's first
    phase. These steps are logged apart (`head_warmup.jsonl`) and count toward no budget (max_steps, max_minutes,
    max_flops); a resume does not repeat them (one stopped inside them goes on where it was). 0 = none: the
    objectives start with a random head whose gradients rewrite the encoder.
    The default is the project's measurement (arm `real-mlm-tlm-warm-head`): 200 head-only
    steps at lr 1e-2 took e5-small's new head from an MLM loss of 10.38 to 8.40, and MLM + TLM from that head kept
    Tatoeba-14 at 91.0 (start 90.5; from a cold head 67.0 / 53.9)."""
    head_warmup_lr: float = 1e-2
    """Peak learning rate of the head warm-up (linear warm-up over its first 10% of steps, then linear decay to
    zero; AdamW with this recipe's betas, eps and weight decay): 1e-2, as in that measurement."""

    def __post_init__(self) -> None:
        if self.precision not in ("bf16", "fp32"):
            raise ValueError(f"precision={self.precision!r}: use 'bf16' or 'fp32'")
        if self.compile not in (True, False, "auto"):
            raise ValueError(f"compile={self.compile!r}: use auto, true or false")
        if self.distributed not in ("ddp", "fsdp"):
            raise ValueError(f"distributed={self.distributed!r}: use 'ddp' or 'fsdp'")
        at_least = {"max_steps": 1, "grad_accumulation": 1, "log_every": 1, "save_every": 1, "warmup_steps": 0}
        at_least |= dict.fromkeys(("keep_checkpoints", "stop_at", "threads", "train_only_until", "loader_workers"), 0)
        at_least |= dict.fromkeys(("weight_decay", "clip_norm", "max_minutes", "max_flops", "head_warmup_steps"), 0)
        at_least["process_timeout_s"] = 1
        for name, low in at_least.items():
            if getattr(self, name) < low:
                raise ValueError(f"{name}={getattr(self, name)}: must be at least {low}")
        # lr 0 is allowed: a run that must leave the weights as they are (checking a continuation)
        if not (self.lr >= 0 and self.head_warmup_lr > 0 and self.eps > 0 and all(0 <= b < 1 for b in self.betas)):
            raise ValueError(
                f"lr={self.lr}, head_warmup_lr={self.head_warmup_lr}, eps={self.eps}, betas={list(self.betas)}: "
                "need lr >= 0, head_warmup_lr > 0, eps > 0, 0 <= betas < 1"
            )


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
# Checks: every value of a recipe is checked against the dataclass field it fills (schema.py), before anything runs.


def check_model(model: dict):
    """`model:` holds EncoderConfig fields (with `num_languages: auto`); check names, types and ranges together
    (heads divide the width); returns the EncoderConfig."""
    from polyalign.model import EncoderConfig

    fixed = {k: v for k, v in model.items() if not (k == "num_languages" and v == "auto")}
    return build_dataclass(EncoderConfig, fixed, "model")


def check_objective(index: int, spec: ObjectiveSpec) -> None:
    """An objective's name is registered and its `config:` fits the objective's Config dataclass."""
    from polyalign.objectives import objective_config

    objective_config(spec.name, spec.config, f"objectives.{index}")


def longest_row(recipe: Recipe) -> tuple[int, str]:
    """The most positions a row of this recipe's data can take, and what gives it: `<s> x </s>` takes a stream's
    max_length + 2; a pair laid out with positions running on (TLM style `ppa`, PPA §2.2) 2 x max_length + 3."""
    from polyalign.objectives import objective_config

    longest, reason = 0, ""
    for i, spec in enumerate(recipe.objectives):
        cls, config = objective_config(spec.name, spec.config, f"objectives.{i}")
        kind = "parallel" if cls.stream == "parallel" else "mono"  # adjacent: pairs of mono segments
        length = getattr(recipe.data.for_objective(spec), kind).max_length
        style = flat_values(config).get("style")  # as the recipe writes it, wherever the config holds it
        if kind == "parallel" and style == "ppa":
            row, how = 2 * length + 3, f"2 x data.parallel.max_length={length} + 3 special tokens ({spec.name}, ppa)"
        else:
            row, how = length + 2, f"data.{kind}.max_length={length} + 2 special tokens ({spec.name})"
        if row > longest:
            longest, reason = row, how
    return longest, reason


def check_positions(recipe: Recipe, model) -> None:
    """A learned position table (`model`: an EncoderConfig) must cover the longest row the data can give."""
    if not model.absolute_positions:
        return  # a relative position bias has no table to run past
    longest, reason = longest_row(recipe)
    if model.max_positions < longest:
        raise RecipeError(
            "model.max_positions",
            f"{model.max_positions} is shorter than the longest row the data can give, {longest} = {reason}; "
            f"set model.max_positions to at least {longest} or lower the max_length",
        )


def recipe_from_dict(tree, where: str = "recipe") -> Recipe:
    """Check a whole recipe tree against the schema; errors are RecipeErrors keyed by dotted path."""
    recipe = build_dataclass(Recipe, tree, "")
    if not recipe.objectives:
        raise RecipeError("objectives", "the list is empty; name at least one objective (e.g. `- name: mlm`)")
    model = check_model(recipe.model)
    for i, spec in enumerate(recipe.objectives):
        check_objective(i, spec)
    unpacked = objectives_reading_unpacked_rows(recipe)
    if recipe.data.pack is True and unpacked:
        raise RecipeError(
            "data.pack",
            f"true, but {', '.join(unpacked)} read each example as a unit, not packed rows; set it to auto (packs "
            "when every objective can) or false",
        )
    if recipe.data.unpad is True and unpacked:
        raise RecipeError(
            "data.unpad",
            f"true, but {', '.join(unpacked)} read each example as a unit, not packed rows; set it to auto or false",
        )
    if recipe.init_from is None:  # a warm start's sizes are its checkpoint's: checked when it is loaded
        check_positions(recipe, model)
    # Absolute paths: the saved recipe must work when a run is resumed from another working directory.
    if recipe.data.prepared is not None:
        recipe.data.prepared = str(Path(recipe.data.prepared).absolute())
    if recipe.init_from is not None:
        recipe.init_from = str(Path(recipe.init_from).absolute())
    return recipe


def objectives_reading_unpacked_rows(recipe: Recipe) -> list[str]:
    """The recipe's objectives that do not read packed rows (see `Objective.reads_packed_rows`)."""
    from polyalign.objectives import OBJECTIVES

    return [o.name for o in recipe.objectives if not OBJECTIVES[o.name].reads_packed_rows]


def packs_rows(recipe: Recipe, device_type: str) -> bool:
    """Whether the run's streams lay their examples in packed rows on this device: `data.pack`, `auto` resolved."""
    auto = recipe.data.pack == "auto" and device_type == "cuda" and not objectives_reading_unpacked_rows(recipe)
    return recipe.data.pack is True or auto


def unpads_rows(recipe: Recipe, device_type: str, position_bias: str) -> bool:
    """Whether the run's batches go through the encoder unpadded: `data.unpad`, `auto` resolved for this device and
    the model's position bias."""
    auto = recipe.data.unpad == "auto" and packs_rows(recipe, device_type) and position_bias == "none"
    return recipe.data.unpad is True or (auto and device_type == "cuda")


# ---------------------------------------------------------------------------------------------------------
# Overrides and files


def apply_override(tree: dict, override: str) -> str:
    """Set `a.b.0.c=value` (value parsed as YAML) in a nested dict/list tree; returns the dotted key."""
    if "=" not in override:
        raise DataError(f"--set {override}: expected key.path=value, e.g. trainer.max_steps=100")
    path, raw = override.split("=", 1)
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise DataError(f"--set {override}: the value is not valid YAML") from None
    keys = path.strip().split(".")
    node = tree
    for depth, k in enumerate(keys):
        here = ".".join(keys[: depth + 1])
        last = depth == len(keys) - 1
        if isinstance(node, list):
            if not k.isdigit() or int(k) >= len(node):
                raise DataError(
                    f"--set {override}: {here}: no such item; the list has {len(node)} (0..{len(node) - 1})"
                )
            if last:
                node[int(k)] = value
            node = node[int(k)]
        elif isinstance(node, dict):
            if last:
                node[k] = value
            node = node.setdefault(k, {})
        else:
            above = ".".join(keys[:depth])
            raise DataError(f"--set {override}: {above} is {node!r}, which has no key {k!r}")
    return path.strip()


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


def load_recipe(name_or_path: str | Path, overrides: list[str] | None = None, preset: str | None = None) -> Recipe:
    """Read, preset, override and check a recipe; a bad value is reported at its file:line, its preset or its --set."""
    path = resolve_recipe_path(str(name_or_path))
    tree, lines = _read_yaml(path, "a recipe is a mapping (model:, objectives:, data:, trainer:)")
    tree.setdefault("name", path.stem)
    preset_by: dict[str, str] = {}
    if preset is not None:
        preset_path = resolve_preset_path(preset)
        preset_tree, preset_lines = _read_yaml(preset_path, f"a preset is a mapping of {', '.join(PRESET_SECTIONS)}")
        for key in merge_preset(tree, preset_tree, preset):
            preset_by[key] = f"preset {preset} ({preset_path}:{preset_lines.get(key, 1)})"
    set_by = {apply_override(tree, o): f"--set {o}" for o in overrides or []}
    try:
        return recipe_from_dict(tree, str(path))
    except RecipeError as err:
        by = set_by | {k: v for k, v in preset_by.items() if k not in set_by}
        raise DataError(_locate(err, path, lines, by)) from None


def resolve_preset_path(name: str) -> Path:
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
        raise DataError(f"preset {name!r} not found; built-in presets: {', '.join(known)}")
    return path


def merge_preset(tree: dict, preset_tree: dict, name: str) -> list[str]:
    """Deep-merge a preset into a recipe tree (mappings merge, anything else replaces); returns the dotted keys
    it set. Only `model:`, `data:` and `trainer:` may be named: a preset never changes the objectives."""
    other = [k for k in preset_tree if k not in PRESET_SECTIONS]
    if other:
        raise DataError(f"preset {name}: {', '.join(map(str, other))}: a preset sets only {', '.join(PRESET_SECTIONS)}")
    return _merge(tree, preset_tree, "")


def _merge(into: dict, tree: dict, prefix: str) -> list[str]:
    keys = []
    for k, v in tree.items():
        key = join_key(prefix, str(k))
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            keys += _merge(into[k], v, key)
        else:
            into[k] = v
            keys.append(key)
    return keys


def _read_yaml(path: Path, what: str) -> tuple[dict, dict[str, int]]:
    """A YAML mapping and the line of each of its dotted keys; invalid YAML or a non-mapping is a DataError."""
    text = read_text(path)
    try:
        tree = yaml.safe_load(text)
        lines = _key_lines(yaml.compose(text))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise DataError(f"{path}:{mark.line + 1 if mark else '?'}: invalid YAML") from None
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise DataError(f"{path}:1: {what}, not {tree!r}")
    return tree, lines


def _locate(err: RecipeError, path: Path, lines: dict[str, int], set_by: dict[str, str]) -> str:
    """Prefix an error with what set its key (`--set ...`, `preset ...`), or with the file:line of its key."""
    for key, source in set_by.items():
        if err.key == key or err.key.startswith(key + ".") or key.startswith(err.key + "."):
            return f"{source}: {err}"
    parts = err.key.split(".")
    while parts and ".".join(parts) not in lines:
        parts.pop()
    line = lines.get(".".join(parts), 1)
    return f"{path}:{line}: {err}"


def _key_lines(node, prefix: str = "") -> dict[str, int]:
    """Dotted key path -> 1-based line, for every key and list item of a composed YAML document."""
    out: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = join_key(prefix, str(k.value))
            out[key] = k.start_mark.line + 1
            out |= _key_lines(v, key)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            key = join_key(prefix, str(i))
            out[key] = v.start_mark.line + 1
            out |= _key_lines(v, key)
    return out
