"""Masked language modelling on monolingual text (BERT; XLM §3.3; XLM-R)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from polyalign.data.layout import Layout, sentence_layout
from polyalign.data.masking import IGNORE, mask_tokens
from polyalign.data.streams import MonoBatch
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.model import MaskedLanguageModel
from polyalign.model.losses import cross_entropy, linear_cross_entropy, pad_rows
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs


@dataclass
class MLMConfig:
    mask_prob: float = 0.15
    """Share of (non-special) tokens chosen as prediction targets."""
    replace_probs: tuple[float, float, float] = (0.8, 0.1, 0.1)
    """Of the chosen tokens: replaced by MASK / by a random token / kept."""


ACCURACY_SAMPLE = 512


FUSED_ON_CPU = False
"""Whether `masked_lm_loss` takes the fused linear + cross-entropy on a CPU too. Off: there the chunked path
runs at less than half the plain path's speed (measured per step part) and the logits' memory is no
constraint; on a GPU the fused path saves the (N, V) logits, their fp32 softmax and their gradient."""


def masked_lm_loss(model: MaskedLanguageModel, hidden: torch.Tensor, labels: torch.Tensor):
    """Cross-entropy of the MLM head, computed only at labelled positions. Returns (loss, accuracy, count);
    accuracy is measured on the first ACCURACY_SAMPLE targets."""
    if hidden.device.type == "cpu" and not FUSED_ON_CPU:
        return masked_lm_logits_and_loss(model, hidden, labels)[1:]
    targets = labels != IGNORE
    gold = labels[targets]
    head, V = model.lm_head, model.config.vocab_size
    features = head.features(pad_rows(hidden[targets]))  # (N padded, E); rows padded as below
    weight, bias = head.decoder.weight, head.decoder.bias  # (padded V, E), (padded V,)
    loss = linear_cross_entropy(features, weight, bias, pad_rows(gold, value=IGNORE), V)
    n = int(gold.numel())
    with torch.no_grad():
        k = min(n, ACCURACY_SAMPLE)
        accuracy = (F.linear(features[:k], weight[:V], bias[:V]).argmax(-1) == gold[:k]).float().mean()
    return loss, accuracy, n


def masked_lm_logits_and_loss(model: MaskedLanguageModel, hidden: torch.Tensor, labels: torch.Tensor):
    """masked_lm_loss that also returns the (N, V) logits at the labelled positions, in row-major order
    (an ELECTRA generator samples replacements from them): (logits, loss, accuracy, count)."""
    targets = labels != IGNORE
    gold = labels[targets]
    # The head runs only where there is a target; rows are padded to a fixed multiple (see pad_rows).
    logits = model.mlm_logits(pad_rows(hidden[targets]))  # (N padded, V)
    loss = cross_entropy(logits, pad_rows(gold, value=IGNORE))
    n = int(gold.numel())
    with torch.no_grad():  # a full argmax over (N, V) costs as much as a layer; 512 targets estimate it well
        k = min(n, ACCURACY_SAMPLE)
        # fp32: a CPU argmax over bf16 is ~4x slower than converting first
        accuracy = (logits[:k].float().argmax(-1) == gold[:k]).float().mean()
    return logits[:n], loss, accuracy, n


def masked_batch(layout: Layout, special, config: MLMConfig, rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """Mask a laid-out batch and return its tensors with `labels`."""
    corrupted, labels = mask_tokens(
        layout.input_ids,
        layout.maskable,
        rng,
        special.mask,
        (special.first_normal, special.vocab_size),
        config.mask_prob,
        tuple(config.replace_probs),
    )
    batch = layout.tensors()
    batch["input_ids"] = torch.from_numpy(corrupted)
    batch["labels"] = torch.from_numpy(labels)
    return batch


def monolingual_batch(
    raw: MonoBatch, special, config: MLMConfig, uses_languages: bool, rng: np.random.Generator
) -> dict[str, torch.Tensor]:
    """MLM's batch: each sentence laid out alone (`<s> x </s>`, with its language id when the model has them),
    masked."""
    layout = sentence_layout(raw.sentences, raw.languages if uses_languages else None, special)
    return masked_batch(layout, special, config, rng)


def masked_lm_output(model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
    """MLM's forward on any masked batch (TLM's too): the loss at the labelled positions, accuracy, FLOPs."""
    hidden = model(**model_inputs(batch)).last_hidden_state
    loss, accuracy, n = masked_lm_loss(model, hidden, batch["labels"])
    B, T = batch["input_ids"].shape
    flops = training_flops(encoder_forward_flops(model.config, B, T) + mlm_head_forward_flops(model.config, n))
    return ObjectiveOutput(loss, {"accuracy": accuracy}, flops)


class MLM(Objective):
    stream = "mono"
    Config = MLMConfig
    reads_packed_rows = True  # a loss per token, wherever its example lies

    def make_batch(self, raw: MonoBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        return monolingual_batch(raw, self.special, self.config, self.uses_languages, rng)

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        return masked_lm_output(model, batch)
