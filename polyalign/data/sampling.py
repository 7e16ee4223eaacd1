"""Language sampling with an exponent: p_j ∝ m_j^alpha (XLM-E Eq. 9; XLM §3.1).

alpha = 1 samples in proportion to the data; smaller alpha raises the share of low-resource languages.
"""

from __future__ import annotations

import numpy as np


def language_probabilities(sizes: dict[str, int] | list[int], alpha: float) -> np.ndarray:
    """Probabilities p_j = m_j^alpha / sum_k m_k^alpha for data sizes m_j (in the order given)."""
    m = np.asarray(list(sizes.values()) if isinstance(sizes, dict) else sizes, dtype=np.float64)
    if len(m) == 0:
        raise ValueError("no languages to sample from")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha={alpha}: the sampling exponent must lie in [0, 1]")
    if (m < 0).any() or m.sum() == 0:
        raise ValueError(f"data sizes {m.tolist()} must be non-negative and not all zero")
    w = np.where(m > 0, m, 0.0) ** alpha * (m > 0)
    return w / w.sum()
