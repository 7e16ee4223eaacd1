"""The trainer's batches, built ahead of the step by worker processes.

A step consumes one micro-batch per slot (see polyalign/train) and per active objective. Slot a is built by worker
a mod N, always in step order, so the batches are the same for any number of workers (0 builds them in
the training process). Each step's item carries every slot's data state *after* it: a checkpoint saves
the position of the batches trained on, not of those already prefetched, and resuming is exact.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from polyalign.data.packing import unpadding_indices

PR_SET_PDEATHSIG = 1
"""prctl(2): the signal a process gets when its parent dies."""


@dataclass
class StepBatches:
    """Everything one optimizer step of one process reads."""

    step: int
    slots: list[dict[str, dict[str, torch.Tensor]]]
    """Per slot: objective name -> its batch (CPU tensors, pinned when the loader pins)."""
    tokens: int
    """Real (non-padding) tokens over all slots and objectives, counted on the CPU: no device sync."""
    slot_states: list[dict]
    """Per slot: the streams' and masking generator's state after this step's batches."""


def real_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding tokens the encoder reads for one batch: every 2-D attention mask counts (an objective that
    encodes a second sequence, e.g. contrast's `target_` side or MoCo's key side, carries one for it)."""
    return sum(int(v.sum()) for k, v in batch.items() if k.endswith("attention_mask") and v.dim() == 2)


def padding_free(batch: dict[str, torch.Tensor]) -> bool:
    """A batch whose (B, T) attention mask is all True needs no mask at all (flash attention on CUDA)."""
    mask = batch.get("attention_mask")
    return mask is not None and mask.dim() == 2 and bool(mask.all())


def sides(batch: dict[str, torch.Tensor]) -> list[str]:
    """The prefixes of the sequences a batch encodes: "" for the bare one, "target_" for contrast's target side..."""
    return [k[: -len("input_ids")] for k in batch if k.endswith("input_ids")]


def consecutive_positions(batch: dict[str, torch.Tensor], prefix: str = "") -> bool:
    """Whether within every example of one side of a batch (a row; in packed rows each `example_ids` value) the
    position ids rise by one per column, so that the relative position of two tokens that may attend each other is
    their column difference: a position bias then gathers its table once for the whole batch. Not so for TLM's
    `xlm` style, whose positions restart at the second sentence of a pair."""
    positions = batch.get(prefix + "position_ids")
    if positions is None or positions.dim() != 2:
        return False
    B, T = positions.shape
    offset = positions - torch.arange(T)  # (B, T): constant within an example when positions follow the columns
    example_ids = batch.get(prefix + "example_ids")
    if example_ids is not None:
        real, group = example_ids >= 0, example_ids
    else:
        mask = batch.get(prefix + "attention_mask")
        real = mask.bool() if mask is not None and mask.dim() == 2 else torch.ones(B, T, dtype=torch.bool)
        group = torch.arange(B)[:, None].expand(B, T)
    if not bool(real.any()):
        return True
    g, o = group[real], offset[real]  # (N,) each
    size = int(g.max()) + 1
    lowest = torch.zeros(size, dtype=o.dtype).scatter_reduce(0, g, o, "amin", include_self=False)
    highest = torch.zeros(size, dtype=o.dtype).scatter_reduce(0, g, o, "amax", include_self=False)
    return bool((lowest == highest).all())


def build_slot_step(slot, makers: dict[str, Callable], active: list[str], unpad: bool = False) -> tuple[dict, int]:
    """One slot's batches for one step: draw from each active objective's stream, then let it make tensors;
    `unpad`: with the indices of their real tokens and examples, so the encoder computes no padding
    (model/unpadded.py)."""
    batches, tokens = {}, 0
    for name in active:
        batch = makers[name](slot.streams[name].next_batch(), slot.rng)
        tokens += real_tokens(batch)
        if padding_free(batch):
            batch["padding_free"] = True  # objectives' model_inputs drop the mask then
        for prefix in sides(batch):
            if consecutive_positions(batch, prefix):
                batch[prefix + "consecutive_positions"] = True  # a position bias reads column differences then
            if unpad:
                batch |= unpadding_indices(batch, prefix)
        batches[name] = batch
    return batches, tokens


