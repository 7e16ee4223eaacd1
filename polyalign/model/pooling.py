"""Sentence vectors from token states: the one pooling that training objectives and evaluations share."""

from __future__ import annotations

import torch

POOLINGS = ("mean", "first")


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, how: str = "mean") -> torch.Tensor:
    """(..., B, T, C) hidden states, (B, T) mask -> (..., B, C) in fp32: the mean over real tokens, <s> and
    </s> included (XTREME's sentence vectors; PPA footnote 1), or the first token (<s>, BERT's [CLS]; PPA §2.1)."""
    if how == "first":
        return hidden[..., 0, :].float()
    if how != "mean":
        raise ValueError(f"pooling={how!r}: use one of {POOLINGS}")
    m = attention_mask[..., None].float()  # (B, T, 1)
    return (hidden.float() * m).sum(-2) / m.sum(-2).clamp(min=1.0)


def pool_examples(hidden: torch.Tensor, example_ids: torch.Tensor, count: int, how: str = "mean") -> torch.Tensor:
    """`pool` for packed rows: (B, T, C) hidden states, (B, T) example ids (-1 at padding; each example's tokens
    contiguous) -> (count, C) in fp32, row e the mean over example e's tokens or its first token."""
    if how not in POOLINGS:
        raise ValueError(f"pooling={how!r}: use one of {POOLINGS}")
    ids = example_ids.flatten()  # (B*T,)
    real = ids >= 0
    states = hidden.flatten(0, 1)[real].float()  # (N, C)
    ids = ids[real]
    if how == "first":
        positions = torch.arange(ids.numel(), device=ids.device)
        first = torch.full((count,), ids.numel(), device=ids.device).scatter_reduce_(0, ids, positions, "amin")
        return states[first]
    sums = torch.zeros(count, states.shape[-1], device=states.device).index_add_(0, ids, states)
    return sums / torch.bincount(ids, minlength=count).clamp(min=1)[:, None]
