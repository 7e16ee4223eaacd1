"""Cross-attention masked language modelling, CA-MLM (VECO §2, Eq. 1).

For a pair (x, y) masked into (x̂, ŷ), the encoder builds two streams (polyalign.model.veco.two_streams):
H with self-attention only, and S whose layers also cross-attend to the partner's last layer H^L (§2.2).
The loss predicts the masked tokens of x and of y from each stream:
    L(x, y) = -log P(x | x̂) - log P(x | ŷ, x̂) - log P(y | ŷ) - log P(y | x̂, ŷ)
with H held constant inside the last two kinds of term (stop-gradient, §2.2). Pairs are translation pairs
(`ca_mlm`) or adjacent monolingual segments (`ca_mlm_adjacent`, §4 footnote 9); VECO alternates the two kinds
of batch and adds TLM on the parallel ones (recipe `veco`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from polyalign.data.layout import sentence_layout
from polyalign.data.streams import ParallelBatch
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.model import MaskedLanguageModel
from polyalign.model.veco import two_streams
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs
from polyalign.objectives.mlm import MLMConfig, masked_batch, masked_lm_loss
from polyalign.schema import RecipeError


@dataclass
class CrossAttentionMLMConfig(MLMConfig):
    stop_gradient: bool = True
    """Treat H as a constant in the paired-context terms (VECO §2.2: faster, and stabler for post-LN)."""


class CrossAttentionMLM(Objective):
    stream = "parallel"
    Config = CrossAttentionMLMConfig

    def setup(self, model: MaskedLanguageModel) -> None:
        if not model.config.cross_attention:
            raise RecipeError(
                "model.cross_attention", "CA-MLM reads the cross-attention sublayers: set model.cross_attention: true"
            )

    def make_batch(self, raw: ParallelBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """x and y as separate `<s> s </s>` rows, stacked: rows [0, B) are x, rows [B, 2B) their partners y."""
        languages = np.concatenate([raw.source_languages, raw.target_languages]) if self.uses_languages else None
        layout = sentence_layout(list(raw.source) + list(raw.target), languages, self.special)
        return masked_batch(layout, self.special, self.config, rng)

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        streams = two_streams(model, model_inputs(batch), stop_gradient=self.config.stop_gradient)
        # Eq. (1): terms 1 and 3 from H (own context), terms 2 and 4 from S (paired context); x and y are rows
        # of one batch, so each call covers the x term and the y term together.
        own_loss, own_accuracy, n = masked_lm_loss(model, streams.own, batch)
        paired_loss, paired_accuracy, _ = masked_lm_loss(model, streams.paired, batch)
        B2, T = batch["input_ids"].shape
        flops = training_flops(
            encoder_forward_flops(model.config, B2, T)
            + encoder_forward_flops(model.config, B2, T, memory_length=T)
            + 2 * mlm_head_forward_flops(model.config, n)
        )
        metrics = {
            "own_loss": own_loss.detach(),
            "paired_loss": paired_loss.detach(),
            "own_accuracy": own_accuracy,
            "paired_accuracy": paired_accuracy,
        }
        return ObjectiveOutput(own_loss + paired_loss, metrics, flops)


class AdjacentCrossAttentionMLM(CrossAttentionMLM):
    """CA-MLM on two adjacent segments of monolingual text (VECO §4, footnote 9)."""

    stream = "adjacent"
