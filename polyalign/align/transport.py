"""Word alignment as entropic optimal transport (XLM-Align §3.1, Eqs. 1-6).

Everything works on padded batches: a (..., n, m) score matrix per sentence pair plus a boolean mask that is
True at real (source token, target token) pairs. Sinkhorn runs in log space, so no kernel entry under- or
overflows however large the dot products are.
"""

from __future__ import annotations

import torch

EPSILON = 1e-6
"""The floor of h_i·h_j in Eq. (1), keeping the log finite (the value XLM-Align's released aligner uses)."""


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 inputs are computed in fp32; fp64 stays fp64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def dot_products(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """h_i·h_j in fp32: source (..., n, C), target (..., m, C) -> (..., n, m)."""
    return at_least_fp32(source) @ at_least_fp32(target).transpose(-1, -2)


def log_dot_similarity(source: torch.Tensor, target: torch.Tensor, eps: float = EPSILON) -> torch.Tensor:
    """XLM-Align Eq. (1): f_sim(s_i, t_j) = log max(eps, h_i·h_j). source (..., n, C), target (..., m, C)
    -> (..., n, m), computed in fp32."""
    return torch.log(dot_products(source, target).clamp(min=eps))


def sinkhorn(similarity: torch.Tensor, mask: torch.Tensor, mu: float = 1.0, iterations: int = 2) -> torch.Tensor:
    """The entropic OT plan A* = diag(u) K diag(v) of Eqs. (3)-(6), returned as log A* (-inf outside `mask`).

    K = exp(f_sim / mu) (Eq. 5); u = 1 / (K v), v = 1 / (K^T u), starting from v = 1 (Eq. 6). After the last
    half-step every column of A* sums to exactly 1; rows approach 1 as iterations grow (for n = m; with
    n != m the marginals 1_n, 1_m of Eq. 6 cannot both hold and only the columns do).
    similarity, mask: (..., n, m).
    """
    if mu <= 0:
        raise ValueError(f"mu={mu}: the entropic regularisation must be positive")
    log_kernel = (at_least_fp32(similarity) / mu).masked_fill(~mask, float("-inf"))  # Eq. (5), in log space
    rows, cols = mask.any(-1), mask.any(-2)  # (..., n), (..., m): real tokens
    log_u = torch.zeros(rows.shape, dtype=log_kernel.dtype, device=log_kernel.device)
    log_v = torch.zeros(cols.shape, dtype=log_kernel.dtype, device=log_kernel.device)
    for _ in range(iterations):
        # Eq. (6); padding rows/columns sum over nothing (-inf), so they are pinned to log 1 = 0.
        log_u = (-torch.logsumexp(log_kernel + log_v[..., None, :], dim=-1)).masked_fill(~rows, 0.0)
        log_v = (-torch.logsumexp(log_kernel + log_u[..., :, None], dim=-2)).masked_fill(~cols, 0.0)
    return log_u[..., :, None] + log_kernel + log_v[..., None, :]  # Eq. (4)
