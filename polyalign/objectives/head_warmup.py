"""MLM heads trained alone over frozen encoders: what a start without a trained MLM head trains first, so that a
random head's gradients do not rewrite the encoder in the objectives' first steps (see polyalign/train's head
warm-up). Which heads is asked of the objectives (`Objective.mlm_heads`); no objective is named."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from polyalign.data.streams import MonoBatch
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.model import MaskedLanguageModel
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs
from polyalign.objectives.mlm import MLMConfig, masked_lm_loss, monolingual_batch


class HeadMLM(Objective):
    """MLM at every head in `heads` (name -> the model it tops) on one masked batch of monolingual text, each
    encoder run without a graph (the trainer lets the heads' own parameters alone take a gradient:
    `head_parameters`). Its loss is their sum; each head's loss and accuracy are logged under its name. The heads
    are held, not registered: this module owns no parameters (a checkpoint of the module it joins is unchanged)."""

    stream = "mono"
    Config = MLMConfig

    def __init__(self, heads: dict[str, MaskedLanguageModel], special, languages: list[str]):
        super().__init__(MLMConfig(), special, next(iter(heads.values())).config, languages)
        self.heads = dict(heads)  # a plain dict: no second path to the heads' parameters

    def make_batch(self, raw: MonoBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        return monolingual_batch(raw, self.special, self.config, self.uses_languages, rng)

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        loss, metrics, flops = 0.0, {}, 0.0
        B, T = batch["input_ids"].shape
        for name, lm in self.heads.items():
            with torch.no_grad():  # the encoder is frozen: no graph through it
                hidden = lm(**model_inputs(batch)).last_hidden_state
            head_loss, accuracy, n = masked_lm_loss(lm, hidden, batch)
            loss = loss + head_loss
            metrics |= {f"{name}/loss": head_loss.detach(), f"{name}/accuracy": accuracy}
            flops += encoder_forward_flops(lm.config, B, T) + training_flops(mlm_head_forward_flops(lm.config, n))
        return ObjectiveOutput(loss, metrics, flops)


def head_warmup_objective(objectives: dict[str, Objective], model: MaskedLanguageModel) -> HeadMLM | None:
    """What trains the MLM heads the objectives read (each says which: `mlm_heads`) alone: a HeadMLM over them
    all, on the first objective's tokens and languages; None when none reads a head."""
    heads: dict[str, MaskedLanguageModel] = {}
    for objective in objectives.values():
        heads |= objective.mlm_heads(model)
    if not heads:
        return None
    first = next(iter(objectives.values()))
    return HeadMLM(heads, first.special, first.languages)


def head_parameters(heads: dict[str, MaskedLanguageModel]) -> list[nn.Parameter]:
    """The heads' own parameters: not the decoder weight, which is tied to the (frozen) word embeddings."""
    tied = {id(lm.encoder.embeddings.word.weight) for lm in heads.values()}
    found = {id(p): p for lm in heads.values() for p in lm.lm_head.parameters() if id(p) not in tied}
    return list(found.values())
