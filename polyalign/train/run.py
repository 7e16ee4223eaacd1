"""One process's part of a training run: what it holds (`Run`), how it is built from a recipe, restored from
a checkpoint and saved to one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import yaml
from torch import nn

from polyalign.checkpoint import (
    load_checkpoint_state,
    load_model_weights,
    load_weights,
    optimizer_state_from_files,
    save_checkpoint,
)
from polyalign.config import Recipe, TrainerConfig, load_recipe, packs_rows
from polyalign.data.prepared import PreparedData
from polyalign.data.streams import build_stream
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.objectives import OBJECTIVES, build_objective
from polyalign.tokenizer import Tokenizer
from polyalign.train.distributed import (
    barrier,
    bookkeeping_group,
    gather_objects,
    init_distributed,
    wrap_for_processes,
)
from polyalign.train.fsdp import check_fsdp, gather_state, load_state
from polyalign.train.head_warmup import HeadWarmup, plan_head_warmup, warm_heads
from polyalign.train.metrics import Window
from polyalign.train.optim import build_optimizer, freeze_held_for_good
from polyalign.train.resume import check_recipe_name, pad_moments_to_parameters
from polyalign.train.start import build_model, check_warm_start

RECIPE_FILE = "recipe.yaml"


class PretrainingModule(nn.Module):
    """The model plus every objective's own parameters; forward sums the weighted objective losses."""

    def __init__(self, model: MaskedLanguageModel, objectives: dict[str, nn.Module], weights: dict[str, float]):
        super().__init__()
        self.model = model
        self.objectives = nn.ModuleDict(objectives)
        self.weights = weights

    def forward(self, batches: dict[str, dict[str, torch.Tensor]]):
        total, metrics, flops = 0.0, {}, 0.0
        for name, batch in batches.items():
            out = self.objectives[name](self.model, batch)
            total = total + self.weights[name] * out.loss
            metrics[f"{name}/loss"] = out.loss.detach().float()
            for k, v in out.metrics.items():
                value = v.detach().float() if torch.is_tensor(v) else torch.tensor(float(v), device=out.loss.device)
                metrics[f"{name}/{k}"] = value
            flops += out.flops
        return total, metrics, flops


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


@dataclass
class Run:
    """One process's part of a training run: built by `build_run`, advanced by `train_step`."""

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
    step: int = 0
    counters: dict = field(default_factory=lambda: {"tokens": 0, "flops": 0.0, "seconds": 0.0})
    slot_states: list[dict] = field(default_factory=list)
    """Every slot's data state after the last trained step: what a checkpoint saves (the loader runs ahead)."""
    grad_norm: torch.Tensor | None = None
    window: Window | None = None
    flops_per_step: float = 0.0
    """Mean training FLOPs per step (all processes) in the last logged window: predicts where max_flops is met."""
    head_warmup: HeadWarmup | None = None
    compile_seconds: float = 0.0
    """Wall time of this call's first step when compiled (the compilation, mostly), until the next log line
    reports it as `compile_seconds`; the first window's tokens/s includes it, as it includes any warm-up."""
    """The head-only steps before step 0 (`trainer.head_warmup_steps`), when `init_from` had no trained MLM head;
    kept in checkpoints (without the log) and outside every budget."""

    @property
    def cfg(self) -> TrainerConfig:
        return self.recipe.trainer

    @property
    def sharded(self) -> bool:
        """Whether FSDP shards the module's weights, gradients and optimizer moments over the processes."""
        return self.world > 1 and self.cfg.distributed == "fsdp"


def rng_tensors() -> dict[str, torch.Tensor]:
    out = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        out["rng.cuda"] = torch.cuda.get_rng_state()
    return out


def restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    if torch.cuda.is_available() and "rng.cuda" in tensors:
        torch.cuda.set_rng_state(tensors["rng.cuda"])


def build_run(
    recipe: Recipe, run_dir: Path, fresh: bool = True, device_name: str | None = None
) -> tuple[Run, PreparedData]:
    """Data, tokenizer, model, objectives, wrappers and optimizer of one process; nothing trained yet but, on a
    `fresh` start (not a resume), the MLM heads a start without one needs (see head_warmup.py)."""
    rank, world, device = init_distributed(device_name)
    cfg = recipe.trainer
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
    for objective in objectives.values():
        objective.setup(model)
    model.encoder.checkpoint_layers = cfg.activation_checkpointing
    module = PretrainingModule(model, objectives, {o.name: o.weight for o in recipe.objectives}).to(device)
    heads, note = plan_head_warmup(recipe, model, objectives)
    if rank == 0:
        readers = [name for name, o in objectives.items() if o.stream != "parallel"]
        announce_parallel_as_mono(prepared, data_languages, readers + (["the head warm-up"] if heads and fresh else []))
        if note and fresh:
            print(note)
    warmed = None
    if heads and fresh:  # a resume restores warmed heads with the weights
        warmed = warm_heads(recipe, heads, prepared, data_languages, languages, rank, world, device)
    freeze_held_for_good(module, cfg)  # before DDP/FSDP and the optimizer see the parameters
    trained = wrap_for_processes(module, recipe, world, device)
    optimizer, scheduler = build_optimizer(module, cfg)
    slots = build_slots(recipe, objectives, prepared, data_languages, languages, rank, device)
    run = Run(recipe, run_dir, rank, world, device, tokenizer, languages, module, trained, optimizer, scheduler, slots)
    run.bookkeeping = bookkeeping_group(world)
    run.slot_states = [s.state_dict() for s in slots]
    run.window = Window(device)
    run.head_warmup = warmed
    return run, prepared


