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
from dataclasses import dataclass
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
    resume_checkpoint,
    save_checkpoint,
)
from polyalign.config import Recipe, TrainerConfig, load_recipe
from polyalign.data.prepare import PreparedData
from polyalign.data.streams import build_stream
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
                metrics[f"{name}/{k}"] = v.detach().float() if torch.is_tensor(v) else torch.tensor(float(v))
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
        # Language embeddings are looked up by code, so keep the checkpoint's order when it has them.
        return model, (loaded.languages or languages)
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


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


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


# ---------------------------------------------------------------------------------------------------------


def pretrain(recipe: Recipe, run_dir: str | Path, resume: bool = False, progress: bool = True) -> dict:
    """Train according to `recipe` into `run_dir`; returns a summary of the run."""
    run_dir = Path(run_dir)
    rank, world, device = init_distributed()
    cfg = recipe.trainer
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    checkpoint = resume_checkpoint(run_dir) if resume else None
    if not resume and (run_dir / RECIPE_FILE).exists():
        raise DataError(
            f"{run_dir}: a run already exists here; pass --resume to continue it or choose another --run-dir"
        )
    if recipe.data.prepared is None:
        raise DataError("no prepared data: set data.prepared in the recipe or pass --data")
    check_warm_start(recipe)

    # 1) data, tokenizer, model, objectives
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
    module = PretrainingModule(model, objectives, {o.name: o.weight for o in recipe.objectives}).to(device)
    trained = nn.parallel.DistributedDataParallel(module, find_unused_parameters=True) if world > 1 else module

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

    # 2) resume
    step, counters = 0, {"tokens": 0, "flops": 0.0, "seconds": 0.0}
    if checkpoint is not None:
        state, tensors = load_checkpoint_state(checkpoint)
        load_model_weights(module.model, checkpoint / "model.safetensors", strict=True)
        load_model_weights(module.objectives, checkpoint / "objectives.safetensors", strict=True)
        from polyalign.checkpoint import optimizer_from_files

        optimizer_from_files(optimizer, tensors, state["optimizer"])
        step, counters = state["step"], state["counters"]
        scheduler.last_epoch = step
        scheduler._last_lr = [g["lr"] for g in optimizer.param_groups]
        if state["world"] != world or state["grad_accumulation"] != A:
            raise DataError(
                f"{checkpoint}: saved with {state['world']} processes x {state['grad_accumulation']} "
                f"accumulation; resume with the same layout"
            )
        for a, slot in enumerate(slots):
            slot.load_state_dict(state["slots"][rank * A + a])
        restore_rng({k[len(f"rank{rank}.") :]: v for k, v in tensors.items() if k.startswith(f"rank{rank}.")})
    elif rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / RECIPE_FILE, yaml.safe_dump(recipe.to_dict(), sort_keys=False))

    log = MetricsLog(run_dir, step if resume else None) if rank == 0 else None
    bar = None
    if progress and rank == 0:
        from polyalign.progress import tqdm

        bar = tqdm(
            total=cfg.max_steps, initial=step, desc=recipe.name, unit="step", dynamic_ncols=True, mininterval=2.0
        )
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16")

    def checkpoint_now() -> None:
        slot_states = [s.state_dict() for s in slots]
        rng = {f"rank{rank}.{k}": v for k, v in rng_tensors().items()}
        if world > 1:
            gathered: list = [None] * world
            dist.all_gather_object(gathered, (slot_states, rng))
            slot_states = [s for g in gathered for s in g[0]]
            rng = {k: v for g in gathered for k, v in g[1].items()}
        if rank == 0:
            state = {
                "step": step,
                "counters": counters,
                "world": world,
                "grad_accumulation": A,
                "slots": slot_states,
                "recipe": recipe.name,
            }
            save_checkpoint(
                run_dir,
                step,
                module.model,
                module.objectives,
                tokenizer,
                languages,
                optimizer,
                state,
                rng,
                cfg.keep_checkpoints,
            )
        if world > 1:
            dist.barrier()

    # 3) the loop
    window = {"tokens": 0, "time": 0.0, "loss": 0.0, "metrics": {}, "counts": {}, "n": 0}
    saved_at = step
    while step < cfg.max_steps:
        if cfg.max_minutes and counters["seconds"] >= cfg.max_minutes * 60:
            break
        if cfg.stop_at and step >= cfg.stop_at:
            break
        t0 = time.perf_counter()
        active = [o.name for o in recipe.objectives if o.active(step)]
        step_tokens, step_flops, step_loss = 0, 0.0, 0.0
        step_metrics: dict[str, float] = {}
        for a, slot in enumerate(slots):
            batches = {
                n: to_device(objectives[n].make_batch(slot.streams[n].next_batch(), slot.rng), device) for n in active
            }
            step_tokens += sum(real_tokens(b) for b in batches.values())
            sync = contextlib.nullcontext() if world == 1 or a == A - 1 else trained.no_sync()
            with sync:
                with autocast:
                    loss, metrics, flops = trained(batches)
                (loss / A).backward()
            step_loss += float(loss.detach()) / A
            step_flops += flops
            for k, v in metrics.items():
                step_metrics[k] = step_metrics.get(k, 0.0) + float(v) / A
        drop_held_gradients(optimizer, step, cfg)
        grad_norm = torch.nn.utils.clip_grad_norm_(module.parameters(), cfg.clip_norm) if cfg.clip_norm else None
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1

        elapsed = time.perf_counter() - t0
        if world > 1:
            # Counters and logged values are totals/means over processes, and so is the step time: every rank then
            # sees the same clock, loss and metrics, so that stop decisions (max_minutes, a non-finite loss) are
            # taken by all ranks together. The tensor lives on the training device: NCCL reduces CUDA tensors only.
            values = [step_tokens, step_flops, step_loss, elapsed, *step_metrics.values()]
            packed = torch.tensor(values, dtype=torch.float64, device=device)
            dist.all_reduce(packed)
            packed = packed.tolist()
            step_tokens, step_flops = int(packed[0]), packed[1]
            step_loss, elapsed = packed[2] / world, packed[3] / world
            step_metrics = {k: v / world for k, v in zip(step_metrics, packed[4:], strict=True)}
        if not math.isfinite(step_loss):  # on every rank at once (the value is the same everywhere)
            raise FloatingPointError(f"step {step}: loss is {step_loss}; lower trainer.lr or check the data")
        counters["tokens"] += step_tokens
        counters["flops"] += step_flops
        counters["seconds"] += elapsed
        window["tokens"] += step_tokens
        window["time"] += elapsed
        window["loss"] += step_loss
        window["n"] += 1
        for k, v in step_metrics.items():
            window["metrics"][k] = window["metrics"].get(k, 0.0) + v
            window["counts"][k] = window["counts"].get(k, 0) + 1  # steps it was active (start_step, every)

        if rank == 0 and (step % cfg.log_every == 0 or step == cfg.max_steps):
            n = window["n"]
            record = {
                "step": step,
                "loss": window["loss"] / n,
                **{k: v / window["counts"][k] for k, v in window["metrics"].items()},
                "lr": scheduler.get_last_lr()[0],
                "tokens_per_s": window["tokens"] / max(window["time"], 1e-9),
                "tokens": counters["tokens"],
                "flops": counters["flops"],
                "seconds": counters["seconds"],
            }
            if grad_norm is not None:
                record["grad_norm"] = float(grad_norm)
            log.write(record)
            if bar is not None:
                bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
            window = {"tokens": 0, "time": 0.0, "loss": 0.0, "metrics": {}, "counts": {}, "n": 0}
        if bar is not None:
            bar.update(1)
        if step % cfg.save_every == 0:
            checkpoint_now()
            saved_at = step
    if saved_at != step:
        checkpoint_now()
    if bar is not None:
        bar.close()
    if log is not None:
        log.close()
    return {"run": str(run_dir), "step": step, **counters}


def real_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding tokens the encoder reads for one batch: every 2-D attention mask counts (an objective that
    encodes a second sequence, e.g. contrast's `target_` side or MoCo's key side, carries one for it)."""
    return sum(int(v.sum()) for k, v in batch.items() if k.endswith("attention_mask") and v.dim() == 2)


def run_started_before_saving_its_recipe(run_dir: str | Path) -> bool:
    """A run folder killed before it wrote its recipe (it cannot have a checkpoint either): `--resume` with the
    recipe named again starts it from step 0, so that the same command works after a kill at any moment."""
    run_dir = Path(run_dir)
    return not (run_dir / RECIPE_FILE).exists() and not (run_dir / "checkpoints").exists()


def load_run_recipe(run_dir: str | Path, overrides: list[str] | None = None) -> Recipe:
    """The recipe a run was started with (for --resume), with optional overrides (e.g. a longer max_steps)."""
    path = Path(run_dir) / RECIPE_FILE
    if not path.is_file():
        raise DataError(f"{path}: not found; is {run_dir} a polyalign run folder?")
    return load_recipe(path, overrides)
