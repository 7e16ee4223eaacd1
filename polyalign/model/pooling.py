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
