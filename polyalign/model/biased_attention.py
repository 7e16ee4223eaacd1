"""Attention with a relative position bias that never materialises the (B, H, T, T) bias: FlexAttention.

A relative (T5 §2.1) or gated relative (XLM-E §3.3, Eq. 7) bias is
    bias[b, h, i, j] = scale[b, h, i] · d[h, bucket(pos[b, j] - pos[b, i])]      (scale = 1 without gates)
so all of it lives in one small per-bucket table per query,
    E[b, h, i, k] = scale[b, h, i] · d[h, k]                                      (B, H, T, buckets)
which autograd builds (and differentiates) outside the kernel; the kernel's score_mod only reads
E[b, h, i, bucket(j - i)]. Why E and not d and the gates themselves: FlexAttention accumulates the gradient of a
tensor its score_mod reads with an atomic add per score, so B·H·T² adds onto a 32 x H table collide on a few hundred
addresses (the naive rewrite runs slower than the materialised bias); onto E, every query row has its own cells,
and autograd turns dE into d(scale) = Σ_k dE·d and d(d) = Σ_{b,i} dE·scale with two small reductions.

The bucket of a distance comes from a lookup table over [-max_distance, max_distance] (every farther distance shares
the last bucket of its direction), filled by the same function as the materialised path's buckets, so both paths
bucket every distance alike.
"""

from __future__ import annotations

import functools

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from polyalign.model.compiling import compiled

FLEX_KERNEL_OPTIONS = {
    "fwd_BLOCK_M": 64,
    "fwd_BLOCK_N": 32,
    "fwd_num_stages": 1,
    "bwd_BLOCK_M1": 32,
    "bwd_BLOCK_N1": 64,
    "bwd_BLOCK_M2": 64,
    "bwd_BLOCK_N2": 32,
    "bwd_num_stages": 1,
}
"""Triton tiles and pipeline stages of the forward and backward kernels on CUDA: with a score_mod that reads a
per-query table, torch's default forward tiles asked a card for more shared memory than it has even with small
backward tiles, and shared memory grows with tiles x stages, so both kernels take small tiles in one stage. The GPU
check's kernels step times these against torch's defaults."""


def flex_relative_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    per_bucket: torch.Tensor,
    positions: torch.Tensor,
    buckets: torch.Tensor,
    mask: torch.Tensor | BlockMask | None = None,
    kernel_options: dict | None = None,
) -> torch.Tensor:
    """softmax(q kᵀ / √hs + bias, masked) v with bias[b, h, i, j] = per_bucket[b, h, i, bucket(pos_j - pos_i)].

    q, k, v: (B, H, T, hs); per_bucket: (B, H, T, nb) fp32; positions: (B, T) integer positions, or None for the
    columns (pos_j - pos_i = j - i: see model/position_bias.py); buckets: the bucket
    of each distance -M..M (2M + 1,), farther distances clamped to ±M; mask: boolean, broadcastable to (B, 1, T, T)
    (True = may see), a FlexAttention BlockMask (document masks of packed rows), or None. Returns (B, H, T, hs).
    On CUDA it runs compiled (FlexAttention's fused Triton kernels); elsewhere FlexAttention's reference math.
    """
    B = q.shape[0]
    dense = None
    if isinstance(mask, torch.Tensor):
        dense = mask.expand(B, 1, mask.shape[-2], mask.shape[-1])[:, 0]  # (B, T or 1, T)
    block_mask = mask if isinstance(mask, BlockMask) else None
    if q.device.type != "cuda":
        return _flex(q, k, v, per_bucket, positions, buckets, dense, block_mask, kernel_options)
    options = FLEX_KERNEL_OPTIONS if kernel_options is None else kernel_options
    flex = _flex if torch.compiler.is_compiling() else _compiled()  # inside a compiled model: traced with it
    return flex(q, k, v, per_bucket, positions, buckets, dense, block_mask, options)


def _flex(q, k, v, per_bucket, positions, buckets, dense, block_mask, kernel_options):
    M = (buckets.shape[0] - 1) // 2  # max_distance
    key_padding = dense is not None and dense.shape[1] == 1

    def score_mod(score, b, h, i, j):
        distance = (j - i if positions is None else positions[b, j] - positions[b, i]).clamp(-M, M)
        score = score + per_bucket[b, h, i, buckets[distance + M]]
        if dense is None:
            return score
        return torch.where(dense[b, 0, j] if key_padding else dense[b, i, j], score, -float("inf"))

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, kernel_options=kernel_options)


@functools.cache
def _compiled():
    return compiled(_flex)  # inlined when the whole model is compiled (trainer.compile)
