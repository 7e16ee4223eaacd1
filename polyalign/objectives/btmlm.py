"""Back-translation masked language modelling (ERNIE-M §3.1, Figures 3 and 4).

Stage 1 (no gradient): append p = ratio·|x| placeholder MASK tokens to a monolingual sentence x, with the
language embedding of a target language and positions continuing after the sentence. Each placeholder sees
only the sentence and itself (Figure 4: p(y_5 | x_1..x_4, M_5)); the sentence sees only itself. The MLM
head's most likely ordinary token at each placeholder (or a sample) is its pseudo-token P.
Stage 2: the sentence, masked as in MLM, followed by its pseudo-tokens, is trained with MLM on the
sentence's masked tokens with full attention:  L_BTMLM = -Σ log Π_{m ∈ M} p(x_m | x / M, P).

Stage 1 reads the unmasked sentence, as in the paper (it generates from "the original monolingual
sentence"). The logged `perplexity` is exp of the stage-2 loss (ERNIE-M Figure 5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from polyalign.data.layout import Layout, sentence_layout
from polyalign.data.masking import IGNORE
from polyalign.data.streams import MonoBatch
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs
from polyalign.objectives.mlm import MLMConfig, masked_batch, masked_lm_loss
from polyalign.tokenizer import SpecialTokens

PLACEHOLDER = 1  # Layout.segment value of placeholder / pseudo-token columns (the sentence is 0)


@dataclass
class BTMLMConfig(MLMConfig):
    pseudo_ratio: float = 0.15
    """Placeholders appended per sentence token (at least one; 0 appends none). ERNIE-M Figure 5: 5-20%."""
    target_languages: list[str] | None = None
    """Languages to generate into, one drawn uniformly per sentence, never the sentence's own unless it is the
    only one listed; default: every language the model has an embedding for."""
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


def append_placeholders(base: Layout, targets: np.ndarray, counts: np.ndarray, sp: SpecialTokens) -> Layout:
    """After each row's `<s> x </s>`, counts[b] MASK placeholders with language targets[b] and positions
    running on; they have segment PLACEHOLDER and are not maskable. Returns a wider copy of `base`."""
    used = base.attention_mask.sum(1)  # (B,) real tokens of each row
    grow = ((0, 0), (0, int((used + counts).max()) - base.input_ids.shape[1]))
    out = Layout(
        input_ids=np.pad(base.input_ids, grow, constant_values=sp.pad),
        attention_mask=np.pad(base.attention_mask, grow),
        position_ids=np.pad(base.position_ids, grow),
        language_ids=np.pad(base.language_ids, grow),
        maskable=np.pad(base.maskable, grow),
        segment=np.pad(base.segment, grow, constant_values=-1),
    )
    for b, (start, n) in enumerate(zip(used, counts, strict=True)):
        cols = slice(start, start + n)
        out.input_ids[b, cols] = sp.mask
        out.attention_mask[b, cols] = True
        out.position_ids[b, cols] = np.arange(start, start + n)
        out.language_ids[b, cols] = targets[b]
        out.segment[b, cols] = PLACEHOLDER
    return out


def generation_attention_mask(segment: torch.Tensor) -> torch.Tensor:
    """(B, T, T) stage-1 mask (ERNIE-M Figure 4): sentence tokens see the sentence; a placeholder sees the
    sentence and itself. segment (B, T): 0 sentence, PLACEHOLDER, -1 padding."""
    sentence = (segment == 0)[:, None, :]  # (B, 1, T) keys
    real = (segment >= 0)[:, :, None]  # (B, T, 1) queries
    itself = torch.eye(segment.shape[1], dtype=torch.bool, device=segment.device)
    placeholder = (segment == PLACEHOLDER)[:, :, None]
    return real & (sentence | (placeholder & itself))


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

    def draw_targets(self, languages: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One target language per sentence, uniformly among the configured ones other than its own."""
        targets, out = self.target_ids(), np.empty_like(languages)
        for b, own in enumerate(languages):
            choices = targets[targets != own]
            out[b] = rng.choice(choices if len(choices) else targets)
        return out

    def make_batch(self, raw: MonoBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        base = sentence_layout(raw.sentences, raw.languages, self.special)
        # Stage-2 masking is drawn on the sentence alone, so it is MLM's exactly, whatever the ratio.
        masked = masked_batch(base, self.special, self.config, rng)  # (B, T0)
        targets = self.draw_targets(raw.languages, rng)
        counts = placeholder_counts(np.array([len(s) for s in raw.sentences]), self.config.pseudo_ratio)
        batch = append_placeholders(base, targets, counts, self.special).tensors()  # (B, T)
        batch["generation_ids"] = batch["input_ids"]  # stage 1 reads the unmasked sentence
        T0 = base.input_ids.shape[1]
        sentence = torch.from_numpy(base.attention_mask)  # (B, T0); placeholders of short rows fall in here too
        batch["input_ids"] = batch["input_ids"].clone()
        batch["input_ids"][:, :T0] = torch.where(sentence, masked["input_ids"], batch["input_ids"][:, :T0])
        batch["labels"] = torch.full_like(batch["input_ids"], IGNORE)
        batch["labels"][:, :T0] = masked["labels"]
        return batch

    @torch.no_grad()
    def generate(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Stage 1: (B, T) ids with every placeholder replaced by its pseudo-token; no gradient, eval mode."""
        placeholder = batch["segment"] == PLACEHOLDER
        inputs = {
            **model_inputs(batch),
            "input_ids": batch["generation_ids"],
            "attention_mask": generation_attention_mask(batch["segment"]),
        }
        was_training = model.training
        model.eval()
        try:
            hidden = model(**inputs).last_hidden_state
            logits = model.mlm_logits(hidden[placeholder]).float()  # (N, V)
        finally:
            model.train(was_training)
        logits[:, : self.special.first_normal] = float("-inf")  # pseudo-tokens are ordinary pieces
        if self.config.sampling:
            pseudo = torch.multinomial(torch.softmax(logits / self.config.temperature, -1), 1).squeeze(1)
        else:
            pseudo = logits.argmax(-1)
        ids = batch["input_ids"].clone()
        ids[placeholder] = pseudo
        return ids

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        B, T = batch["input_ids"].shape
        placeholders = int((batch["segment"] == PLACEHOLDER).sum())
        flops = encoder_forward_flops(model.config, B, T) + mlm_head_forward_flops(model.config, placeholders)
        ids = self.generate(model, batch) if placeholders else batch["input_ids"]
        hidden = model(**{**model_inputs(batch), "input_ids": ids}).last_hidden_state  # stage 2, full attention
        loss, accuracy, n = masked_lm_loss(model, hidden, batch["labels"])
        flops += training_flops(encoder_forward_flops(model.config, B, T) + mlm_head_forward_flops(model.config, n))
        return ObjectiveOutput(loss, {"accuracy": accuracy, "perplexity": torch.exp(loss.detach().float())}, flops)
