"""Back-translation masked language modelling (ERNIE-M §3.1, Figures 3 and 4).

BTMLM generates with what CAMLM taught, so both of its stages lay the sentence out exactly as CAMLM lays
out a translation pair whose target side is being predicted (objectives/ernie_m_camlm.py):

    <s> x </s> <s> M .. M </s>      positions 0..|x|+1, then restarting at 0; language ids of x, then of t

Stage 1 (no gradient): the p = ratio·|x| placeholders M carry "the language embedding and position
embedding to indicate the language and position we want to predict" (§3.1). With CAMLM's attention mask
for a fully masked target side, a placeholder sees the sentence and the placeholders (Figure 4:
p(y_5 | x_1..x_4, M_5); `see_own_masks: false` narrows it to itself), never the target's specials. The MLM
head's most likely ordinary token at each placeholder (or a sample) is its pseudo-token P.
Stage 2: the sentence, masked as in MLM, with P in place of the placeholders (the same layout, a pseudo
translation pair), trained with full attention on the sentence's masked tokens:
    L_BTMLM = -Σ log Π_{m ∈ M} p(x_m | x / M, P).

Directions: CAMLM on en-xx data learns en→xx and xx→en only, so by default (`pivot: en`) an English sentence
generates into another language and every other sentence into English. The logged `perplexity` is exp of
the stage-2 loss (ERNIE-M Figure 5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from polyalign.data.layout import Layout, pair_layout, sentence_layout
from polyalign.data.masking import IGNORE
from polyalign.data.streams import MonoBatch
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs
from polyalign.objectives.ernie_m_camlm import camlm_attention_mask
from polyalign.objectives.mlm import MLMConfig, masked_batch, masked_lm_loss
from polyalign.tokenizer import SpecialTokens

TARGET = 1  # Layout.segment of the pseudo target side `<s> M .. M </s>` (the sentence is 0), as in CAMLM


@dataclass
class BTMLMConfig(MLMConfig):
    pseudo_ratio: float = 0.15
    """Placeholders per sentence token (at least one; 0 appends none and BTMLM is MLM). ERNIE-M Figure 5: 5-20%."""
    pivot: str | None = "en"
    """Generate only in the directions CAMLM learnt from pivot-xx pairs: a pivot sentence into another target
    language, any other sentence into the pivot. null: any direction among `target_languages`."""
    target_languages: list[str] | None = None
    """Languages to generate into, one drawn uniformly per sentence, never the sentence's own unless it is the
    only one listed; default: every language the model has an embedding for."""
    see_own_masks: bool = True
    """A placeholder also sees the other placeholders; keep it equal to camlm's `see_own_masks`."""
    sampling: bool = False
    """False: greedy pseudo-tokens (argmax); True: sample from the head's softmax at `temperature`."""
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.pseudo_ratio < 0:
            raise ValueError(f"btmlm pseudo_ratio={self.pseudo_ratio}: must be >= 0")
        if self.temperature <= 0:
            raise ValueError(f"btmlm temperature={self.temperature}: must be > 0")


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


def pseudo_token_hits(pseudo: np.ndarray, reference: np.ndarray) -> int:
    """Pseudo-tokens found in the true translation, each reference token matched at most as often as it occurs
    there (BLEU's clipped unigram count), so repeating one frequent piece does not score."""
    tokens, counts = np.unique(pseudo, return_counts=True)
    return int(sum(min(int(c), int((reference == t).sum())) for t, c in zip(tokens, counts, strict=True)))


def pseudo_token_precision(pseudo: list[np.ndarray], references: list[np.ndarray]) -> float:
    """Share of generated pseudo-tokens that occur in their sentence's true translation (clipped, pooled over
    rows)."""
    hits = sum(pseudo_token_hits(p, r) for p, r in zip(pseudo, references, strict=True))
    total = sum(len(p) for p in pseudo)
    return hits / total if total else float("nan")


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


