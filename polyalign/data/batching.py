"""Batching of variable-length rows for inference: length-sorted batches under a token budget, padded tensors.

Shared by sentence embedding (evaluate/), the word aligner (align/) and fine-tuning's evaluation (finetune/).
"""

from __future__ import annotations

import numpy as np
import torch


def length_batches(lengths: list[int], batch_tokens: int) -> list[np.ndarray]:
    """Indices grouped into batches of similar length whose padded size fits `batch_tokens`."""
    order = np.argsort(lengths, kind="stable")
    batches, current, longest = [], [], 0
    for i in order:
        longest_if_added = max(longest, lengths[i])
        if current and longest_if_added * (len(current) + 1) > batch_tokens:
            batches.append(np.array(current))
            current, longest_if_added = [], lengths[i]
        current.append(i)
        longest = longest_if_added
    if current:
        batches.append(np.array(current))
    return batches


def pad_sequences(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[b, : len(s)] = True
    return ids, mask