def announce_parallel_as_mono(prepared: PreparedData, languages: list[str], readers: list[str]) -> None:
    """One line when `readers` of monolingual text get the parallel pairs' sides instead (see `shard_stream`):
    a parallel-only corpus."""
    if readers and not prepared.mono_shards(languages) and prepared.parallel_shards(languages):
        print(
            f"note: {prepared.folder} has no monolingual text for {languages}: {', '.join(readers)} read both sides "
            "of its parallel pairs as monolingual text (prepare with --mono to give them their own)"
        )


def build_slots(
    recipe: Recipe,
    objectives: dict,
    prepared: PreparedData,
    data_languages: list[str],
    languages: list[str],
    rank: int,
    device: torch.device,
) -> list[Slot]:
    """This process's slots rank·A + a (a < A): a seeded stream per objective and a masking generator each."""
    cfg = recipe.trainer
    A = cfg.grad_accumulation
    packed = packs_rows(recipe, device.type)
    lang_index = {lang: languages.index(lang) if lang in languages else 0 for lang in data_languages}
    return [
        Slot(
            {
                o.name: build_stream(
                    objectives[o.name].stream,
                    prepared,
                    data_languages,
                    lang_index,
                    recipe.data.for_objective(o),
                    seed=cfg.seed,
                    slot=rank * A + a,
                    salt=i,
                    packed=packed,
                )
                for i, o in enumerate(recipe.objectives)
            },
            np.random.default_rng([cfg.seed, rank * A + a, 7919]),
        )
        for a in range(A)
    ]


def restore_run(run: Run, checkpoint: Path) -> None:
    """Weights, optimizer, schedule, counters, data position and RNG from a checkpoint. Slot s = rank·A + a
    holds the same data in any layout, so any processes x accumulation with the same product resumes it."""
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
    run.step, run.counters = state["step"], state["counters"]
    if state.get("head_warmup"):
        run.head_warmup = HeadWarmup(**state["head_warmup"])
    run.scheduler.last_epoch = run.step
    # The schedule's peak is the recipe's trainer.lr, not the one saved: a resume may lower it (`--set trainer.lr=`
    # after a loss turned NaN). Unchanged, this recomputes the saved rates exactly, as scheduler.step() does.
    run.scheduler.base_lrs = [run.cfg.lr] * len(run.optimizer.param_groups)
    for group, factor in zip(run.optimizer.param_groups, run.scheduler.lr_lambdas, strict=True):
        group["initial_lr"] = run.cfg.lr
        group["lr"] = run.cfg.lr * factor(run.step)
    run.scheduler._last_lr = [g["lr"] for g in run.optimizer.param_groups]
    for a, slot in enumerate(run.slots):
        slot.load_state_dict(state["slots"][run.rank * A + a])
    run.slot_states = [s.state_dict() for s in run.slots]
    # Dropout draws from a process's generator: a process the checkpoint had no counterpart for takes rank 0's.
    source = run.rank if f"rank{run.rank}.rng.torch" in tensors else 0
    restore_rng({k[len(f"rank{source}.") :]: v for k, v in tensors.items() if k.startswith(f"rank{source}.")})


def save_run(run: Run) -> None:
    """A checkpoint of the step just trained; rank 0 writes what every process's slots and RNG hold."""
    slot_states = run.slot_states
    rng = {f"rank{run.rank}.{k}": v for k, v in rng_tensors().items()}
    gathered = gather_objects((slot_states, rng), run.world, run.bookkeeping)
    slot_states = [s for g in gathered for s in g[0]]
    rng = {k: v for g in gathered for k, v in g[1].items()}
    # Under FSDP every process gathers its shards to rank 0, which writes full tensors as DDP's rank 0 does.
    weights, optimizer_state = gather_state(run.module, run.optimizer) if run.sharded else (None, None)
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
        optimizer_state = optimizer_state or run.optimizer.state_dict()
        if not run.cfg.checkpoint_optimizer:  # weights only: the groups (the schedule's rates) stay, the moments go
            optimizer_state = {"state": {}, "param_groups": optimizer_state["param_groups"]}
        save_checkpoint(
            run.run_dir,
            run.step,
            run.module.model,
            run.module.objectives,
            run.tokenizer,
            run.languages,
            optimizer_state,
            state,
            rng,
            run.cfg.keep_checkpoints,
            weights,
        )
    barrier(run.world, run.bookkeeping)


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
