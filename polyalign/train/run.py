"""One process's part of a training run: what it holds (`Run`), how it is built from a recipe, with the head
warm-up a start without a trained MLM head trains first: a `Phase` the loop is given (saving.py saves and restores
it). Every objective either runs is in the module from the build on; none joins or leaves it later."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import yaml
from torch import nn

from polyalign.config import DataConfig, ObjectiveSpec, Recipe, TrainerConfig, load_recipe, packs_rows
from polyalign.data.prepared import PreparedData
from polyalign.data.streams import build_stream
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.model.heads import loss_path
from polyalign.objectives import OBJECTIVES, HeadMLM, build_objective, head_parameters, setup_objectives
from polyalign.tokenizer import Tokenizer
from polyalign.train.distributed import bookkeeping_group, compiles, init_distributed, wrap_for_processes
from polyalign.train.fsdp import check_fsdp
from polyalign.train.head_warmup import PHASE, STREAM_SALT, HeadWarmup, plan_head_warmup, warmup_trainer
from polyalign.train.metrics import Window
from polyalign.train.optim import build_optimizer, freeze_held_for_good, training_only
from polyalign.train.resume import check_recipe_name
from polyalign.train.start import build_model, check_warm_start

RECIPE_FILE = "recipe.yaml"
RUN_SALT = 7919
"""Salt of the run's masking generators (its streams are salted by objective index)."""


class PretrainingModule(nn.Module):
    """The model plus every objective's own parameters; forward sums the weighted objective losses."""

    def __init__(self, model: MaskedLanguageModel, objectives: dict[str, nn.Module], weights: dict[str, float]):
        super().__init__()
        self.model = model
        self.objectives = nn.ModuleDict(objectives)
        self.weights = weights

    def forward(self, batches: dict[str, dict[str, torch.Tensor]]):
        """(weighted loss sum, metrics, (hardware FLOPs, model FLOPs)); see ObjectiveOutput."""
        total, metrics, flops, model_flops = 0.0, {}, 0.0, 0.0
        for name, batch in batches.items():
            out = self.objectives[name](self.model, batch)
            total = total + self.weights[name] * out.loss
            metrics[f"{name}/loss"] = out.loss.detach().float()
            for k, v in out.metrics.items():
                value = v.detach().float() if torch.is_tensor(v) else torch.tensor(float(v), device=out.loss.device)
                metrics[f"{name}/{k}"] = value
            flops += out.flops
            model_flops += out.flops if out.model_flops is None else out.model_flops
        return total, metrics, (flops, model_flops)


