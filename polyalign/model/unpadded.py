"""Unpadded encoding (ModernBERT, MosaicBERT): the batch's real tokens as one (N, C) matrix through every dense
layer (embeddings, projections, FFN, norms), so that no layer computes padding; attention per example.

The loader finds on the CPU (data/packing.py's `unpadding_indices`) where the real tokens lie and where each example
starts:
    token_index (N,) int64   flat positions of the real tokens in the (B*T) rows, row-major, so each example's
                             tokens are consecutive (packed rows lay examples side by side; see data/packing.py)
    cu_seqlens (S+1,) int32  where each of the S examples starts in that order, then N
    max_seqlen               the longest example (a Python int)
On CUDA attention runs through variable-length flash attention over those offsets; elsewhere, and wherever that
kernel lacks what the layer needs (an additive position bias, attention dropout, fp32), through the padded path's
own attention: q, k, v laid back into their rows, attended under the rows' mask, the real tokens taken out again.
The encoder returns its states laid back into (B, T, C) rows (zeros at padding), so objectives read what they read
from padded rows; `unpadded_positions` maps positions into those rows (an MLM head's targets) to rows of the
(N, C) matrix for a head that reads the unpadded states instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

VARLEN_DTYPES = (torch.float16, torch.bfloat16)
"""What variable-length flash attention computes in; fp32 layers take the padded attention."""
VARLEN_MAX_HEAD_SIZE = 256
"""Widest head flash attention takes."""


def unpad(x: torch.Tensor, token_index: torch.Tensor) -> torch.Tensor:
    """(B, T, ...) -> (N, ...): the real tokens in row-major order."""
    return x.flatten(0, 1).index_select(0, token_index)


def pad(x: torch.Tensor, token_index: torch.Tensor, B: int, T: int) -> torch.Tensor:
    """(N, ...) -> (B, T, ...): each token back in its place in the rows, zeros at padding."""
    rows = x.new_zeros(B * T, *x.shape[1:])
    return rows.index_copy(0, token_index, x).view(B, T, *x.shape[1:])


def unpadded_positions(positions: torch.Tensor, token_index: torch.Tensor, size: int) -> torch.Tensor:
    """Flat positions into the (B*T) rows, each of a real token, -> their rows of the (N, C) unpadded matrix
    (`size` = B*T). A position of padding maps to -1."""
    order = torch.full((size,), -1, dtype=torch.long, device=token_index.device)
    order[token_index] = torch.arange(len(token_index), device=token_index.device)
    return order[positions]


@dataclass
class Unpadded:
    """Where an unpadded batch's tokens lie (see the module docstring), read by every layer's attention."""

    token_index: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    rows: int
    length: int
    varlen: bool
    """Whether attention may run through variable-length flash attention (CUDA, no bias, no attention dropout)."""

    def attend(self, q, k, v, padded_attention) -> torch.Tensor:
        """q, k, v (N, H, hs) -> (N, H, hs). `padded_attention` maps (B, H, T, hs) q, k, v to the padded path's
        output (its mask, bias and dropout), for a layer the variable-length kernel cannot serve."""
        if self.varlen and q.dtype in VARLEN_DTYPES and q.shape[-1] <= VARLEN_MAX_HEAD_SIZE:
            from torch.nn.attention.varlen import varlen_attn

            cu, longest = self.cu_seqlens, self.max_seqlen
            return varlen_attn(q, k, v, cu, cu, longest, longest)
        B, T = self.rows, self.length
        qp, kp, vp = (pad(t, self.token_index, B, T).transpose(1, 2) for t in (q, k, v))  # 3 x (B, H, T, hs)
        return unpad(padded_attention(qp, kp, vp).transpose(1, 2), self.token_index)  # (N, H, hs)


def varlen_fits(config, training: bool, device: torch.device) -> bool:
    """Variable-length flash attention for an unpadded batch: on CUDA, without an additive position bias (the kernel
    has no bias input) and without attention dropout while training."""
    dropout = training and config.attention_dropout > 0
    return device.type == "cuda" and config.position_bias == "none" and not dropout
