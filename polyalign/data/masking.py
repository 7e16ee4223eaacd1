"""Token masking for masked language modelling (BERT §3.1; XLM §3.3)."""

from __future__ import annotations

import numpy as np
import torch

IGNORE = -100  # label of a position that is not predicted (PyTorch's cross-entropy ignore_index)


def mask_tokens(
    ids: np.ndarray,
    maskable: np.ndarray,
    rng: np.random.Generator,
    mask_id: int,
    random_range: tuple[int, int],
    mask_prob: float = 0.15,
    replace_probs: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> tuple[np.ndarray, np.ndarray]:
    """Choose `mask_prob` of the maskable positions of each row; of those, replace 80% by MASK, 10% by a
    random token, keep 10% (the default split). Returns (corrupted ids, labels with IGNORE elsewhere).

    ids, maskable: (B, T). Every row with a maskable position gets at least one prediction target, so short
    sentences still contribute to the loss.
    """
    if not 0.0 < mask_prob < 1.0:
        raise ValueError(f"mask_prob={mask_prob}: must lie in (0, 1)")
    if abs(sum(replace_probs) - 1.0) > 1e-6:
        raise ValueError(f"replace_probs={replace_probs}: MASK/random/keep shares must sum to 1")
    maskable = maskable.astype(bool)
    chosen = (rng.random(ids.shape) < mask_prob) & maskable
    # Rows where chance chose nothing: force one maskable position (uniformly among them).
    empty = ~chosen.any(axis=1) & maskable.any(axis=1)
    if empty.any():
        scores = rng.random(ids.shape) * maskable
        forced = scores.argmax(axis=1)
        rows = np.nonzero(empty)[0]
        chosen[rows, forced[rows]] = True

    labels = np.where(chosen, ids, IGNORE)
    action = rng.random(ids.shape)
    to_mask = chosen & (action < replace_probs[0])
    to_random = chosen & (action >= replace_probs[0]) & (action < replace_probs[0] + replace_probs[1])
    corrupted = ids.copy()
    corrupted[to_mask] = mask_id
    corrupted[to_random] = rng.integers(random_range[0], random_range[1], size=int(to_random.sum()))
    return corrupted, labels


TARGET_ROW_MULTIPLE = 64
"""The masked-position index is padded to a multiple of this many rows: the head's matrix products see aligned
shapes, and a compiled head, whose row count is symbolic, sees few distinct sizes."""


def masked_targets(labels: torch.Tensor, multiple: int = TARGET_ROW_MULTIPLE) -> dict:
    """The prediction targets of a masked batch as a training step reads them, built on the CPU with the batch:
    `masked_index` (K,) flat positions into the labels' B·T (row-major, as boolean selection orders them),
    `masked_labels` (K,), `masked_count` (the real targets, an int). K is the count rounded up to `multiple`; the
    padding entries point at position 0 with label IGNORE, so they add nothing to a loss. With these the step
    selects by `index_select`: no shape that depends on the data and no wait for the device (a boolean selection
    on a GPU waits for the count)."""
    flat = labels.reshape(-1)
    index = torch.nonzero(flat != IGNORE).squeeze(1)
    n = int(index.numel())
    K = max(multiple, -(-n // multiple) * multiple)
    padded_index = torch.zeros(K, dtype=torch.long)
    padded_index[:n] = index
    padded_labels = torch.full((K,), IGNORE, dtype=torch.long)
    padded_labels[:n] = flat[index]
    return {"masked_index": padded_index, "masked_labels": padded_labels, "masked_count": n}
