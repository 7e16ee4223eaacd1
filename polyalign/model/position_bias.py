"""Additive attention biases computed from relative positions (one module per layer).

Interface: `bias(q, position_ids) -> (B or 1, H, T, T)`, the materialised bias for q, the layer's queries
(B, H, T, hs), and position_ids (B, T); the bias of query i and key j depends on pos_j - pos_i. position_ids None
says that within every example positions rise by one per column (one sentence per row, or packed rows whose examples
each count from their first column), so pos_j - pos_i = j - i for every pair that may attend: the bucket table is
then gathered once at (H, T, T) for the whole batch instead of at B·T² indices, whose gradient (an embedding
backward over B·T² indices) costs more than the attention itself; pairs of two examples differ but are masked.
A bias that ignores q (plain relative) still takes it, so a gated variant that reads q (XLM-E §3.3) plugs into the
same place. `bias.attend(q, k, v, mask, position_ids)` is the same attention without the materialised bias
(FlexAttention, model/biased_attention.py); `bias.fused(dropout)` says which of the two the layer takes.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from polyalign.model.biased_attention import flex_relative_attention


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


KERNELS = ("auto", "flex", "materialised")
"""How a biased layer attends: `materialised` adds the (B, H, T, T) bias to the scores (SDPA's memory-efficient
kernel on CUDA, which takes an additive bias and returns its gradient), `flex` FlexAttention (`attend`), `auto` the
materialised bias on every device: on a CPU three plain ops are the faster ones, and on CUDA FlexAttention's kernel
for this score_mod did not compile with the tiles tried (Triton asked for 409,600 bytes of shared memory where the
measured card had 232,448) and has not yet been measured with the forward tiles and stages it now sets, so a recipe
that trusted it could stop at its first step."""


class RelativePositionBias(nn.Module):
    """A learned scalar per (bucket, head) added to the attention logits."""

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, num_heads)
        self.kernel = "auto"
        """One of `KERNELS`; set by benchmarks and exactness tests, not by recipes."""
        # The bucket of every distance -max_distance..max_distance (farther ones share the last of their side),
        # looked up by both kernels: a gather instead of a logarithm per score.
        distances = torch.arange(-max_distance, max_distance + 1)
        self.register_buffer(
            "buckets", relative_position_bucket(distances, num_buckets, max_distance), persistent=False
        )

    def forward(self, q: torch.Tensor, position_ids: torch.Tensor | None) -> torch.Tensor:
        """The bias (B, H, T, T), or (1, H, T, T) shared by every row when position_ids is None (the columns)."""
        if position_ids is None:
            columns = torch.arange(q.shape[-2], device=q.device)
            relative = (columns[None, :] - columns[:, None])[None]  # (1, T, T): j - i
        else:
            relative = position_ids[:, None, :] - position_ids[:, :, None]  # (B, T, T): pos_j - pos_i
        M = self.max_distance
        buckets = self.buckets[relative.clamp(-M, M) + M]  # (B or 1, T, T)
        return self.table(buckets).permute(0, 3, 1, 2).to(q.dtype)  # (B or 1, H, T, T)

    def fused(self, dropout: nn.Dropout) -> bool:
        """Whether the layer attends through `attend` (FlexAttention) rather than the materialised bias.
        FlexAttention has no attention dropout: a layer that drops attention weights takes the materialised bias."""
        return self.kernel == "flex" and not (dropout.training and dropout.p > 0)

    def attend(self, q, k, v, mask, position_ids: torch.Tensor | None, scale: torch.Tensor | None = None):
        """softmax(q kᵀ / √hs + bias, mask) v without the (B, H, T, T) bias, the bias of query i multiplied by
        scale (B, H, T) when given; mask as `attend` takes it, or a FlexAttention BlockMask; position_ids None for
        the columns. (B, H, T, hs)."""
        return flex_relative_attention(q, k, v, self.per_bucket(q, scale), position_ids, self.buckets, mask)

    def per_bucket(self, q: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        """E[b, h, i, k] = scale[b, h, i]·d[h, k], fp32 (B, H, T, buckets). One row of cells per query even without
        a scale: FlexAttention's gradient adds then spread over B·H·T·buckets cells instead of buckets·H."""
        B, H, T, _ = q.shape
        d = self.table.weight.float().t()[None, :, None, :]  # (1, H, 1, nb)
        return d.expand(B, H, T, self.num_buckets).contiguous() if scale is None else scale.float()[..., None] * d


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

    def forward(self, q: torch.Tensor, position_ids: torch.Tensor | None) -> torch.Tensor:
        d = self.relative(q, position_ids)  # (B or 1, H, T, T): one gather per layer when position_ids is None
        return self.query_scale(q)[..., None].to(d.dtype) * d  # (B, H, T, T): row b's gates scale the shared table

    def query_scale(self, q: torch.Tensor) -> torch.Tensor:
        update, reset = torch.sigmoid(self.gates(q)).unbind(-1)  # 2 x (B, H, T): one value per query i
        return 1 + update + (1 - update) * self.w[:, None] * reset  # (B, H, T)

    def fused(self, dropout: nn.Dropout) -> bool:
        return self.relative.fused(dropout)

    def attend(self, q, k, v, mask, position_ids: torch.Tensor | None) -> torch.Tensor:
        return self.relative.attend(q, k, v, mask, position_ids, scale=self.query_scale(q))


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
