"""The one fine-tuning loop, shared by every task.

AdamW with layer-wise learning-rate decay, a linear schedule with warmup, weight decay, gradient clipping and
bf16 autocast; model selection on the protocol's selection data; every seed from the same features. The
defaults below are ERNIE-M's (Table 11, XNLI column); each task overrides them with its column of the papers'
fine-tuning tables (ERNIE-M Tables 11-12, XLM-Align Table 12, XLM-E Table 7).
"""

from __future__ import annotations

import collections
import copy
import math
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields

import numpy as np
import torch

from polyalign.checkpoint import LoadedModel
from polyalign.config import apply_override
from polyalign.data.batching import length_batches
from polyalign.device import model_device, to_device
from polyalign.finetune.base import EncoderAdapter, Feature, Task, TaskData, TaskModel
from polyalign.io import DataError
from polyalign.progress import tqdm
from polyalign.schema import RecipeError, check_value
from polyalign.train.distributed import this_process
from polyalign.train.optim import linear_schedule


@dataclass
class FinetuneConfig:
    lr: float = 5e-5
    """Peak learning rate of the head and the top layer."""
    batch_size: int = 32
    """Training examples per step."""
    epochs: float = 5.0
    """Passes over the training features (fractions allowed)."""
    warmup_fraction: float = 0.1
    """Share of the steps spent warming up linearly; the rest decays linearly to zero."""
    weight_decay: float = 0.0
    """AdamW weight decay on matrices (not on biases and LayerNorm gains)."""
    layer_decay: float = 0.8
    """Layer-wise learning-rate decay: layer l of L (1 = lowest) trains at lr·decay^(L+1-l), the embeddings at
    lr·decay^(L+1), the head at lr (ERNIE-M Tables 11-12, "Layerwise LR decay"); 1 switches it off."""
    clip_norm: float = 1.0
    """Gradient-norm clipping; 0 switches it off."""
    max_length: int = 128
    """Tokens per input row, specials included (XTREME uses 128 for classification and tagging, 384 for QA)."""
    selections_per_epoch: int = 1
    """How often per epoch the model is scored on the selection data (and once more at the end)."""
    precision: str = "bf16"
    """`bf16` autocast (fp32 master weights) or `fp32`."""
    eval_batch_tokens: int = 16384
    """Padded tokens per inference batch (batches are length-sorted)."""
    dropout: float = -1.0
    """Encoder dropout while fine-tuning; -1 keeps the checkpoint's."""
    max_steps: int = 0
    """Stop after at most this many training steps (0: `epochs` decide); warmup and decay span the steps run."""

    def __post_init__(self) -> None:
        if self.precision not in ("bf16", "fp32"):
            raise DataError(f"precision={self.precision!r}: use bf16 or fp32")
        if self.batch_size < 1 or self.epochs <= 0 or self.lr <= 0:
            raise DataError(f"batch_size={self.batch_size}, epochs={self.epochs}, lr={self.lr}: all must be positive")
        if not 0 < self.layer_decay <= 1:
            raise DataError(f"layer_decay={self.layer_decay}: use a value in (0, 1]")
        if self.max_steps < 0:
            raise DataError(f"max_steps={self.max_steps}: use 0 (epochs decide) or a positive number of steps")
        if self.max_length < 8:
            raise DataError(f"max_length={self.max_length}: too short for an input with its special tokens")


def apply_overrides(config: FinetuneConfig, options, overrides: list[str]) -> tuple[FinetuneConfig, object]:
    """`--set` overrides in pretrain's grammar (config.apply_override: a dotted key, the value read as YAML) on the
    tree {finetune: the loop's settings, task: the task's options}, each checked against its dataclass's types."""
    sections = {"finetune": config, "task": options}
    tree = {name: asdict(section) for name, section in sections.items()}
    checked = dict(sections)
    for override in overrides:
        key = apply_override(tree, override)
        try:
            if key.split(".")[0] not in sections or "." not in key:
                raise RecipeError(key, f"unknown key; keys are finetune.NAME or task.NAME ({known_keys(sections)})")
            checked = {name: check_value(type(section), tree[name], name) for name, section in sections.items()}
        except DataError as err:  # RecipeError, and __post_init__'s range checks
            raise DataError(f"--set {override}: {err}") from None
    return checked["finetune"], checked["task"]


