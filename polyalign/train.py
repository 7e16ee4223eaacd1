"""The one pre-training loop. It knows objectives only through their interface (objectives/base.py).

Data are organised in *slots*: with W processes and A accumulation steps, each optimizer step consumes W·A
micro-batches, and micro-batch slot s = rank·A + a always comes from the same seeded stream. So 2 processes
x 1 accumulation step and 1 process x 2 accumulation steps see identical data, and resuming restores
every slot's stream and masking generator exactly.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import yaml
from torch import nn

from polyalign.checkpoint import (
    load_checkpoint_state,
    load_model,
    load_model_weights,
    load_weights,
    optimizer_state_from_files,
    resume_checkpoint,
    save_checkpoint,
)
from polyalign.config import Recipe, TrainerConfig, load_recipe
from polyalign.data.loader import SlotBatches, StepBatches, StepLoader
from polyalign.data.prepare import PreparedData
from polyalign.data.streams import build_stream
from polyalign.fsdp import check_fsdp, gather_state, load_state, shard
from polyalign.io import DataError, atomic_write_text
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.objectives import OBJECTIVES, build_objective
from polyalign.tokenizer import Tokenizer

RECIPE_FILE = "recipe.yaml"
METRICS_FILE = "metrics.jsonl"


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


# ---------------------------------------------------------------------------------------------------------
# Building blocks


def init_distributed() -> tuple[int, int, torch.device]:
    """Join the process group if launched by torchrun; returns (rank, world size, device)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return rank, world, device


ARCHITECTURE = (
    "vocab_size",
    "hidden_size",
    "num_layers",
    "num_heads",
    "ffn_size",
    "max_positions",
    "absolute_positions",
    "position_offset",
    "embedding_size",
    "type_vocab_size",
    "norm",
    "layer_norm_eps",
    "pad_token_id",
)
"""EncoderConfig fields a checkpoint fixes when a recipe continues from it (`init_from`)."""


def build_model(recipe: Recipe, tokenizer: Tokenizer, languages: list[str]) -> tuple[MaskedLanguageModel, list[str]]:
    """A fresh model from the recipe, or one continued from `init_from` (recipe.model entries override all but
    the checkpoint's ARCHITECTURE)."""
    overrides = dict(recipe.model)
    if overrides.get("num_languages") == "auto":
        overrides["num_languages"] = len(languages)
    sp = tokenizer.special
    if recipe.init_from:
        loaded = load_model(recipe.init_from)
        if loaded.tokenizer.special.vocab_size != sp.vocab_size:
            raise DataError(
                f"{recipe.init_from}: its vocabulary ({loaded.tokenizer.special.vocab_size}) differs from the prepared "
                f"data's ({sp.vocab_size}); prepare the data with --tokenizer-from {recipe.init_from}"
            )
        base = loaded.model.config.to_dict()
        # A checkpoint with language embeddings numbers them by its own codes: `auto` keeps its row count.
        with_rows = bool(loaded.model.config.num_languages)
        if recipe.model.get("num_languages") == "auto" and with_rows:
            overrides["num_languages"] = loaded.model.config.num_languages
        # The checkpoint fixes the architecture (a recipe sized for training from scratch may say otherwise);
        # the recipe still sets the rest: dropout, language embeddings, position bias, cross-attention.
        ignored = {k: v for k, v in overrides.items() if k in ARCHITECTURE and v != base[k]}
        if ignored:
            print(f"note: {recipe.init_from} fixes the architecture; recipe values not applied: {ignored}")
        config = EncoderConfig.from_dict({**base, **{k: v for k, v in overrides.items() if k not in ignored}})
        model = MaskedLanguageModel(config)
        missing, unexpected = _copy_weights(loaded.model, model)
        if unexpected:
            raise DataError(f"{recipe.init_from}: weights the new config has no place for: {unexpected[:5]}")
        if missing:
            print(f"note: newly initialised parameters not in {recipe.init_from}: {_summarise(missing)}")
        if "encoder.embeddings.language.weight" in missing:
            # Language embeddings added to a model trained without them start at zero, so the continued model
            # computes exactly what the checkpoint did (ERNIE-M §3.2 starts from XLM-R, which has none).
            nn.init.zeros_(model.encoder.embeddings.language.weight)
        # Language embeddings are looked up by code, so keep the checkpoint's order when it has them; a checkpoint
        # without them (num_languages 0) may still name every language it saw, which must not number new rows
        # sized for this run's data (`auto` with data.languages a subset: index out of range).
        return model, (loaded.languages if with_rows and loaded.languages else languages)
    config = EncoderConfig.from_dict({**overrides, "vocab_size": sp.vocab_size, "pad_token_id": sp.pad})
    return MaskedLanguageModel(config), languages


