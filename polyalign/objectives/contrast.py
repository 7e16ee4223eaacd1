"""Sentence-level contrast on translation pairs: in-batch translation ranking (dual encoder).

Both sides of every pair go through the same encoder; a sentence is the mean of its tokens' states at one
layer (the pooling XTREME retrieves with), so training and evaluation use one representation. Each source
must rank its own translation above every other target in the batch, and each target its source: a
symmetric InfoNCE with in-batch negatives (LaBSE, Feng et al. 2022, Eq. 1-2), optionally with LaBSE's
additive margin subtracted from the positive pair's cosine. This is PPA's sentence alignment (§2.1) with
in-batch negatives instead of a momentum queue: no stale keys, so it learns from a randomly initialised
model as well as from a pre-trained one. Batches of one language pair (`data.parallel.one_pair_per_batch`)
give harder negatives: the model cannot tell a translation by its script alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from polyalign.data.layout import pair_layout, sentence_layout
from polyalign.data.packing import pack_batch
from polyalign.data.streams import ParallelBatch
from polyalign.flops import encoder_forward_flops, training_flops
from polyalign.model import MaskedLanguageModel
from polyalign.model.pooling import POOLINGS, pool, pool_examples
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs

TARGET = "target_"  # batch entries of the target side; the source side is bare


@dataclass
class ContrastConfig:
    temperature: float = 0.05
    """tau: cosines are divided by it before the softmax (LaBSE and PPA use 0.05-ish scales)."""
    margin: float = 0.0
    """LaBSE's additive margin m: the positive's cosine counts as cos - m (0.3 in LaBSE; 0 = plain InfoNCE)."""
    pooling: str = "mean"
    """`mean` over real tokens (XTREME's sentence vector) or the `first` token's state (PPA §2.1)."""
    layer: int = -1
    """Which hidden state is pooled: 0 = embeddings, L = last layer; negative counts from the top."""

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"contrast temperature={self.temperature}: must be > 0")
        if not 0.0 <= self.margin < 2.0:
            raise ValueError(f"contrast margin={self.margin}: must lie in [0, 2)")
        if self.pooling not in POOLINGS:
            raise ValueError(f"contrast pooling={self.pooling!r}: use one of {POOLINGS}")


# ---------------------------------------------------------------------------------------------------------
# The math, as pure functions


def translation_ranking_loss(
    source: torch.Tensor, target: torch.Tensor, temperature: float, margin: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric in-batch InfoNCE (LaBSE Eq. 1-2): row i of `source` (B, D) matches row i of `target` and no
    other. Returns (loss averaged over both directions, share of rows ranking their translation first)."""
    s = F.normalize(source.float(), dim=-1)
    t = F.normalize(target.float(), dim=-1)
    cosines = s @ t.T  # (B, B): cosines[i, j] = cos(source i, target j)
    B = cosines.shape[0]
    logits = (cosines - margin * torch.eye(B, device=cosines.device)) / temperature
    labels = torch.arange(B, device=cosines.device)
    loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
    with torch.no_grad():
        accuracy = ((cosines.argmax(1) == labels).float().mean() + (cosines.argmax(0) == labels).float().mean()) / 2
    return loss, accuracy


# ---------------------------------------------------------------------------------------------------------


class SentenceContrast(Objective):
    stream = "parallel"
    Config = ContrastConfig
    leaves_parameters_unused = ("lm_head",)  # it reads pooled hidden states only
    reads_packed_rows = True  # each side of a pair its own example in the pair's place, pooled per example

    def make_batch(self, raw: ParallelBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        # Each side padded on its own (one encoder pass per side: two passes of B rows run faster on a CPU
        # than one of 2B, and pad less). No language ids: the sentence vectors must not be told the language.
        batch = sentence_layout(raw.source, None, self.special).tensors()
        batch |= {TARGET + k: v for k, v in sentence_layout(raw.target, None, self.special).tensors().items()}
        return batch

    def make_training_batch(self, raw: ParallelBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """Packed: pair b's place in its row holds `<s> x </s> <s> y </s>`, positions restarting at y, x as
        example 2b and y as 2b + 1, so that one encoder pass reads each side alone, as unpacked."""
        if raw.packing is None:
            return self.make_batch(raw, rng)
        pairs = pair_layout(raw.source, raw.target, None, None, self.special)
        batch = pack_batch(pairs.tensors(), raw.packing, self.special.pad)
        batch["example_ids"] = torch.where(batch["example_ids"] >= 0, 2 * batch["example_ids"] + batch["segment"], -1)
        batch["pairs"] = torch.arange(len(raw.source))  # (B,): how many sentence vectors each side has
        return batch

    def hidden_states(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        layer = self.config.layer % (model.config.num_layers + 1)
        out = model(**model_inputs(batch), output_hidden_states=layer != model.config.num_layers)
        return out.last_hidden_state if out.hidden_states is None else out.hidden_states[layer]

    def sentence_vectors(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return pool(self.hidden_states(model, batch), batch["attention_mask"], self.config.pooling)  # (B, C)

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        if "example_ids" in batch:  # packed: both sides in one pass
            B = batch["pairs"].shape[0]
            hidden = self.hidden_states(model, batch)
            vectors = pool_examples(hidden, batch["example_ids"], 2 * B, self.config.pooling).view(B, 2, -1)
            source, target = vectors.unbind(1)  # (B, C) each
            flops = training_flops(encoder_forward_flops(model.config, *batch["input_ids"].shape))
        else:
            target_batch = {k[len(TARGET) :]: v for k, v in batch.items() if k.startswith(TARGET)}
            source = self.sentence_vectors(model, batch)
            target = self.sentence_vectors(model, target_batch)
            flops = training_flops(
                encoder_forward_flops(model.config, *batch["input_ids"].shape)
                + encoder_forward_flops(model.config, *target_batch["input_ids"].shape)
            )
        # fp32 outside autocast: with tau = 0.05, bf16 cosines (3 significant digits) would blur the ranking.
        with torch.autocast(source.device.type, enabled=False):
            loss, accuracy = translation_ranking_loss(source, target, self.config.temperature, self.config.margin)
        return ObjectiveOutput(loss, {"accuracy": accuracy}, flops)
