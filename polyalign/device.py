"""Where tensors live: a batch moved to the training device, a model's device. Shared by pre-training and
fine-tuning."""

from __future__ import annotations

import torch
from torch import nn


def to_device(batch: dict, device: torch.device) -> dict:
    """Tensors to the device (asynchronous from a loader's pinned memory); flags such as `padding_free` as
    they are."""
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device