@dataclass
class Slot:
    """One micro-batch position in a step: a stream per objective and a generator for masking."""

    streams: dict
    rng: np.random.Generator

    def state_dict(self) -> dict:
        return {"streams": {k: s.state_dict() for k, s in self.streams.items()}, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        for k, s in self.streams.items():
            s.load_state_dict(state["streams"][k])
        self.rng.bit_generator.state = state["rng"]


@dataclass(kw_only=True)
class Progress:
    """What the loop counts as it trains a run or a phase (the rest of either is what was built for it)."""

    step: int = 0
    counters: dict = field(default_factory=lambda: {"tokens": 0, "flops": 0.0, "seconds": 0.0})
    slot_states: list[dict] = field(default_factory=list)
    """Every slot's data state after the last trained step: what a checkpoint saves (the loader runs ahead)."""
    grad_norm: torch.Tensor | None = None
    window: Window | None = None
    """The steps since the last log line (losses, metrics, tokens, FLOPs, time), read every log_every steps."""
    flops_per_step: float = 0.0
    """Mean training FLOPs per step (all processes) in the last logged window: predicts where max_flops is met."""
    compile_seconds: float = 0.0
    """Wall time of this call's first step when compiled (the compilation, mostly), until the next log line
    reports it as `compile_seconds`; the first window's tokens/s includes it."""
    loss_path: str = ""
    """The MLM loss's path on this device (`polyalign.model.heads.loss_path`), until the first log line records it."""


@dataclass
class Run(Progress):
    """One process's part of a training run: what `build_run` built, and its progress (`Progress`), advanced by
    `train_step`."""

    recipe: Recipe
    run_dir: Path
    rank: int
    world: int
    device: torch.device
    tokenizer: Tokenizer
    languages: list[str]
    module: PretrainingModule
    """The plain module: parameter groups and checkpoints read it."""
    trained: nn.Module
    """What runs forward: the module, or its DDP and/or compiled wrapper (FSDP shards the module itself)."""
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    slots: list[Slot]
    bookkeeping: object = None
    """Process group for CPU-side collectives (checkpoint data): gloo beside NCCL; None = the default group."""
    head_warmup: HeadWarmup | None = None
    """What the head-only steps before step 0 did (`trainer.head_warmup_steps`), when `init_from` had no trained
    MLM head: kept in checkpoints, outside every budget."""
    warmup: Phase | None = None
    """The head warm-up while it has steps to train: the phase the loop trains first (`warmup_phase`)."""
    counted: ClassVar[bool] = True
    """The run's steps are its own: counted toward its budget, logged in metrics.jsonl, saved every `save_every`."""

    @property
    def cfg(self) -> TrainerConfig:
        return self.recipe.trainer

    @property
    def sharded(self) -> bool:
        """Whether FSDP shards the module's weights, gradients and optimizer moments over the processes."""
        return self.world > 1 and self.cfg.distributed == "fsdp"


def build_run(
    recipe: Recipe, run_dir: Path, fresh: bool = True, device_name: str | None = None, warm_up: bool | None = None
) -> tuple[Run, PreparedData]:
    """Data, tokenizer, model, objectives, wrappers and optimizer of one process; nothing trained yet. `warm_up`
    (default: on a `fresh` start, not a resume): build the head warm-up a start without a trained MLM head needs
    (head_warmup.py) as `run.warmup`, a Phase."""
    cfg = recipe.trainer
    rank, world, device = init_distributed(device_name, cfg.process_timeout_s)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if recipe.data.prepared is None:
        raise DataError("no prepared data: set data.prepared in the recipe or pass --data")
    check_warm_start(recipe)
    if cfg.distributed == "fsdp":
        check_fsdp([(o.name, OBJECTIVES[o.name]) for o in recipe.objectives])
    prepared = PreparedData(recipe.data.prepared)
    tokenizer = prepared.tokenizer()
    data_languages = [
        lang for lang in prepared.languages if recipe.data.languages is None or lang in recipe.data.languages
    ]
    torch.manual_seed(cfg.seed)
    model, languages = build_model(recipe, tokenizer, data_languages)
    names = [o.name for o in recipe.objectives]
    if len(set(names)) != len(names):
        raise DataError(f"recipe {recipe.name}: each objective may appear once, got {names}")
    objectives = {
        o.name: build_objective(o.name, o.config, tokenizer.special, model.config, languages) for o in recipe.objectives
    }
    setup_objectives(objectives, model)
    model.encoder.checkpoint_layers = cfg.activation_checkpointing
    warm, note = plan_head_warmup(recipe.init_from, cfg, model, objectives)
    warm_up = (fresh if warm_up is None else warm_up) and warm is not None
    weights = {o.name: o.weight for o in recipe.objectives}
    # The warm-up's objective joins the module here, for good: it owns no parameters, so checkpoints are unchanged.
    phases = {PHASE: warm} if warm_up else {}
    module = PretrainingModule(model, objectives | phases, weights | dict.fromkeys(phases, 1.0)).to(device)
    if rank == 0:
        readers = [name for name, o in objectives.items() if o.stream != "parallel"]
        announce_parallel_as_mono(prepared, data_languages, readers + (["the head warm-up"] if warm_up else []))
        if note and fresh:
            print(note)
    freeze_held_for_good(module, cfg)  # before DDP/FSDP and the optimizer see the parameters
    packed = packs_rows(recipe, device.type)
    trained = wrap_for_processes(module, cfg, recipe.objectives, world, device, packed)
    optimizer, scheduler = build_optimizer(module, cfg)
    streams = {
        o.name: (objectives[o.name].stream, recipe.data.for_objective(o), i) for i, o in enumerate(recipe.objectives)
    }
    where = (prepared, data_languages, languages, rank)
    slots = build_slots(streams, RUN_SALT, cfg, packed, *where)
    run = Run(recipe, run_dir, rank, world, device, tokenizer, languages, module, trained, optimizer, scheduler, slots)
    run.bookkeeping = bookkeeping_group(world)
    run.loss_path = loss_path(device, compiles(cfg.compile, device))
    run.slot_states = [s.state_dict() for s in slots]
    run.window = Window(device)
    if warm_up:
        warmup_slots = build_slots({PHASE: ("mono", recipe.data, STREAM_SALT)}, STREAM_SALT, cfg, False, *where)
        run.warmup = warmup_phase(run, warm, warmup_slots)
    return run, prepared


@dataclass
class Phase(Progress):
    """A stretch of steps the loop is given before the run's own, as plain data: which objectives run
    (`recipe.objectives`, objectives of the run's module), which parameters train (`trains`), its settings (steps,
    lr and schedule: `cfg`), whether its steps count toward the run's budget (`counted`); its optimizer, schedule
    and data slots over the run's module; and what it has counted so far (`Progress`)."""

    recipe: Recipe
    """The run's recipe with the phase's objectives and trainer settings (`cfg`)."""
    trains: list[nn.Parameter]
    """The parameters that take a gradient in its steps; the loop holds every other."""
    counted: bool
    module: PretrainingModule
    trained: nn.Module
    """What runs forward: the module itself (under FSDP the sharded root, which must run every forward)."""
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    slots: list[Slot]
    device: torch.device
    rank: int
    world: int
    sharded: bool

    @property
    def cfg(self) -> TrainerConfig:
        return self.recipe.trainer


def warmup_phase(run: Run, warm: HeadMLM, slots: list[Slot]) -> Phase:
    """The head warm-up: `warm` (the module's objective that trains the heads alone, there since the build) on its
    own slots, an optimizer and schedule over the heads' own parameters (`warmup_trainer`'s settings), steps counted
    toward no budget. With DDP its step averages its gradients itself (the module runs unwrapped)."""
    cfg = warmup_trainer(run.cfg)
    trains = head_parameters(warm.heads)
    with training_only(run.module, trains):
        optimizer, scheduler = build_optimizer(run.module, cfg)
    recipe = dataclasses.replace(run.recipe, trainer=cfg, objectives=[ObjectiveSpec(PHASE)])
    return Phase(
        recipe, trains, False, run.module, run.module, optimizer, scheduler, slots, run.device, run.rank, run.world,
        run.sharded, slot_states=[s.state_dict() for s in slots], window=Window(run.device),
    )  # fmt: skip


def end_warmup(run: Run) -> HeadWarmup:
    """The warm-up phase has trained its steps: its summary stays with the run (its objective, owning no
    parameters, stays in the module untrained)."""
    phase = run.warmup
    heads = list(run.module.objectives[PHASE].heads)
    c = phase.counters
    run.head_warmup = HeadWarmup(heads, phase.cfg.max_steps, c["tokens"], c["flops"], c["seconds"])
    run.warmup = None
    return run.head_warmup


def announce_parallel_as_mono(prepared: PreparedData, languages: list[str], readers: list[str]) -> None:
    """One line when `readers` of monolingual text get the parallel pairs' sides instead (see `shard_stream`):
    a parallel-only corpus."""
    if readers and not prepared.mono_shards(languages) and prepared.parallel_shards(languages):
        print(
            f"note: {prepared.folder} has no monolingual text for {languages}: {', '.join(readers)} read both sides "
            "of its parallel pairs as monolingual text (prepare with --mono to give them their own)"
        )


def build_slots(
    streams: dict[str, tuple[str, DataConfig, int]],
    rng_salt: int,
    trainer: TrainerConfig,
    packed: bool,
    prepared: PreparedData,
    data_languages: list[str],
    languages: list[str],
    rank: int,
) -> list[Slot]:
    """This process's slots rank·A + a (a < A): per objective name a stream (kind, data settings, salt), seeded by
    (trainer.seed, slot, salt), and a masking generator seeded by (trainer.seed, slot, `rng_salt`) each."""
    A = trainer.grad_accumulation
    lang_index = {lang: languages.index(lang) if lang in languages else 0 for lang in data_languages}
    return [
        Slot(
            {
                name: build_stream(
                    kind, prepared, data_languages, lang_index, data, trainer.seed, rank * A + a, salt, packed
                )
                for name, (kind, data, salt) in streams.items()
            },
            np.random.default_rng([trainer.seed, rank * A + a, rng_salt]),
        )
        for a in range(A)
    ]


def load_run_recipe(
    run_dir: str | Path, overrides: list[str] | None = None, preset: str | None = None, named: str | None = None
) -> Recipe:
    """The recipe a run was started with (for --resume), with optional overrides (e.g. a longer max_steps).
    The saved recipe already holds a preset's values; naming the preset again sets them again (same command).
    `named`: a recipe named beside --resume, refused unless it is the run's."""
    path = Path(run_dir) / RECIPE_FILE
    if not path.is_file():
        # Nothing to resume (an empty or new folder, or a run killed before it wrote its recipe): starting a new
        # run instead would hide a mistyped --run-dir.
        raise DataError(f"{path}: not found, so {run_dir} holds no run to resume; drop --resume to start one there")
    saved = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if "pack" not in (saved.get("data") or {}):
        # A recipe saved without `data.pack` trained unpacked rows: the run goes on unpacked unless told otherwise.
        overrides = ["data.pack=false", *(overrides or [])]
    recipe = load_recipe(path, overrides, preset)
    check_recipe_name(Path(run_dir), recipe.name, None if named is None else load_recipe(named).name)
    return recipe
