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
the stage-2 loss (ERNIE-M Figure 5). Stage 1's layout, attention mask and generation are model/ernie_m.py's, which
evaluate/pseudo_tokens.py measures on held-out pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from polyalign.data.layout import sentence_layout
from polyalign.data.masking import IGNORE
from polyalign.data.streams import MonoBatch
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.model.ernie_m import generate_pseudo_tokens, placeholder_counts, placeholder_layout, placeholders
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs
from polyalign.objectives.mlm import MLMConfig, masked_batch, masked_lm_loss


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
        loss, accuracy, n = masked_lm_loss(model, hidden, batch)
        flops += training_flops(encoder_forward_flops(model.config, B, T) + mlm_head_forward_flops(model.config, n))
        return ObjectiveOutput(loss, {"accuracy": accuracy, "perplexity": torch.exp(loss.detach().float())}, flops)
