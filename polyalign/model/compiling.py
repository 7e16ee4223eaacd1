"""torch.compile as polyalign calls it: one place for the options every compiled graph gets."""

from __future__ import annotations

import torch

INDUCTOR_OPTIONS = {"triton.coalesce_tiling_analysis": False}
"""Inductor's coalescing analysis picks Triton tile shapes; with CUDA it failed an internal assertion
(`tiling_utils.get_pw_red_splits`, sizes with symbolic dimensions) while compiling the self-align recipe's step and
FlexAttention with XLM-E's gated bias. Without it Inductor tiles as it did before the
analysis existed (it is off by default in Meta's own builds)."""


def compiled(fn, **kwargs):
    """`torch.compile(fn, **kwargs)` with INDUCTOR_OPTIONS."""
    return torch.compile(fn, options=dict(INDUCTOR_OPTIONS), **kwargs)
