"""Sharded data parallelism (`trainer.distributed: fsdp`): weights, gradients and optimizer moments split over the
processes (PyTorch FSDP2, `fully_shard`), for models that do not fit in one process with DDP. Each encoder layer
is one unit, gathered for its own forward and backward only; the rest (embeddings, tied MLM head, objectives'
parameters) is the root unit.

Checkpoints are the same as under DDP: full tensors in safetensors, gathered to rank 0's CPU here, so a
checkpoint written by sharded processes loads in one process, and the other way round.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from polyalign.checkpoint import tied_names
from polyalign.io import DataError
from polyalign.model.vocabulary import pad_state, trim_state, vocabulary_keys_of
from polyalign.objectives.base import Objective
from polyalign.train.optim import optimized_parameters

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
"""Full (unsharded) tensors, on rank 0's CPU only: what a checkpoint holds."""


def check_fsdp(objectives: list[tuple[str, type[Objective]]]) -> None:
    """Refuse (name, class) pairs whose class says it cannot train sharded (`Objective.cannot_shard`)."""
    for i, (name, cls) in enumerate(objectives):
        if cls.cannot_shard:
            raise DataError(
                f"trainer.distributed=fsdp: objectives.{i} ({name}) {cls.cannot_shard}; use trainer.distributed=ddp"
            )


def shard(module: nn.Module, layers: nn.ModuleList, device: torch.device, precision: str) -> None:
    """Shard `module` in place: one FSDP unit per layer, then the root. On CUDA with bf16 the layers gather
    their weights in bf16 (half the traffic) and reduce gradients in fp32; the root keeps fp32 weights under
    autocast, as DDP does. On the CPU every unit stays fp32 under the same autocast as DDP (gloo has no bf16
    gradient reduction to gain from)."""
    layer_policy = MixedPrecisionPolicy()
    if device.type == "cuda" and precision == "bf16":
        layer_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in layers:
        fully_shard(layer, mp_policy=layer_policy)
    fully_shard(module)


def parameter_names(module: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Parameter names in the optimizer's order: index i of torch's `optimizer.state_dict()` is names[i]."""
    names = {id(p): n for n, p in module.named_parameters()}
    return [names[id(p)] for p in optimized_parameters(optimizer)]


def gather_state(module: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(weights by name, optimizer state dict keyed as torch's own) as full CPU tensors on rank 0; empty on the
    others. Every process must call it (it gathers)."""
    weights = get_model_state_dict(module, options=FULL)
    if not optimizer.state:  # no step yet (a checkpoint inside the head warm-up): no moments to gather, and
        # get_optimizer_state_dict would make them with a step at lr 0, which AdamW would count as its first
        return (trim_vocabulary(module, weights), optimizer.state_dict()) if weights else ({}, {})
    by_name = get_optimizer_state_dict(module, optimizer, options=FULL)
    if not weights:
        return {}, {}
    trim_vocabulary(module, weights)
    index = {n: i for i, n in enumerate(parameter_names(module, optimizer))}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in by_name["param_groups"]]
    return weights, {"state": {index[n]: s for n, s in by_name["state"].items()}, "param_groups": groups}


def trim_vocabulary(module: nn.Module, weights: dict) -> dict:
    for keys, vocab_size, _ in vocabulary_keys_of(module):  # the model's hooks leave sharded tensors alone
        trim_state(weights, keys, vocab_size)
    return weights


def load_state(module: nn.Module, optimizer: torch.optim.Optimizer, weights: dict, optimizer_state: dict) -> None:
    """Load full tensors (every process holds them all) into the sharded module and optimizer."""
    tied = tied_names(module)
    weights = {**weights, **{name: weights[kept] for name, kept in tied.items()}}
    for keys, vocab_size, rows in vocabulary_keys_of(module):
        pad_state(weights, keys, vocab_size, rows)
    set_model_state_dict(module, weights, options=StateDictOptions(full_state_dict=True, strict=True))
    if optimizer_state["state"]:  # none before the first step (a checkpoint inside the head warm-up) or weights only
        load_optimizer_state(module, optimizer, optimizer_state)


def load_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, optimizer_state: dict) -> None:
    """Load a full optimizer state dict (torch's layout, every process holds it all) into the sharded optimizer."""
    names = parameter_names(module, optimizer)
    by_name = {
        "state": {names[i]: s for i, s in optimizer_state["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in optimizer_state["param_groups"]],
    }
    set_optimizer_state_dict(module, optimizer, by_name, options=StateDictOptions(full_state_dict=True))
