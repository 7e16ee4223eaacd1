"""Cross-attention masked language modelling (ERNIE-M §3.1, Figures 1c and 2).

A translation pair is laid out as in TLM (`<s> x </s> <s> y </s>`, positions reset per side, language
embeddings), but an attention mask makes a masked source token see only the target sentence (plus MASK
symbols, which carry position and language) and a masked target token see only the source sentence:

    L_CAMLM = L_CAMLM(src) + L_CAMLM(tgt),   L_CAMLM(src) = -Σ log Π_{m ∈ M_src} p(x_m | x / (M ∪ X_src))

The paper leaves two things open, and its formulas and its worked example disagree on one of them:

1. Is the other side masked at the same time? The worked example, p(x_2 | M_2, y_4, y_5, y_6, y_7) while
   y_5 and y_6 are themselves masked (M_5, M_6), and p(y_5 | x_1, x_2, x_3, M_5, M_6) while x_2 is masked,
   shows each side predicted from the *intact* other side; so does the source formula x / (M_src ∪ X_src).
   The target formula x / (M ∪ X_tgt) instead drops the source's masked tokens, i.e. both sides masked in
   one input. Default (`joint_masking: false`): two views per pair, the first masks only the source, the
   second only the target, so every prediction sees the whole other sentence (the worked example, at twice
   TLM's compute). `joint_masking: true`: one view with both sides masked (TLM's compute); a MASK then sees
   only the other side's unmasked tokens (the target formula).
2. Does a MASK see the other MASK symbols of its own side? The example p(y_5 | x_1, x_2, x_3, M_5, M_6)
   says yes; MASK symbols carry no token content, only position and language. Default `see_own_masks:
   true`; false lets a MASK see only itself (and the other side).

Leak-freedom over several layers also fixes what the *unmasked* tokens see: each sees only the unmasked
tokens of its own sentence. If the target tokens could read the source, a source MASK would read its own
sentence two layers up (M_2 -> y_4 -> x_1), which the paper's probabilities exclude. Predicted positions
always hold MASK (no 80/10/10 split): a kept token would hand a prediction its own answer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from polyalign.data.layout import pair_layout
from polyalign.data.masking import IGNORE
from polyalign.data.streams import ParallelBatch
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.model import MaskedLanguageModel
from polyalign.model.ernie_m import camlm_attention_mask
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs
from polyalign.objectives.mlm import masked_batch, masked_lm_loss


@dataclass
class CAMLMConfig:
    mask_prob: float = 0.15
    """Share of each masked side's (non-special) tokens chosen as prediction targets, all replaced by MASK."""
    joint_masking: bool = False
    """False: two views per pair (source masked, then target masked), each predicted from the intact other
    side, as in the paper's worked example. True: one view with both sides masked (TLM's compute)."""
    see_own_masks: bool = True
    """A MASK also sees the other MASK symbols of its own sentence (position and language only), as in
    p(y_5 | x_1, x_2, x_3, M_5, M_6); False: only itself."""

    @property
    def replace_probs(self) -> tuple[float, float, float]:
        return (1.0, 0.0, 0.0)  # always MASK: see the module docstring


class CAMLM(Objective):
    stream = "parallel"
    Config = CAMLMConfig

    def make_batch(self, raw: ParallelBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        languages = (raw.source_languages, raw.target_languages) if self.uses_languages else (None, None)
        layout = pair_layout(raw.source, raw.target, *languages, self.special, "xlm")
        if self.config.joint_masking:
            return masked_batch(layout, self.special, self.config, rng)
        # Two views of each pair: rows [0, B) predict source tokens, rows [B, 2B) predict target tokens.
        views = [
            masked_batch(
                dataclasses.replace(layout, maskable=layout.maskable & (layout.segment == side)),
                self.special,
                self.config,
                rng,
            )
            for side in (0, 1)
        ]
        return {k: torch.cat([v[k] for v in views]) for k in views[0]}  # each (2B, T)

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        labels = batch["labels"]
        mask = camlm_attention_mask(batch["segment"], labels != IGNORE, self.config.see_own_masks)
        hidden = model(**{**model_inputs(batch), "attention_mask": mask}).last_hidden_state
        # One mean over both sides' targets = (L_CAMLM(src) + L_CAMLM(tgt)) / number of targets.
        loss, accuracy, n = masked_lm_loss(model, hidden, batch)
        B, T = labels.shape
        flops = training_flops(encoder_forward_flops(model.config, B, T) + mlm_head_forward_flops(model.config, n))
        return ObjectiveOutput(loss, {"accuracy": accuracy}, flops)