def check_warm_start(recipe: Recipe) -> None:
    """An objective whose Config has `allow_cold_start` (DWA) labels its own targets with the model being
    trained, so it needs `init_from` (XLM-Align §3.3 cold start) unless the recipe sets the flag."""
    if recipe.init_from is not None:
        return
    if recipe.trainer.train_only:
        raise DataError(
            f"trainer.train_only={recipe.trainer.train_only} trains only those parameters of a pretrained start at "
            "first (VECO §4), but there is none: pass --init-from MODEL, or --set 'trainer.train_only=[]'"
        )
    for i, spec in enumerate(recipe.objectives):
        config = OBJECTIVES[spec.name].Config(**spec.config) if spec.name in OBJECTIVES else None
        if getattr(config, "allow_cold_start", True) is False:
            raise DataError(
                f"objectives.{i} ({spec.name}) needs a pretrained start (XLM-Align §3.3: from scratch its self-labels "
                f"are poor): pass --init-from MODEL, or set objectives.{i}.config.allow_cold_start=true"
            )


def _copy_weights(source: nn.Module, target: nn.Module) -> tuple[list[str], list[str]]:
    result = target.load_state_dict(source.state_dict(), strict=False)
    return list(result.missing_keys), list(result.unexpected_keys)


def _summarise(names: list[str]) -> str:
    groups = sorted({".".join(n.split(".")[:4]) if ".layers." in n else n for n in names})
    return ", ".join(groups[:8]) + (" ..." if len(groups) > 8 else "")


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
    """1) linear warmup to the peak, 2) linear decay to zero at max_steps. Held parameters: 0 while held, then
    3) the same schedule times a fresh linear warmup over warmup_steps from their release (train_only_until),
    so that parameters joining a run at full learning rate are warmed up like new ones."""
    if held and holding(step, config):
        return 0.0
    if step < config.warmup_steps:
        factor = (step + 1) / max(1, config.warmup_steps)
    else:
        factor = max(0.0, (config.max_steps - step) / max(1, config.max_steps - config.warmup_steps))
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


def rng_tensors() -> dict[str, torch.Tensor]:
    out = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        out["rng.cuda"] = torch.cuda.get_rng_state()
    return out


def restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    if torch.cuda.is_available() and "rng.cuda" in tensors:
        torch.cuda.set_rng_state(tensors["rng.cuda"])


def to_device(batch: dict, device: torch.device) -> dict:
    """Tensors to the device (asynchronous from the loader's pinned memory); flags such as `padding_free` as
    they are."""
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


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


def _logged_step(line: str) -> float:
    """The step of a metrics line; infinity for a line that a kill cut short (so it is dropped)."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return math.inf


class MetricsLog:
    """JSONL and TensorBoard, written by rank 0 only."""

    def __init__(self, run_dir: Path, resume_step: int | None):
        self.path = run_dir / METRICS_FILE
        if resume_step is not None and self.path.exists():
            # Drop lines past the checkpoint: the resumed run writes them again.
            # A line cut short by a kill is dropped too.
            kept = [ln for ln in self.path.read_text().splitlines() if _logged_step(ln) <= resume_step]
            atomic_write_text(self.path, "".join(ln + "\n" for ln in kept))
        self.file = open(self.path, "a", encoding="utf-8")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tensorboard"))
        except ImportError:  # TensorBoard is optional at run time
            self.tb = None

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, int | float):
                    self.tb.add_scalar(k, v, record["step"])

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()


@dataclass
class Window:
    """Sums since the last log line. Losses and metrics stay on the device, so that no step waits for it; they
    are read (and reduced over processes) every `log_every` steps."""

    device: torch.device
    steps: int = 0
    tokens: int = 0
    flops: float = 0.0
    loss: torch.Tensor | None = None
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    """Steps each metric was logged in (an objective with start_step or every is not active in all)."""
    started: float = field(default_factory=time.perf_counter)

    def add_micro_batch(self, loss: torch.Tensor, metrics: dict[str, torch.Tensor], flops: float, share: float):
        self.loss = loss * share if self.loss is None else self.loss + loss * share
        for k, v in metrics.items():
            self.metrics[k] = v * share if k not in self.metrics else self.metrics[k] + v * share
        self.flops += flops

    def end_step(self, tokens: int, names: list[str]) -> None:
        self.steps += 1
        self.tokens += tokens
        for k in names:
            self.counts[k] = self.counts.get(k, 0) + 1


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

    @property
    def cfg(self) -> TrainerConfig:
        return self.recipe.trainer

    @property
    def sharded(self) -> bool:
        """Whether FSDP shards the module's weights, gradients and optimizer moments over the processes."""
        return self.world > 1 and self.cfg.distributed == "fsdp"