class BTMLM(Objective):
    stream = "mono"
    Config = BTMLMConfig

    def __init__(self, config, special, model_config, languages=None):
        super().__init__(config, special, model_config, languages)
        if not self.uses_languages:
            raise DataError(
                "objective btmlm: the model has no language embeddings to say which language to generate; "
                "set model.num_languages: auto"
            )

    def setup(self, model: MaskedLanguageModel) -> None:
        self.target_ids()  # unknown target languages fail before training starts
        self.pivot_id()

    def target_ids(self) -> np.ndarray:
        """Language-embedding indices of the configured target languages."""
        codes = self.config.target_languages
        if codes is None:
            return np.arange(self.model_config.num_languages)
        if not codes or any(c not in self.languages for c in codes):
            raise DataError(
                f"objective btmlm: target_languages {codes} are not languages of the model {self.languages}"
            )
        return np.array([self.languages.index(c) for c in codes])

    def pivot_id(self) -> int | None:
        pivot = self.config.pivot
        if pivot is None:
            return None
        if pivot not in self.languages:
            raise DataError(
                f"objective btmlm: pivot {pivot!r} is not a language of the model {self.languages}; "
                "set objectives.<i>.config.pivot to the language every parallel pair shares, or null"
            )
        return self.languages.index(pivot)

    def draw_targets(self, languages: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One target language per sentence: with a pivot, the pivot for other sentences and a uniform draw
        among the other targets for pivot sentences; without one, uniform among the targets but its own."""
        targets, pivot, out = self.target_ids(), self.pivot_id(), np.empty_like(languages)
        for b, own in enumerate(languages):
            if pivot is not None and own != pivot:
                out[b] = pivot
                continue
            choices = targets[targets != own]
            out[b] = rng.choice(choices if len(choices) else targets)
        return out

    def make_batch(self, raw: MonoBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        base = sentence_layout(raw.sentences, raw.languages, self.special)
        # Stage-2 masking is drawn on the sentence alone, so it is MLM's exactly, whatever the ratio.
        masked = masked_batch(base, self.special, self.config, rng)  # (B, T0)
        counts = placeholder_counts(np.array([len(s) for s in raw.sentences]), self.config.pseudo_ratio)
        if not counts.any():
            return masked
        targets = self.draw_targets(raw.languages, rng)
        layout = placeholder_layout(raw.sentences, raw.languages, targets, counts, self.special)
        batch = layout.tensors()  # (B, T)
        batch["placeholder"] = torch.from_numpy(placeholders(layout))
        batch["generation_ids"] = batch["input_ids"]  # stage 1 reads the unmasked sentence
        T0 = base.input_ids.shape[1]
        sentence = batch["segment"][:, :T0] == 0  # (B, T0); a short row's target side starts inside T0
        batch["input_ids"] = batch["input_ids"].clone()
        batch["input_ids"][:, :T0] = torch.where(sentence, masked["input_ids"], batch["input_ids"][:, :T0])
        batch["labels"] = torch.full_like(batch["input_ids"], IGNORE)
        batch["labels"][:, :T0] = torch.where(sentence, masked["labels"], IGNORE)
        return batch

    def generate(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Stage 1: (B, T) stage-2 ids, every placeholder replaced by its pseudo-token."""
        temperature = self.config.temperature if self.config.sampling else None
        pseudo = generate_pseudo_tokens(model, batch, self.special, self.config.see_own_masks, temperature)
        ids = batch["input_ids"].clone()
        ids[batch["placeholder"]] = pseudo
        return ids

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        B, T = batch["input_ids"].shape
        n_placeholders = int(batch["placeholder"].sum()) if "placeholder" in batch else 0
        flops = 0.0
        ids = batch["input_ids"]
        if n_placeholders:
            flops = encoder_forward_flops(model.config, B, T) + mlm_head_forward_flops(model.config, n_placeholders)
            ids = self.generate(model, batch)
        hidden = model(**{**model_inputs(batch), "input_ids": ids}).last_hidden_state  # stage 2, full attention
        loss, accuracy, n = masked_lm_loss(model, hidden, batch["labels"])
        flops += training_flops(encoder_forward_flops(model.config, B, T) + mlm_head_forward_flops(model.config, n))
        return ObjectiveOutput(loss, {"accuracy": accuracy, "perplexity": torch.exp(loss.detach().float())}, flops)
