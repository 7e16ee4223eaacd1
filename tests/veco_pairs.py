"""A tiny VECO model (cross-attention on) and a stacked pair batch: rows [0, B) are x, [B, 2B) their partners y."""

from __future__ import annotations

import torch

from polyalign.model import MaskedLanguageModel
from tests.conftest import tiny_config

B, T = 3, 9


def veco_model(seed: int = 0, **overrides) -> MaskedLanguageModel:
    torch.manual_seed(seed)
    # A wider initialisation than the default 0.02 makes the cross-attention's contribution clearly visible.
    config = tiny_config(cross_attention=True, initializer_range=0.2, **overrides)
    return MaskedLanguageModel(config).eval()


def pair_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """A stacked pair batch: rows [0, B) are x, [B, 2B) are y; y rows are padded at different lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (2 * B, T), generator=g)
    mask = torch.ones(2 * B, T, dtype=torch.bool)
    mask[B, 6:] = False
    mask[B + 1, 4:] = False
    return {"input_ids": ids.masked_fill(~mask, 1), "attention_mask": mask}


def with_new_y(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    changed = {k: v.clone() for k, v in inputs.items()}
    changed["input_ids"][B:, 1:4] = torch.tensor([7, 8, 9])
    return changed