def unused_parameters_possible(recipe: Recipe) -> bool:
    """Whether some steps may leave some parameters without a gradient: with staged (start_step) or
    alternating (every) objectives, or with one that never reads some (RTD: the discriminator's MLM head).
    DDP looks for them (an extra pass over the graph each step) only then."""
    return any(o.start_step > 0 or o.every > 1 or o.name in LEAVES_PARAMETERS_UNUSED for o in recipe.objectives)


LEAVES_PARAMETERS_UNUSED = ("mrtd", "trtd")
"""Objectives that leave the model's MLM head without a gradient (XLM-E trains a detection head instead)."""


def active_objectives(specs: list, step: int) -> list[str]:
    return [o.name for o in specs if o.active(step)]


# ---------------------------------------------------------------------------------------------------------
# Collectives. NCCL takes tensors on the GPU only: sums and votes are built on the training device; what is
# CPU-side bookkeeping (data-stream states, RNG states) goes through a separate gloo group.


def bookkeeping_group(world: int):
    """A gloo group for CPU-side collectives when the default backend cannot take CPU data (NCCL)."""
    if world > 1 and dist.get_backend() != "gloo":
        return dist.new_group(backend="gloo")
    return None


def reduce_window(window: Window, world: int, elapsed: float = 0.0) -> torch.Tensor:
    """[tokens, flops, seconds, loss sum, metric sums in sorted name order], summed over processes, on the
    device. The seconds are summed too, so every process adds the same (mean) time to its counters."""
    host = torch.tensor([window.tokens, window.flops, elapsed], dtype=torch.float64)
    host = host.to(window.device, non_blocking=True)
    sums = [window.loss, *(window.metrics[k] for k in sorted(window.metrics))]
    packed = torch.cat([host, torch.stack([v.to(torch.float64) for v in sums])])
    if world > 1:
        dist.all_reduce(packed)
    return packed


def agree_on_stop(want: int, device: torch.device, world: int) -> torch.Tensor:
    """The earliest step any process wants to stop at: all must stop together, or one waits forever for the
    others in its next collective."""
    vote = torch.tensor([want], dtype=torch.int64).to(device)
    if world > 1:
        dist.all_reduce(vote, op=dist.ReduceOp.MIN)
    return vote


# ---------------------------------------------------------------------------------------------------------
# Steps of a run: build, restore, one step, log, checkpoint, stop.


def build_run(recipe: Recipe, run_dir: Path) -> tuple[Run, PreparedData]:
    """Data, tokenizer, model, objectives, wrappers and optimizer of one process; nothing trained yet."""
    rank, world, device = init_distributed()
    cfg = recipe.trainer
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if recipe.data.prepared is None:
        raise DataError("no prepared data: set data.prepared in the recipe or pass --data")
    check_warm_start(recipe)
    if cfg.distributed == "fsdp":
        check_fsdp([o.name for o in recipe.objectives])
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
    freeze_held_for_good(module, cfg)  # before DDP/FSDP and the optimizer see the parameters
    trained: nn.Module = module
    if world > 1 and cfg.distributed == "fsdp":
        shard(module, model.encoder.layers, device, cfg.precision)  # before the optimizer takes the parameters
    elif world > 1:
        trained = nn.parallel.DistributedDataParallel(module, find_unused_parameters=unused_parameters_possible(recipe))
    if cfg.compile:
        trained = torch.compile(trained)

    groups = parameter_groups(module, cfg)
    # fused: one vectorised kernel per tensor instead of ~10 elementwise passes (~8x faster on CPU)
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, [lambda s, h=g["held"]: learning_rate_factor(s, cfg, h) for g in groups]
    )
    A = cfg.grad_accumulation
    lang_index = {lang: languages.index(lang) if lang in languages else 0 for lang in data_languages}
    slots = [
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
                )
                for i, o in enumerate(recipe.objectives)
            },
            np.random.default_rng([cfg.seed, rank * A + a, 7919]),
        )
        for a in range(A)
    ]
    run = Run(recipe, run_dir, rank, world, device, tokenizer, languages, module, trained, optimizer, scheduler, slots)
    run.bookkeeping = bookkeeping_group(world)
    run.slot_states = [s.state_dict() for s in slots]
    run.window = Window(device)
    return run, prepared


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
    run.step, run.counters = state["step"], state["counters"]
    run.scheduler.last_epoch = run.step
    run.scheduler._last_lr = [g["lr"] for g in run.optimizer.param_groups]
    for a, slot in enumerate(run.slots):
        slot.load_state_dict(state["slots"][run.rank * A + a])
    run.slot_states = [s.state_dict() for s in run.slots]
    # Dropout draws from a process's generator: a process the checkpoint had no counterpart for takes rank 0's.
    source = run.rank if f"rank{run.rank}.rng.torch" in tensors else 0
    restore_rng({k[len(f"rank{source}.") :]: v for k, v in tensors.items() if k.startswith(f"rank{source}.")})


