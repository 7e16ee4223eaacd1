"""ERNIE-M's attention masks and BTMLM's generation (ERNIE-M §3.1, Figures 2-4), below the objectives that train
with them (objectives/ernie_m_camlm.py, objectives/btmlm.py) and the evaluation that measures the generation
(evaluate/pseudo_tokens.py).

BTMLM generates with what CAMLM taught, so its placeholders are laid out exactly as CAMLM lays out a translation
pair whose target side is being predicted: `<s> x </s> <s> M .. M </s>`, positions restarting at the target side,
language ids of x, then of the target language.
"""

from __future__ import annotations

import numpy as np
import torch

from polyalign.data.layout import Layout, pair_layout
from polyalign.model import MaskedLanguageModel, model_inputs
from polyalign.tokenizer import SpecialTokens

TARGET = 1  # Layout.segment of the pseudo target side `<s> M .. M </s>` (the sentence is 0), as in CAMLM


def camlm_attention_mask(segment: torch.Tensor, predicted: torch.Tensor, see_own_masks: bool = True) -> torch.Tensor:
    """(B, T, T) "query i may see key j" for a laid-out pair.

    segment (B, T): 0 source, 1 target, -1 padding; predicted (B, T): True at the masked positions.
    Unmasked tokens see the unmasked tokens of their own sentence; a masked token sees the other sentence's
    unmasked tokens, itself, and (with see_own_masks) the other masked positions of its own sentence.
    """
    T = segment.shape[1]
    real = segment >= 0
    context = real & ~predicted  # (B, T)
    same_side = segment[:, :, None] == segment[:, None, :]  # (B, T, T)
    query_predicted = predicted[:, :, None]  # (B, T, 1)
    key_context = context[:, None, :]  # (B, 1, T)
    itself = torch.eye(T, dtype=torch.bool, device=segment.device)  # (T, T)
    context_rows = context[:, :, None] & same_side & key_context
    own_masks = same_side & predicted[:, None, :] if see_own_masks else itself
    predicted_rows = query_predicted & ((~same_side & key_context) | itself | own_masks)
    return context_rows | predicted_rows


def placeholder_counts(lengths: np.ndarray, ratio: float) -> np.ndarray:
    """Placeholders per sentence: round(ratio · length), at least one when ratio > 0."""
    if ratio == 0:
        return np.zeros_like(lengths)
    return np.maximum(1, np.rint(ratio * lengths)).astype(np.int64)


def placeholder_layout(
    sentences: list[np.ndarray],
    languages: np.ndarray | None,
    targets: np.ndarray | None,
    counts: np.ndarray,
    sp: SpecialTokens,
) -> Layout:
    """`<s> x </s> <s> M*counts[b] </s>` per row: CAMLM's pair layout with a target side of MASKs in language
    targets[b]; `placeholders` finds the MASK columns."""
    masks = [np.full(n, sp.mask, dtype=np.int64) for n in counts]
    return pair_layout(sentences, masks, languages, targets, sp, "xlm")


def placeholders(layout: Layout) -> np.ndarray:
    """(B, T) True at the placeholder (pseudo-token) columns: the target side less its `<s>` and `</s>`."""
    return layout.maskable & (layout.segment == TARGET)


def generation_attention_mask(segment: torch.Tensor, placeholder: torch.Tensor, see_own_masks: bool = True):
    """(B, T, T) stage-1 mask: CAMLM's mask for a pair whose predicted tokens are the placeholders, so a
    placeholder sees exactly what a masked target token saw in CAMLM (Figure 4)."""
    return camlm_attention_mask(segment, placeholder, see_own_masks)


@torch.no_grad()
def generate_pseudo_tokens(
    model: MaskedLanguageModel,
    batch: dict[str, torch.Tensor],
    sp: SpecialTokens,
    see_own_masks: bool = True,
    temperature: float | None = None,
) -> torch.Tensor:
    """Stage 1: (N,) pseudo-tokens for the batch's placeholders in row-major order; eval mode, no gradient.
    `batch` holds the unmasked sentence (`generation_ids`, else `input_ids`); temperature None = argmax."""
    placeholder = batch["placeholder"]
    inputs = {
        **model_inputs(batch),
        "input_ids": batch.get("generation_ids", batch["input_ids"]),
        "attention_mask": generation_attention_mask(batch["segment"], placeholder, see_own_masks),
    }
    was_training = model.training
    model.eval()
    try:
        hidden = model(**inputs).last_hidden_state
        logits = model.mlm_logits(hidden[placeholder]).float()  # (N, V)
    finally:
        model.train(was_training)
    logits[:, : sp.first_normal] = float("-inf")  # pseudo-tokens are ordinary pieces
    if temperature is None:
        return logits.argmax(-1)
    return torch.multinomial(torch.softmax(logits / temperature, -1), 1).squeeze(1)
