"""Training in several processes: joining the process group, wrapping the module (DDP, or FSDP via
train/fsdp.py), and the collectives a run needs.

NCCL takes tensors on the GPU only: sums and votes are built on the training device; what is CPU-side
bookkeeping (data-stream states, RNG states) goes through a separate gloo group. When a process fails, the words
the backend and the data loader use for it are read here (`lost_peer`, `lost_worker`), and who says what: rank 0
for the run, another rank only of itself (`speaker_prefix`), with the command that relaunches the run (`relaunch`).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from polyalign.config import ObjectiveSpec, TrainerConfig
from polyalign.model.compiling import compile_regions
from polyalign.objectives import OBJECTIVES
from polyalign.train.fsdp import shard
from polyalign.train.metrics import Window


def init_distributed(device_name: str | None = None, timeout_s: float | None = None) -> tuple[int, int, torch.device]:
    """Join the process group if launched by torchrun; returns (rank, world size, device). `device_name` (one
    process only, e.g. fit-aligner's --device) overrides the default: this process's GPU when there is one.
    `timeout_s`: how long a collective waits for the other processes (`trainer.process_timeout_s`); None keeps the
    backend's default."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if device_name is not None and world == 1:
        device = torch.device(device_name)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        return 0, 1, device
    if world > 1 and not dist.is_initialized():
        timeout = timedelta(seconds=timeout_s) if timeout_s else None
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo", timeout=timeout)
    rank = dist.get_rank() if dist.is_initialized() else 0
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return rank, world, device


def unused_parameters_possible(objectives: list[ObjectiveSpec]) -> bool:
    """Whether some steps may leave some parameters without a gradient: with staged (start_step) or
    alternating (every) objectives, or when every objective leaves a part of the model unused
    (`Objective.leaves_parameters_unused`: XLM-E's RTD and translation ranking never read the MLM head).
    DDP looks for them (an extra pass over the graph each step) only then."""
    if any(o.start_step > 0 or o.every > 1 for o in objectives):
        return True
    unused_by_all = set.intersection(*(set(OBJECTIVES[o.name].leaves_parameters_unused) for o in objectives))
    return bool(unused_by_all)


def wrap_for_processes(
    module: nn.Module,
    trainer: TrainerConfig,
    objectives: list[ObjectiveSpec],
    world: int,
    device: torch.device,
    packed: bool = False,
) -> nn.Module:
    """What runs forward: the module; with several processes its DDP wrapper, or (FSDP) the module itself,
    sharded in place, which must happen before an optimizer takes its parameters. When `compiles` says so, the
    module's regions (each encoder layer, the MLM head's loss) are compiled in place (model/compiling.py):
    specialised to packed rows' fixed size, or with symbolic sizes for unpacked rows, whose shapes change."""
    trained = module
    if world > 1 and trainer.distributed == "fsdp":
        shard(module, module.model.encoder.layers, device, trainer.precision)
    elif world > 1:
        unused = unused_parameters_possible(objectives)
        trained = nn.parallel.DistributedDataParallel(module, find_unused_parameters=unused)
    if compiles(trainer.compile, device):
        compile_regions(module, dynamic=None if packed else True)
    return trained


def average_gradients(parameters, world: int) -> None:
    """Average the gradients of a module no wrapper reduces (the head warm-up's, under DDP) over the processes:
    each trained on its own batches."""
    if world > 1:
        for p in parameters:
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world


def compiles(setting: bool | str, device: torch.device) -> bool:
    """Whether `trainer.compile` compiles on `device`: `auto` means on CUDA only."""
    return device.type == "cuda" if setting == "auto" else bool(setting)


def bookkeeping_group(world: int):
    """A gloo group for CPU-side collectives when the default backend cannot take CPU data (NCCL)."""
    if world > 1 and dist.get_backend() != "gloo":
        return dist.new_group(backend="gloo")
    return None


def reduce_window(window: Window, world: int, elapsed: float = 0.0) -> torch.Tensor:
    """[tokens, flops, seconds, loss sum, metric sums in sorted name order, model flops], summed over processes, on
    the device. The seconds are summed too, so every process adds the same (mean) time to its counters."""
    host = torch.tensor([window.tokens, window.flops, elapsed], dtype=torch.float64)
    host = host.to(window.device, non_blocking=True)
    sums = [window.loss, *(window.metrics[k] for k in sorted(window.metrics))]
    model = torch.tensor([window.model_flops], dtype=torch.float64).to(window.device, non_blocking=True)
    packed = torch.cat([host, torch.stack([v.to(torch.float64) for v in sums]), model])
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


def gather_objects(value, world: int, group) -> list:
    """Every process's `value` (picklable CPU data), in rank order, on every process."""
    if world == 1:
        return [value]
    gathered: list = [None] * world
    dist.all_gather_object(gathered, value, group=group)
    return gathered


def barrier(world: int, group) -> None:
    if world > 1:
        dist.barrier(group=group)


# ---------------------------------------------------------------------------------------------------------
# When a process fails: who says what


def this_process() -> tuple[int, int]:
    """(rank, world size) as torchrun set them: known before the process group is joined and after it is lost."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def speaker_prefix() -> str | None:
    """How this process prefixes a one-line message, or None when it says nothing. Rank 0 speaks for the run
    (""). Another process says only what it alone knows, prefixed with its rank: what happened to it once the
    processes had joined their group; an error met before that (a recipe, a folder) every process meets alike,
    and rank 0 says it."""
    rank, world = this_process()
    if rank == 0 or world == 1:
        return ""
    return f"rank {rank}: " if dist.is_available() and dist.is_initialized() else None


def relaunch(command: str) -> str:
    """`command` (a polyalign command line) as the processes of this run start it again: under torchrun with the
    same processes per machine (on every machine, with the run's rendezvous options, when there are several)."""
    _, world = this_process()
    if world == 1:
        return f"polyalign {command}"
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if per_node == world:
        return f"torchrun --standalone --nproc_per_node {world} -m polyalign.cli {command}"
    return f"torchrun --nnodes {world // per_node} --nproc_per_node {per_node} -m polyalign.cli {command}"


# A collective whose peer is gone fails with the backend's words: gloo's socket to a killed process is reset or
# closed (its RuntimeError / DistBackendError), a peer that hangs runs into the group's timeout; NCCL aborts.
PEER_GONE = re.compile(
    r"Connection (reset|closed) by peer|Connection refused|Broken pipe|Timed out waiting|timed out|Socket Timeout"
    r"|NCCL (error|communicator)",
    re.IGNORECASE,
)
WORKER_DIED = re.compile(
    r"DataLoader worker \(pid\(?s?\)? ([\d, ]+)\) (?:is killed by signal: ([^.]+)|exited unexpectedly)"
)


def lost_peer(err: BaseException) -> str | None:
    """The backend's reason when `err` is a collective that failed because another process is gone, else None."""
    if not isinstance(err, RuntimeError) or isinstance(err, torch.cuda.OutOfMemoryError):
        return None
    found = PEER_GONE.search(str(err))
    if found is None and not isinstance(err, getattr(dist, "DistBackendError", ())):
        return None
    return found[0] if found else str(err).splitlines()[0][:120]


def lost_worker(err: BaseException) -> str | None:
    """'data-loader worker (pid N) killed by signal: S' when `err` is the loader's report of a dead worker."""
    found = WORKER_DIED.search(str(err)) if isinstance(err, RuntimeError) else None
    if found is None:
        return None
    how = f"was killed by signal {found[2]}" if found[2] else "exited unexpectedly"
    return f"its data-loader worker (pid {found[1].strip()}) {how}"
