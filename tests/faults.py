"""`python -m tests.faults STEP RANK ARGS...`: `polyalign ARGS`, with the CUDA out-of-memory error raised inside the
forward of training step STEP in process RANK (torchrun sets RANK): a full GPU, on a CPU, for tests that launch
the command under torchrun, where a monkeypatch cannot reach."""

from __future__ import annotations

import os
import sys

import torch

from polyalign.cli import main
from polyalign.train.run import PretrainingModule


def fill_the_gpu_at(step: int, rank: int) -> None:
    forward, calls = PretrainingModule.forward, [0]

    def full(self, batches):
        calls[0] += 1  # one forward per step: no accumulation, no head warm-up in the tests that use it
        if calls[0] == step and int(os.environ.get("RANK", "0")) == rank:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 79.1 GiB total)")
        return forward(self, batches)

    PretrainingModule.forward = full


if __name__ == "__main__":
    fill_the_gpu_at(int(sys.argv[1]), int(sys.argv[2]))
    main(sys.argv[3:])
