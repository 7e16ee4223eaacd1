"""polyalign against transformers on the same batches: the one measurement behind every speed page (issue 43).

Every comparison is the same three things: a training step as polyalign's trainer runs it (loss, backward, clipping,
fused AdamW; the same optimizer for both stacks, so that the comparison is of the model step), the same batches in
the same order for every arm, and the arms timed one step at a time, round-robin in rotating order, so that other
load on the machine falls on all of them alike. The sizes the pages compare at are data (`PRESETS`):
- `cpu-mlm`: the `mlm` recipe's model on 2 CPU cores (bench/perf/throughput.py, throughput.md);
- `continued-250k`: multilingual-e5-small (250k vocabulary) continued on en-xx pairs (bench/e5_speed.py, e5.md);
- `gpu-xlmr-base`: an XLM-R-base-sized encoder on one GPU (the GPU check's throughput step, gpu_check.md);
  `gpu-dry` the same at tiny sizes for its dry run on the CPU.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from polyalign.config import TrainerConfig, load_recipe
from polyalign.data.layout import sentence_layout
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.objectives.mlm import MLM, MLMConfig, masked_batch
from polyalign.tokenizer import SpecialTokens
from polyalign.train import PretrainingModule, parameter_groups


@dataclass(frozen=True)
class SpeedPreset:
    """The sizes one speed page compares the stacks at."""

    description: str
    model: dict | None  # EncoderConfig sizes; None: a pretrained checkpoint's own (continued training)
    batch: int  # rows a batch (sentence pairs for the pair objectives)
    length: int  # tokens a row (a side, for pairs)
    warmup: int = 2  # untimed steps first (a compiled arm compiles in them); 2 for the CPU presets
    steps: int = 5  # timed steps (rounds); 5 for the CPU presets, whose steps take seconds
    dropout: float = 0.1
    attention_dropout: float = 0.0
    learning_rate: float = 1e-4


def recipe_sizes(recipe: str, vocab_size: int) -> dict:
    """A built-in recipe's model sizes (not its dropout: the preset's), with the vocabulary it is prepared with."""
    return {"vocab_size": vocab_size} | {k: v for k, v in load_recipe(recipe).model.items() if "dropout" not in k}


GPU_XLMR_BASE = SpeedPreset(
    "an XLM-R-base-sized encoder (12 x 768, 12 heads, FFN 3072, vocabulary 250,002), bf16 autocast, one GPU",
    model=dict(vocab_size=250_002, hidden_size=768, num_layers=12, num_heads=12, ffn_size=3072, max_positions=512),
    batch=16,
    length=512,
    warmup=5,  # the compiled arm compiles in its first two (the MLM head's masked count turns dynamic)
    steps=30,
    attention_dropout=0.1,
)
PRESETS = {
    "cpu-mlm": SpeedPreset(
        "the `mlm` recipe's model (polyalign/recipes/mlm.yaml), MLM on synthetic full-length rows, 2 CPU cores",
        model=recipe_sizes("mlm", vocab_size=32000),  # `polyalign prepare`'s default vocabulary
        batch=64,
        length=128,
    ),
    "continued-250k": SpeedPreset(
        "multilingual-e5-small (12 x 384, 250k vocabulary) continued on en-xx pairs of ../shared/data/train, 2 cores",
        model=None,
        batch=16,
        length=64,
        learning_rate=1e-5,
    ),
    "gpu-xlmr-base": GPU_XLMR_BASE,
    "gpu-dry": replace(
        GPU_XLMR_BASE,
        description="the GPU preset at tiny sizes, to check the GPU check on a CPU (not a measurement)",
        model=dict(vocab_size=1000, hidden_size=32, num_layers=2, num_heads=4, ffn_size=64, max_positions=64),
        batch=4,
        length=64,
        warmup=1,
        steps=1,
    ),
}


def special_tokens(vocab_size: int) -> SpecialTokens:
    return SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=vocab_size, first_normal=5)


def encoder_config(preset: SpeedPreset) -> EncoderConfig:
    return EncoderConfig(**preset.model, dropout=preset.dropout, attention_dropout=preset.attention_dropout)


def synthetic_batch(batch: int, length: int, seed: int, special: SpecialTokens) -> dict[str, torch.Tensor]:
    """Full-length `<s> x </s>` rows of random ordinary tokens, masked as the MLM objective masks."""
    rng = np.random.default_rng(seed)
    rows = [rng.integers(special.first_normal, special.vocab_size, length - 2) for _ in range(batch)]
    return masked_batch(sentence_layout(rows, None, special), special, MLMConfig(), rng)


def mlm_model_flops(config: EncoderConfig, batch: dict[str, torch.Tensor]) -> float:
    """Model FLOPs of one MLM training step, the same for every arm: what an arm recomputes (checkpointing) or adds
    (transformers' MLM head at every position) is not model FLOPs."""
    B, T = batch["input_ids"].shape
    masked = int((batch["labels"] != -100).sum())
    return training_flops(encoder_forward_flops(config, B, T) + mlm_head_forward_flops(config, masked))


# ---------------------------------------------------------------------------------------------------------
# The stacks: each arm is a module and its loss on a batch


def polyalign_mlm(preset: SpeedPreset, device, checkpointing: bool = False, compile_backend: str | None = None):
    """polyalign's MLM objective on its model, as the trainer runs it; (module, loss of a batch)."""
    config = encoder_config(preset)
    torch.manual_seed(0)
    with torch.device(device):  # built where it trains: initialising 278M parameters on the CPU takes seconds
        model = MaskedLanguageModel(config)
        objective = MLM(MLMConfig(), special_tokens(config.vocab_size), config)
        module = PretrainingModule(model, {"mlm": objective}, {"mlm": 1.0})
    model.encoder.checkpoint_layers = checkpointing
    forward = torch.compile(module, backend=compile_backend) if compile_backend else module
    return module.train(), lambda batch: forward({"mlm": batch})[0]


def transformers_mlm(preset: SpeedPreset, device):
    """XLMRobertaForMaskedLM with the configuration polyalign's export writes for the same model."""
    from types import SimpleNamespace

    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    from polyalign.model.hf import xlmr_config

    config = encoder_config(preset)
    special = special_tokens(config.vocab_size)
    mapped = xlmr_config(SimpleNamespace(config=config), SimpleNamespace(special=special), 1)
    torch.manual_seed(0)
    with torch.device(device):
        model = XLMRobertaForMaskedLM(XLMRobertaConfig.from_dict(mapped))
    inputs = ("input_ids", "attention_mask", "labels")
    return model.train(), lambda batch: model(**{k: batch[k] for k in inputs}).loss


def training_step(module: torch.nn.Module, loss_of, learning_rate: float, autocast=None) -> Callable[[dict], float]:
    """step(batch) -> loss, as polyalign's trainer runs it for either stack: the loss (under `autocast`), backward,
    clipping, fused AdamW with weight decay on matrices only, over the parameters that train."""
    trainer = TrainerConfig()
    groups = parameter_groups(module, trainer)
    optimizer = torch.optim.AdamW(groups, lr=learning_rate, betas=trainer.betas, eps=trainer.eps, fused=True)
    trained = [p for g in groups for p in g["params"]]

    def step(batch) -> float:
        with autocast or contextlib.nullcontext():
            loss = loss_of(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, trainer.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())  # a float: the step has finished on the device

    return step


# ---------------------------------------------------------------------------------------------------------
# The measurement


def compare_on_same_batches(
    arms: Mapping[str, Callable[[], Callable[[object], float]]],
    batches: Sequence,
    warmup: int,
    steps: int,
    each_round: Callable[[], None] | None = None,
    keep_going: Callable[[], bool] = lambda: True,
) -> dict[str, dict]:
    """Build every arm (`arms[name]()` returns its step), run `warmup` untimed steps of each, then time `steps`
    rounds of one step per arm in rotating order, every arm on the same batches in the same order (in turn,
    warm-up included). `each_round` runs before each round (another measurement that should see the same load);
    `keep_going` is asked before every round after the first (a budget). Per arm: the seconds and loss of each
    timed step, and the warm-up's seconds (compilation included)."""
    built = {name: build() for name, build in arms.items()}
    turns = {name: itertools.count() for name in built}
    runs = {name: {"seconds": [], "losses": []} for name in built}

    def run(name: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        loss = built[name](batches[next(turns[name]) % len(batches)])
        return time.perf_counter() - t0, loss

    for name in built:
        runs[name]["warmup_seconds"] = sum(run(name)[0] for _ in range(warmup))
    names = list(built)
    for r in range(steps):
        if r > 0 and not keep_going():
            break
        if each_round:
            each_round()
        for name in names[r % len(names) :] + names[: r % len(names)]:
            seconds, loss = run(name)
            runs[name]["seconds"].append(seconds)
            runs[name]["losses"].append(loss)
    return runs
