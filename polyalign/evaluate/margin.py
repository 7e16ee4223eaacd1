"""Ratio-margin scoring (Artetxe and Schwenk 2019), shared by Tatoeba retrieval and BUCC mining.

Cosine nearest neighbours suffer from hubness: a few sentences are close to everything. The ratio margin
divides a pair's cosine by the average cosine of both sentences to their k nearest neighbours on the other
side, so a hub's scores shrink.
"""

from __future__ import annotations

import numpy as np

MARGIN_K = 4
"""Neighbours on each side (Artetxe and Schwenk 2019; XTREME's BUCC)."""


def ratio_margin(cos: np.ndarray, x_neighbourhood: np.ndarray, y_neighbourhood: np.ndarray) -> np.ndarray:
    """Artetxe and Schwenk (2019) Eq. (3) with the ratio margin: cos(x, y) / (sum_{z in NN_k(x)} cos(x, z) / 2k
    + sum_{z in NN_k(y)} cos(y, z) / 2k); the neighbourhoods are each sentence's mean cosine to its k nearest
    neighbours on the other side, broadcast against `cos`."""
    return cos / ((x_neighbourhood + y_neighbourhood) / 2)


def margin_matrix(cos: np.ndarray, k: int = MARGIN_K) -> np.ndarray:
    """Ratio margins of all pairs of an (Nx, Ny) cosine matrix (rows x, columns y)."""
    k = min(k, *cos.shape)
    x_neighbourhood = -np.partition(-cos, k - 1, axis=1)[:, :k].mean(1)  # (Nx,) mean of each row's top k
    y_neighbourhood = -np.partition(-cos, k - 1, axis=0)[:k].mean(0)  # (Ny,) mean of each column's top k
    return ratio_margin(cos, x_neighbourhood[:, None], y_neighbourhood[None, :])
