"""Additive attention biases computed from relative positions (one module per layer).

Interface: `bias(q, relative_positions) -> (B, H, T, T)`, where q is the layer's queries (B, H, T, hs) and
relative_positions[b, i, j] = pos_j - pos_i. A bias that ignores q (plain relative) still takes it, so a
gated variant that reads q (XLM-E §3.3) plugs into the same place.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def relative_position_bucket(
    relative_position: torch.Tensor, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """Bidirectional log-spaced buckets (T5 §2.1): half the buckets per direction, exact below
    num_buckets/4, logarithmic up to max_distance, then clipped."""
    half = num_buckets // 2
    bucket = (relative_position > 0).long() * half
    n = relative_position.abs()
    max_exact = half // 2
    is_small = n < max_exact
    log_ratio = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (half - max_exact)).long()).clamp(max=half - 1)
    return bucket + torch.where(is_small, n, large)


class RelativePositionBias(nn.Module):
    """A learned scalar per (bucket, head) added to the attention logits."""

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, num_heads)

    def forward(self, q: torch.Tensor, relative_positions: torch.Tensor) -> torch.Tensor:
        buckets = relative_position_bucket(relative_positions, self.num_buckets, self.max_distance)  # (B, T, T)
        return self.table(buckets).permute(0, 3, 1, 2).to(q.dtype)  # (B, H, T, T)


class GatedRelativePositionBias(nn.Module):
    """XLM-E §3.3: the relative bias d_{i-j} rescaled per query by two GRU-like gates read from q_i.

    g_update, g_reset = σ(q_i·u), σ(q_i·v)
    r_{i-j} = d_{i-j} + g_update·d_{i-j} + (1 - g_update)·w·g_reset·d_{i-j}
    u, v ∈ R^{d_k} are shared by the heads; w is learned per head, as d is (the WavLM/UniLM implementation
    of the same gates keeps one w per head, initialised to 1).
    """

    def __init__(self, num_heads: int, head_size: int, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.relative = RelativePositionBias(num_heads, num_buckets, max_distance)  # d_{i-j}
        self.gates = nn.Linear(head_size, 2, bias=False)  # the columns are u and v
        self.w = nn.Parameter(torch.ones(num_heads))  # 1-D: no weight decay, like other gains

    def forward(self, q: torch.Tensor, relative_positions: torch.Tensor) -> torch.Tensor:
        d = self.relative(q, relative_positions)  # (B, H, T, T)
        update, reset = torch.sigmoid(self.gates(q)).unbind(-1)  # 2 x (B, H, T): one value per query i
        scale = 1 + update + (1 - update) * self.w[:, None] * reset  # (B, H, T)
        return scale[..., None].to(d.dtype) * d  # (B, H, T, T)


# An explicit registry: config name -> constructor taking the EncoderConfig.
POSITION_BIASES = {
    "relative": lambda c: RelativePositionBias(c.num_heads, c.relative_buckets, c.relative_max_distance),
    "gated_relative": lambda c: GatedRelativePositionBias(
        c.num_heads, c.hidden_size // c.num_heads, c.relative_buckets, c.relative_max_distance
    ),
}


def build_position_bias(config) -> nn.Module | None:
    if config.position_bias == "none":
        return None
    if config.position_bias not in POSITION_BIASES:
        raise ValueError(f"position_bias={config.position_bias!r}: use 'none' or one of {sorted(POSITION_BIASES)}")
    return POSITION_BIASES[config.position_bias](config)