def start_loader(run: Run) -> StepLoader:
    makers = {name: objective.make_batch for name, objective in run.module.objectives.items()}
    dataset = SlotBatches(run.slots, makers, partial(active_objectives, run.recipe.objectives), run.step)
    return StepLoader(dataset, run.cfg.loader_workers, pin=run.device.type == "cuda")


def train_step(run: Run, item: StepBatches) -> None:
    """One optimizer step on the step's micro-batches (one per slot; gradients all-reduced on the last).
    Nothing here waits for the device: losses and metrics are added up where they are."""
    assert item.step == run.step, (item.step, run.step)
    A = len(item.slots)
    autocast = torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=run.cfg.precision == "bf16")
    ddp = run.trained._orig_mod if hasattr(run.trained, "_orig_mod") else run.trained
    names: set[str] = set()
    for a, batches in enumerate(item.slots):
        batches = {n: to_device(b, run.device) for n, b in batches.items()}
        if run.sharded:
            run.module.set_requires_gradient_sync(a == A - 1)
        sync = contextlib.nullcontext() if run.world == 1 or run.sharded or a == A - 1 else ddp.no_sync()
        with sync:
            with autocast:
                loss, metrics, flops = run.trained(batches)
            (loss / A).backward()
        run.window.add_micro_batch(loss.detach().float(), metrics, flops, 1 / A)
        names.update(metrics)
    drop_held_gradients(run.optimizer, run.step, run.cfg)
    clip = run.cfg.clip_norm
    run.grad_norm = torch.nn.utils.clip_grad_norm_(run.module.parameters(), clip) if clip else None
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    run.step += 1
    run.slot_states = item.slot_states
    run.window.end_step(item.tokens, sorted(names))


def fold_counters(run: Run) -> list[float]:
    """Reduce the window over processes (a host sync) and add its tokens, FLOPs and (mean) seconds to the
    counters, which are then the same on every process; returns the reduced window (see `reduce_window`).
    Loss and metric sums stay in the window for the next log line."""
    window = run.window
    values = reduce_window(window, run.world, time.perf_counter() - window.started).tolist()
    values[2] /= run.world
    run.counters["tokens"] += int(values[0])
    run.counters["flops"] += values[1]
    run.counters["seconds"] += values[2]
    window.tokens, window.flops, window.started = 0, 0.0, time.perf_counter()
    return values


def log_window(run: Run, log: MetricsLog | None) -> dict | None:
    """Reduce the window over processes (the one host sync, every log_every steps), add it to the counters,
    write a line (rank 0); every process raises together on a non-finite loss."""
    window = run.window
    if not window.steps:
        return None
    values = fold_counters(run)
    run.flops_per_step = values[1] / window.steps
    names = sorted(window.metrics)
    record = {
        "step": run.step,
        "loss": values[3] / run.world / window.steps,
        **{k: v / run.world / window.counts[k] for k, v in zip(names, values[4:], strict=True)},
        "lr": run.scheduler.get_last_lr()[0],
        "tokens_per_s": values[0] / max(values[2], 1e-9),
        **run.counters,
    }
    if run.grad_norm is not None:  # under FSDP a replicated DTensor
        norm = run.grad_norm.full_tensor() if hasattr(run.grad_norm, "full_tensor") else run.grad_norm
        record["grad_norm"] = float(norm)
    run.window = Window(run.device)
    if not math.isfinite(record["loss"]):  # the same reduced value on every process: all stop here
        raise FloatingPointError(f"step {run.step}: loss is {record['loss']}; lower trainer.lr or check the data")
    if log is not None:
        log.write(record)
    return record


def save_run(run: Run) -> None:
    """A checkpoint of the step just trained; rank 0 writes what every process's slots and RNG hold."""
    slot_states = run.slot_states
    rng = {f"rank{run.rank}.{k}": v for k, v in rng_tensors().items()}
    if run.world > 1:
        gathered: list = [None] * run.world
        dist.all_gather_object(gathered, (slot_states, rng), group=run.bookkeeping)
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
        }
        save_checkpoint(
            run.run_dir,
            run.step,
            run.module.model,
            run.module.objectives,
            run.tokenizer,
            run.languages,
            optimizer_state or run.optimizer.state_dict(),
            state,
            rng,
            run.cfg.keep_checkpoints,
            weights,
        )
    if run.world > 1:
        dist.barrier(group=run.bookkeeping)