class SlotBatches(IterableDataset):
    """Endless steps from `start_step` on; in worker w of N, only the slots a with a % N == w."""

    def __init__(
        self,
        slots: list,
        makers: dict[str, Callable],
        active: Callable[[int], list[str]],
        start_step: int,
        unpad: bool = False,
    ):
        self.slots, self.makers, self.active, self.start_step = slots, makers, active, start_step
        self.unpad = unpad
        """Add each batch's unpadding indices (`build_slot_step`): `data.unpad`, resolved for the device."""

    def __iter__(self) -> Iterator[tuple[int, dict[int, tuple]]]:
        info = get_worker_info()
        w, N = (info.id, info.num_workers) if info is not None else (0, 1)
        mine = [a for a in range(len(self.slots)) if a % N == w]
        step = self.start_step
        while True:
            active = self.active(step)
            part = {}
            for a in mine:
                batches, tokens = build_slot_step(self.slots[a], self.makers, active, self.unpad)
                part[a] = (batches, tokens, self.slots[a].state_dict())
            yield step, part
            step += 1


def _keep(item):
    return item


def _leave_signals_to_the_trainer(worker_id: int) -> None:
    """Ctrl-C reaches every process of the terminal's group: a worker ignores it, and SIGTERM, so that the training
    process can finish its step and save it (the workers end when it closes the loader)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A worker is forked with its trainer's sockets (the process group's): were it to outlive a trainer killed
    # with -9, the other processes would not see that connection close until the worker noticed (seconds).
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def dead_worker(workers: list, wait_s: float = 5.0) -> RuntimeError | None:
    """A loader worker that died, reported in DataLoader's own words (what the trainer names to the user) with
    the signal that ended it, or None. On busy cores the loader can meet a killed worker first as a reset
    connection (a batch's tensors come over a socket) or as "exited unexpectedly" (found dead while waiting),
    neither naming the signal (the kill -9 test failed so in about one trial in ten with the cores loaded)."""
    deadline = time.monotonic() + wait_s
    while True:
        for worker in workers:
            if code := worker.exitcode:  # negative: the signal that ended it
                how = "exited unexpectedly" if code > 0 else f"is killed by signal: {signal.strsignal(-code)}"
                return RuntimeError(f"DataLoader worker (pid {worker.pid}) {how}. ")
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


class StepLoader:
    """Iterator of StepBatches. `workers` processes (at most one per slot) prefetch `prefetch` steps each;
    `pin` puts the tensors in page-locked memory so the copies to a GPU can be asynchronous."""

    def __init__(self, dataset: SlotBatches, workers: int = 0, pin: bool = False, prefetch: int = 2):
        self.workers = min(workers, len(dataset.slots))
        self.num_slots = len(dataset.slots)
        loader = DataLoader(
            dataset,
            batch_size=None,
            collate_fn=_keep,
            num_workers=self.workers,
            pin_memory=pin,
            prefetch_factor=prefetch if self.workers else None,
            # Its own generator: DataLoader draws worker seeds from it, which would otherwise advance the global
            # one that dropout reads (a resumed run would then differ from an uninterrupted one).
            generator=torch.Generator(),
            worker_init_fn=_leave_signals_to_the_trainer,
        )
        self._items = iter(loader)

    def __iter__(self) -> StepLoader:
        return self

    def __next__(self) -> StepBatches:
        # DataLoader takes items from its workers in turn, and each worker yields one item per step.
        parts: dict[int, tuple] = {}
        steps = set()
        for _ in range(max(1, self.workers)):
            try:
                step, part = next(self._items)
            except (ConnectionError, EOFError, RuntimeError) as err:  # a broken batch connection: a dead worker?
                if isinstance(err, RuntimeError) and "DataLoader worker" not in str(err):
                    raise
                raise dead_worker(getattr(self._items, "_workers", [])) or err from err
            steps.add(step)
            parts.update(part)
        assert len(steps) == 1 and len(parts) == self.num_slots, (steps, sorted(parts))
        ordered = [parts[a] for a in range(self.num_slots)]
        return StepBatches(
            step=steps.pop(),
            slots=[b for b, _, _ in ordered],
            tokens=sum(t for _, t, _ in ordered),
            slot_states=[s for _, _, s in ordered],
        )

    def close(self) -> None:
        del self._items  # shuts the workers down
