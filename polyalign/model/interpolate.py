"""Weight-space interpolation between a pre-trained model and its fine-tuned copy (WiSE-FT: Wortsman et al.
2022, "Robust fine-tuning of zero-shot models", Eq. 1: θ_α = (1 − α)·θ_start + α·θ_tuned).

Alignment fine-tuning moves every language, some the wrong way: in the project's measurement self-training from
multilingual-e5-small lowered AER on 5 of 7 gold sets and raised it on en-fr and en-hi; the halfway point kept most of
the gains and lowered all 7. The weight α is a choice like a checkpoint: make it on dev data."""

from __future__ import annotations

import torch

from polyalign.io import DataError


def check_weight(weight: float) -> None:
    if not 0.0 <= weight <= 1.0:
        raise DataError(f"--weight {weight}: give a number from 0 (the start) to 1 (the tuned model)")


def interpolate_weights(
    start: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor], weight: float
) -> dict[str, torch.Tensor]:
    """(1 − weight)·start + weight·tuned for every floating tensor; integer buffers are the tuned model's."""
    check_weight(weight)
    if start.keys() != tuned.keys():
        only = sorted(start.keys() ^ tuned.keys())
        raise DataError(
            f"the two models hold different parameters (e.g. {only[:3]}): give a model and its own tuned copy"
        )
    out = {}
    for name, value in tuned.items():
        if start[name].shape != value.shape:
            raise DataError(f"{name}: shape {tuple(start[name].shape)} in the start, {tuple(value.shape)} tuned")
        out[name] = torch.lerp(start[name], value, weight) if value.is_floating_point() else value
    return out