def known_keys(sections: dict) -> str:
    return ", ".join(f"{name}.{f.name}" for name, section in sections.items() for f in fields(section))


# ---------------------------------------------------------------------------------------------------------
# Optimizer


def layer_depth(name: str, num_layers: int) -> int:
    """0 for embeddings, l for encoder layer l (1-based), num_layers + 1 for everything above (heads)."""
    if "embeddings." in name:
        return 0
    m = re.search(r"layers\.(\d+)\.", name)
    return int(m[1]) + 1 if m else num_layers + 1


def parameter_groups(model: torch.nn.Module, num_layers: int, config: FinetuneConfig) -> list[dict]:
    """One AdamW group per (depth, decays) with the depth's learning rate (ERNIE-M's layer-wise LR decay)."""
    groups: dict[tuple[int, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        depth, decays = layer_depth(name, num_layers), p.ndim >= 2
        scale = config.layer_decay ** (num_layers + 1 - depth)
        group = groups.setdefault(
            (depth, decays),
            {"params": [], "lr": config.lr * scale, "weight_decay": config.weight_decay if decays else 0.0},
        )
        group["params"].append(p)
    return [groups[k] for k in sorted(groups)]


# ---------------------------------------------------------------------------------------------------------
# Inference and scoring


@torch.no_grad()
def predict(model: TaskModel, task: Task, features: list[Feature], config: FinetuneConfig, special) -> list:
    """Task outputs for every feature, computed in length-sorted batches of at most `eval_batch_tokens`."""
    was_training = model.training
    model.eval()
    out: list = [None] * len(features)
    device = model_device(model)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.precision == "bf16")
    for idx in length_batches([f.padded_length for f in features], config.eval_batch_tokens):
        batch = task.collate([features[i] for i in idx], special)
        with autocast:
            logits = model(to_device(batch, device))
        for i, o in zip(idx, task.outputs(logits.float().cpu(), batch), strict=True):
            out[i] = o
    model.train(was_training)
    return out


def score_sets(model, task, sets: dict, config, special) -> dict[str, dict]:
    """{language: metrics} for a dict of {language: (examples, features)}."""
    return {
        lang: task.score(examples, feats, predict(model, task, feats, config, special), lang)
        for lang, (examples, feats) in sets.items()
    }


# ---------------------------------------------------------------------------------------------------------
# Training


def feature_groups(features: list[Feature]) -> list[list[int]]:
    """Indices of the features grouped by `Feature.group`, in order of first appearance; a feature without a
    group is a group of its own."""
    groups: dict = {}
    for i, f in enumerate(features):
        groups.setdefault(i if f.group is None else f.group, []).append(i)
    return list(groups.values())


def training_batches(groups: list[list[int]], batch_size: int, rng: np.random.Generator) -> Iterator[list[int]]:
    """Endless training batches of whole groups, so that a group never straddles two batches (PPA §2.3: both
    code-switched versions of an example are in the same batch). The groups are reshuffled on every pass and
    the passes run on into each other; a batch closes early when the next group would overflow it. With groups
    of one this is a plain reshuffled stream of `batch_size` features."""
    largest = max(map(len, groups))
    if largest > batch_size:
        raise DataError(
            f"batch_size={batch_size} is smaller than a group of {largest} training features that must share a "
            f"batch (code-switched partners, with every QA window of both); raise batch_size"
        )
    queue: collections.deque[list[int]] = collections.deque()
    queued = 0
    while True:
        if queued < batch_size:
            queue.extend(groups[g] for g in rng.permutation(len(groups)))
            queued += sum(map(len, groups))
        batch: list[int] = []
        while queue and len(batch) + len(queue[0]) <= batch_size:
            batch += queue.popleft()
        queued -= len(batch)
        yield batch


@dataclass
class Prepared:
    """Features of a protocol's data, computed once and shared by every seed."""

    train: list[Feature]
    select: dict[str, tuple[list, list[Feature]]]
    test: dict[str, tuple[list, list[Feature]]]


def prepare_features(task: Task, data: TaskData, loaded: LoadedModel, config: FinetuneConfig) -> Prepared:
    def featurise(examples, train):
        return task.features(examples, loaded, config.max_length, train)

    train = featurise(data.train, True)
    if not train:
        raise DataError(f"{task.name}: no training features (is the training data empty?)")
    select = {lang: (ex, featurise(ex, False)) for lang, ex in data.select.items()}
    test = {lang: (ex, featurise(ex, False)) for lang, ex in data.test.items()}
    return Prepared(train, select, test)


def build_task_model(task: Task, loaded: LoadedModel, config: FinetuneConfig) -> TaskModel:
    encoder = copy.deepcopy(loaded.model.encoder)
    if config.dropout >= 0:
        for m in encoder.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = config.dropout
    wrapped = getattr(task, "wrap_encoder", EncoderAdapter)(encoder)
    return TaskModel(wrapped, task.head(wrapped.output_size)).to(model_device(loaded.model))


def training_steps(
    model: torch.nn.Module,
    loss_of: Callable[[object], torch.Tensor],
    batches: Iterator,
    config: FinetuneConfig,
    total: int,
    num_layers: int,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> Iterator[tuple[int, torch.Tensor]]:
    """The one fine-tuning step, `total` times: `loss_of(next(batches))` under autocast, backward, clipping, AdamW
    with layer-wise learning-rate decay on the linear schedule with warmup. Yields (step, detached loss) after each
    update, steps counted from 1, so that the caller scores or logs between updates. `betas` and `eps` are Adam's,
    BERT's fine-tuning defaults unless the caller trains something else (a new decoder wants pre-training's)."""
    # fused: one kernel for all parameters, which matters on CPU where small fine-tuning batches make the
    # optimizer step a large share of the time.
    optimizer = torch.optim.AdamW(parameter_groups(model, num_layers, config), betas=betas, eps=eps, fused=True)
    warmup = round(config.warmup_fraction * total)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: linear_schedule(s, warmup, total))
    autocast = torch.autocast(model_device(model).type, dtype=torch.bfloat16, enabled=config.precision == "bf16")
    for step in range(1, total + 1):
        with autocast:
            loss = loss_of(next(batches))
        loss.backward()
        if config.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        yield step, loss.detach()


def finetune_seed(
    task: Task, loaded: LoadedModel, prepared: Prepared, config: FinetuneConfig, seed: int, progress: bool = True
) -> dict:
    """Train one model, keep the state that scores best on the selection data, score it on every test set."""
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    special = loaded.tokenizer.special
    model = build_task_model(task, loaded, config).train()
    n = len(prepared.train)
    steps_per_epoch = math.ceil(n / config.batch_size)
    total = max(1, round(config.epochs * steps_per_epoch))
    total = min(total, config.max_steps) if config.max_steps else total
    select_every = max(1, steps_per_epoch // max(1, config.selections_per_epoch))
    device = model_device(model)

    def loss_of(idx: list[int]) -> torch.Tensor:
        batch = to_device(task.collate([prepared.train[i] for i in idx], special), device)
        return task.loss(model(batch), batch)

    # 1) train, scoring the selection data every `select_every` steps and at the end
    best = {"score": -math.inf, "step": 0, "state": None}
    history = []
    batches = training_batches(feature_groups(prepared.train), config.batch_size, rng)
    bar = tqdm(total=total, desc=f"{task.name} seed {seed}", disable=not progress, leave=False, mininterval=2.0)
    where = {"step": 0, "setting": "batch_size"}  # what a full GPU names: the training batch, or scoring's
    with memory_named(task, seed, where, config):
        for step, loss in training_steps(model, loss_of, batches, config, total, loaded.model.config.num_layers):
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
            where["step"] = step
            if step % select_every == 0 or step == total:
                where["setting"] = "eval_batch_tokens"
                scores = score_sets(model, task, prepared.select, config, special)
                value = float(np.mean([s[task.metric] for s in scores.values()]))
                history.append({"step": step, "loss": round(loss.item(), 4), "select": round(value, 2)})
                if value > best["score"]:
                    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                    best = {"score": value, "step": step, "state": state}
                where["setting"] = "batch_size"
        bar.close()
        where["setting"] = "eval_batch_tokens"
        train_seconds = time.perf_counter() - t0

        # 2) restore the selected state and score every test set
        model.load_state_dict(best["state"])
        test = score_sets(model, task, prepared.test, config, special)
    return {
        "seed": seed,
        "steps": total,
        "selected_step": best["step"],
        "select_score": round(best["score"], 2),
        "history": history,
        "test": {lang: {k: round(v, 2) for k, v in m.items()} for lang, m in test.items()},
        "train_seconds": round(train_seconds, 1),
        "seconds": round(time.perf_counter() - t0, 1),
    }


@contextmanager
def memory_named(task: Task, seed: int, where: dict, config: FinetuneConfig) -> Iterator[None]:
    """A full GPU as one line naming the setting to halve: `where` says the last step trained and which batch
    was being computed (training's `batch_size`, or scoring's `eval_batch_tokens`). A seed is kept only once
    scored, so the command runs again."""
    try:
        yield
    except torch.cuda.OutOfMemoryError:
        key = where["setting"]
        value = getattr(config, key)
        raise DataError(
            f"{task.name} seed {seed}, after step {where['step']}: the GPU ran out of memory with finetune.{key}="
            f"{value}; nothing of this task is kept: run the command again with --set finetune.{key}={value // 2 or 1}"
        ) from None


def check_one_process() -> None:
    """Fine-tuning trains in one process: under torchrun every process would train and write the same results."""
    rank, world = this_process()
    if world > 1:
        raise DataError(
            f"fine-tuning trains in one process, and this is process {rank} of {world} (torchrun): run "
            "`polyalign finetune` (or `xtreme`) without torchrun, with --device to choose the GPU"
        )


def run_finetune(
    task: Task,
    loaded: LoadedModel,
    data: TaskData,
    config: FinetuneConfig,
    seeds: int = 3,
    progress: bool = True,
    describe: str = "",
    setting: str = "transfer",
) -> dict:
    """Fine-tune `seeds` times and summarise: per-language mean and standard deviation, average, transfer gap."""
    from polyalign.finetune.results import class_baselines, summarise

    check_one_process()
    t0 = time.perf_counter()
    prepared = prepare_features(task, data, loaded, config)
    runs = [finetune_seed(task, loaded, prepared, config, seed, progress) for seed in range(seeds)]
    protocol = " ".join(
        p
        for p in (
            data.protocol,
            f"Fine-tuning: AdamW, lr {config.lr:g} with layer-wise decay {config.layer_decay:g}, batch "
            f"{config.batch_size}, {config.epochs:g} epochs"
            + (f" (at most {config.max_steps} steps)" if config.max_steps else "")
            + f", linear schedule with {config.warmup_fraction:.0%} "
            f"warmup, weight decay {config.weight_decay:g}, max length {config.max_length}, {config.precision}.",
            f"Model selection: the step with the best {task.metric} on the selection data "
            f"(scored {config.selections_per_epoch}x per epoch and at the end).",
            f"{seeds} seed(s) (0..{seeds - 1}); mean ± standard deviation over seeds.",
            describe,
        )
        if p
    )
    result = summarise(
        task=task.name,
        metric=task.metric,
        runs=runs,
        protocol=protocol,
        config=asdict(config) | {"task_options": asdict(task.options)},
        features={"train": len(prepared.train), "select": sum(len(f) for _, f in prepared.select.values())},
        seconds=time.perf_counter() - t0,
    )
    baselines = None
    if task.metric == "accuracy" and hasattr(task, "class_labels"):
        test = {lang: task.class_labels(examples) for lang, (examples, _) in prepared.test.items()}
        baselines = class_baselines(task.class_labels(data.train), test, task.classes)
    return {"setting": setting, **result, "baselines": baselines}