def flops_stop(step: int, flops: float, per_step: float, budget: float, horizon: int) -> int | None:
    """The step at which a run that has spent `flops` by `step` reaches `budget`: now if it has, else the step
    that `per_step` FLOPs per step predict, if that comes within `horizon` steps (before the next check);
    None when it does not."""
    if flops >= budget:
        return step
    if per_step <= 0:
        return None
    ahead = math.ceil((budget - flops) / per_step)
    return step + ahead if ahead <= horizon else None


def stop_step(run: Run) -> int:
    """The step all processes stop at: max_steps, stop_at, now once max_minutes are spent, or where max_flops are
    reached. Minutes and FLOPs are checked when the window is read, every log_every steps; a FLOPs budget that
    the last window's mean FLOPs per step say will be reached before the next check stops the run at that
    predicted step (exact when the steps' FLOPs are equal; with log_every 1, always the first step at or past
    the budget)."""
    cfg = run.cfg
    want = min(cfg.max_steps, cfg.stop_at) if cfg.stop_at else cfg.max_steps
    spent = run.counters["seconds"] + time.perf_counter() - run.window.started
    if cfg.max_minutes and spent >= cfg.max_minutes * 60:
        want = min(want, run.step)
    if cfg.max_flops:
        at = flops_stop(run.step, run.counters["flops"], run.flops_per_step, cfg.max_flops, cfg.log_every)
        want = min(want, at if at is not None else want)
    return int(agree_on_stop(want, run.device, run.world).item())


# ---------------------------------------------------------------------------------------------------------


def pretrain(recipe: Recipe, run_dir: str | Path, resume: bool = False, progress: bool = True) -> dict:
    """Train according to `recipe` into `run_dir`; returns a summary of the run."""
    run_dir = Path(run_dir)
    checkpoint = resume_checkpoint(run_dir) if resume else None
    if not resume and (run_dir / RECIPE_FILE).exists():
        raise DataError(
            f"{run_dir}: a run already exists here; pass --resume to continue it or choose another --run-dir"
        )
    run, _ = build_run(recipe, run_dir)
    if checkpoint is not None:
        restore_run(run, checkpoint)
    elif run.rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / RECIPE_FILE, yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    log = MetricsLog(run_dir, run.step if resume else None) if run.rank == 0 else None
    bar = None
    if progress and run.rank == 0:
        from polyalign.progress import tqdm

        bar = tqdm(
            total=run.cfg.max_steps,
            initial=run.step,
            desc=recipe.name,
            unit="step",
            dynamic_ncols=True,
            mininterval=2.0,
        )
    loader = start_loader(run)
    stop = stop_step(run)
    try:
        while run.step < stop:
            train_step(run, next(loader))
            if run.step % run.cfg.log_every == 0 or run.step == run.cfg.max_steps:
                record = log_window(run, log)
                stop = stop_step(run)  # max_minutes and max_flops are read here, with the window
                if bar is not None and record is not None:
                    bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
            if bar is not None:
                bar.update(1)
            if run.step % run.cfg.save_every == 0 or run.step == stop:
                if run.window.steps:
                    fold_counters(run)  # counters must be totals over processes when saved
                save_run(run)
                run.window.started = time.perf_counter()  # saving is not training time
    finally:
        loader.close()
        if bar is not None:
            bar.close()
        if log is not None:
            log.close()
    return {"run": str(run_dir), "step": run.step, **run.counters}


def run_started_before_saving_its_recipe(run_dir: str | Path) -> bool:
    """A run folder killed before it wrote its recipe (it cannot have a checkpoint either): `--resume` with the
    recipe named again starts it from step 0, so that the same command works after a kill at any moment."""
    run_dir = Path(run_dir)
    return not (run_dir / RECIPE_FILE).exists() and not (run_dir / "checkpoints").exists()


def load_run_recipe(run_dir: str | Path, overrides: list[str] | None = None, preset: str | None = None) -> Recipe:
    """The recipe a run was started with (for --resume), with optional overrides (e.g. a longer max_steps).
    The saved recipe already holds a preset's values; naming the preset again sets them again (same command)."""
    path = Path(run_dir) / RECIPE_FILE
    if not path.is_file():
        raise DataError(f"{path}: not found; is {run_dir} a polyalign run folder?")
    return load_recipe(path, overrides, preset)
