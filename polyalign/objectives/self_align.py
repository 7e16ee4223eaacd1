"""Alignment self-training on translation pairs (awesome-align's self-training objective, Dou & Neubig 2021 §2.2).

Each side of a pair is encoded on its own, unmasked, as the aligner's `separate` encoding reads it. At one layer,
the token similarity S = h_x h_y^T gives two distributions: each source token over the target tokens
(softmax over a row) and each target token over the source tokens (softmax over a column). The model labels
its own alignments from S and is trained to make both distributions put their mass on them:

    L = -(1 / 2|A|) sum_ij A_ij (log P_xy[i, j] + log P_yx[i, j])

awesome-align labels A with thresholded softmaxes and maximises the probabilities themselves; `labels: argmax`
(the default) labels the mutual argmax of the cosines instead, which is exactly the `argmax` extraction that
`polyalign align --method argmax` (SimAlign) reads, so training sharpens what the aligner extracts. With a
1e-3 threshold and log-probabilities, labels grew until every cell was one (a probe from multilingual-e5-small):
the threshold rule keeps awesome-align's probability loss for that reason.
The encoder runs only up to the alignment layer: the layers above get no gradient and are not computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from polyalign.align.extract import cosine_similarity, mutual_argmax
from polyalign.data.layout import sentence_layout
from polyalign.data.streams import ParallelBatch
from polyalign.flops import encoder_forward_flops, training_flops
from polyalign.model import MaskedLanguageModel
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs

TARGET = "target_"  # batch entries of the target side; the source side is bare
LABELS = ("argmax", "softmax")


@dataclass
class SelfAlignConfig:
    layer: int = 0
    """Hidden state that is aligned (0 = SimAlign's and awesome-align's layer 8 of 12, scaled to the depth)."""
    labels: str = "argmax"
    """`argmax`: mutual argmax of the cosines (SimAlign's argmax); `softmax`: both softmaxes above `threshold`
    (awesome-align), trained with its probability loss."""
    threshold: float = 1e-3
    """awesome-align's threshold c on both softmaxes (`labels: softmax` only)."""
    allow_cold_start: bool = False
    """Train from a random model anyway (its self-labels are then noise)."""

    def __post_init__(self) -> None:
        if self.labels not in LABELS:
            raise ValueError(f"self_align labels={self.labels!r}: use one of {LABELS}")
        if not 0 < self.threshold < 1:
            raise ValueError(f"self_align threshold={self.threshold}: must lie in (0, 1)")
        if self.layer < 0:
            raise ValueError(f"self_align layer={self.layer}: 0 (the default rule) or a layer number")


def alignment_layer(num_layers: int) -> int:
    """SimAlign's and awesome-align's layer: 8 of 12, i.e. two thirds up, rounded up (4 of 6, 3 of 4)."""
    return max(1, -(-2 * num_layers // 3))


# ---------------------------------------------------------------------------------------------------------
# The math, as pure functions


def self_labels(source: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, how: str, threshold: float):
    """Self-labelled links (B, n, m) from token states (B, n, C), (B, m, C), computed without gradient."""
    with torch.no_grad():
        if how == "argmax":
            forward, backward = mutual_argmax(cosine_similarity(source, target), mask)
            return forward & backward
        log_xy, log_yx = directional_log_probs(source.float() @ target.float().transpose(-1, -2), mask)
        return (log_xy.exp() > threshold) & (log_yx.exp() > threshold) & mask


def directional_log_probs(scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax of (B, n, m) scores over target tokens (rows) and over source tokens (columns), masked."""
    s = scores.masked_fill(~mask, float("-inf"))
    log_xy = torch.log_softmax(s, dim=-1).masked_fill(~mask, 0.0)  # a fully masked row gives NaN: zeroed
    log_yx = torch.log_softmax(s, dim=-2).masked_fill(~mask, 0.0)
    return log_xy, log_yx


def self_alignment_loss(
    source: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor, how: str
) -> torch.Tensor:
    """Loss of the labelled links under both directional softmaxes of S = h_x h_y^T (awesome-align Eq. 2):
    mean negative log-probability (`argmax` labels) or negative probability (`softmax` labels)."""
    log_xy, log_yx = directional_log_probs(source.float() @ target.float().transpose(-1, -2), mask)
    a = labels.float()
    gained = a * (log_xy.exp() + log_yx.exp() if how == "softmax" else log_xy + log_yx) / 2
    return -gained.sum() / a.sum().clamp(min=1.0)


# ---------------------------------------------------------------------------------------------------------


class SelfAlign(Objective):
    stream = "parallel"
    Config = SelfAlignConfig
    # The MLM head, and the layers above the alignment layer (which depend on the depth: DDP finds them once
    # it looks for unused parameters, which this declaration switches on).
    leaves_parameters_unused = ("lm_head",)
    needs_pretrained_start = "awesome-align fine-tunes a pre-trained encoder: a random one labels noise"

    def make_batch(self, raw: ParallelBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        # Each side padded on its own, no language ids: the aligner's `separate` encoding.
        batch = {}
        for prefix, side in (("", raw.source), (TARGET, raw.target)):
            layout = sentence_layout(side, None, self.special)
            tensors = layout.tensors() | {"content": torch.from_numpy(layout.maskable)}
            batch |= {prefix + k: v for k, v in tensors.items() if k != "segment"}
        return batch

    def layer(self, num_layers: int) -> int:
        return min(self.config.layer or alignment_layer(num_layers), num_layers)

    def token_states(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor], layer: int):
        """Content-token states (B, n, C) of `<s> x </s>` rows at `layer` and their mask (B, n)."""
        hidden = model(**model_inputs(batch), output_hidden_states=True, num_layers=layer).hidden_states[layer]
        return hidden[:, 1:], batch["content"][:, 1:]  # content tokens start right after <s>

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        layer = self.layer(model.config.num_layers)
        target_batch = {k[len(TARGET) :]: v for k, v in batch.items() if k.startswith(TARGET)}
        source, s_mask = self.token_states(model, batch, layer)
        target, t_mask = self.token_states(model, target_batch, layer)
        mask = s_mask[:, :, None] & t_mask[:, None, :]  # (B, n, m)
        with torch.autocast(source.device.type, enabled=False):  # softmaxes over long rows in fp32
            labels = self_labels(source, target, mask, self.config.labels, self.config.threshold)
            loss = self_alignment_loss(source, target, mask, labels, self.config.labels)
        links_per_token = labels.sum() / s_mask.sum().clamp(min=1)
        depth = layer / model.config.num_layers  # only the layers up to the alignment layer run
        flops = training_flops(
            depth * encoder_forward_flops(model.config, *batch["input_ids"].shape)
            + depth * encoder_forward_flops(model.config, *target_batch["input_ids"].shape)
        )
        return ObjectiveOutput(loss, {"links_per_token": links_per_token.detach()}, flops)
