"""What a run logs: the window of sums since the last log line (kept on the device), and the metrics file
(JSONL + TensorBoard) rank 0 writes."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from polyalign.io import atomic_write_text

METRICS_FILE = "metrics.jsonl"


def _logged_step(line: str) -> float:
    """The step of a metrics line; infinity for a line that a kill cut short (so it is dropped)."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return math.inf


class MetricsLog:
    """JSONL (`name` in the run folder) and TensorBoard (unless told not), written by rank 0 only; `shape` makes
    the line written of a record."""

    def __init__(
        self,
        run_dir: Path,
        resume_step: int | None,
        name: str = METRICS_FILE,
        tensorboard: bool = True,
        shape: Callable[[dict], dict] | None = None,
    ):
        self.path = run_dir / name
        self.shape = shape
        if resume_step is not None and self.path.exists():
            # Drop lines past the checkpoint: the resumed run writes them again.
            # A line cut short by a kill is dropped too.
            kept = [ln for ln in self.path.read_text().splitlines() if _logged_step(ln) <= resume_step]
            atomic_write_text(self.path, "".join(ln + "\n" for ln in kept))
        self.file = open(self.path, "a", encoding="utf-8")
        self.tb = None
        if not tensorboard:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tensorboard"))
        except ImportError:  # TensorBoard is optional at run time
            pass

    def write(self, record: dict) -> None:
        record = record if self.shape is None else self.shape(record)
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
    model_flops: float = 0.0
    loss: torch.Tensor | None = None
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    """Steps each metric was logged in (an objective with start_step or every is not active in all)."""
    started: float = field(default_factory=time.perf_counter)

    def add_micro_batch(
        self, loss: torch.Tensor, metrics: dict[str, torch.Tensor], flops: float, share: float, model_flops: float = 0.0
    ):
        self.loss = loss * share if self.loss is None else self.loss + loss * share
        for k, v in metrics.items():
            self.metrics[k] = v * share if k not in self.metrics else self.metrics[k] + v * share
        self.flops += flops
        self.model_flops += model_flops

    def end_step(self, tokens: int, names: list[str]) -> None:
        self.steps += 1
        self.tokens += tokens
        for k in names:
            self.counts[k] = self.counts.get(k, 0) + 1
