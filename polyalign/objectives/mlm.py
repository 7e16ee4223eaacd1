"""Masked language modelling on monolingual text (BERT; XLM §3.3; XLM-R)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from polyalign.data.layout import Layout, sentence_layout
from polyalign.data.masking import mask_tokens, masked_targets
from polyalign.data.streams import MonoBatch
from polyalign.flops import encoder_forward_flops, encoder_model_flops, mlm_head_forward_flops, training_flops
from polyalign.model import MaskedLanguageModel
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs


@dataclass
class MLMConfig:
    mask_prob: float = 0.15
    """Share of (non-special) tokens chosen as prediction targets."""
    replace_probs: tuple[float, float, float] = (0.8, 0.1, 0.1)
    """Of the chosen tokens: replaced by MASK / by a random token / kept."""


def masked_targets_of(batch_or_labels) -> dict:
    """The batch's prediction targets as the step reads them (`masked_index`, `masked_labels`, `masked_count`; see
    `polyalign.data.masking.masked_targets`): those the loader built with the batch, or, given bare labels or a
    batch made outside the loader, built here (on a GPU that waits for the device once)."""
    if isinstance(batch_or_labels, dict) and "masked_index" in batch_or_labels:
        return batch_or_labels
    labels = batch_or_labels["labels"] if isinstance(batch_or_labels, dict) else batch_or_labels
    targets = masked_targets(labels.cpu())
    return {k: v.to(labels.device) if torch.is_tensor(v) else v for k, v in targets.items()}


def masked_lm_loss(model: MaskedLanguageModel, hidden: torch.Tensor, targets, return_logits: bool = False):
    """Cross-entropy of the MLM head at the batch's prediction targets (`targets`: the batch, or its labels):
    (loss, accuracy, count), with the head's logits at the targets first when `return_logits` (an ELECTRA
    generator samples replacements from them). Accuracy is measured on the first ACCURACY_SAMPLE targets."""
    t = masked_targets_of(targets)
    index, labels = t["masked_index"], t["masked_labels"]
    # the target count changes every batch: a compiled head takes it as a symbolic size from its first graph on
    torch._dynamo.maybe_mark_dynamic(index, 0)
    torch._dynamo.maybe_mark_dynamic(labels, 0)
    out = model.lm_head.masked_loss(hidden, index, labels, return_logits)
    return (out[2], *out[:2], t["masked_count"]) if return_logits else (*out, t["masked_count"])


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
    loss, accuracy, n = masked_lm_loss(model, hidden, batch)
    B, T = batch["input_ids"].shape
    head = mlm_head_forward_flops(model.config, n)
    flops = training_flops(encoder_forward_flops(model.config, B, T) + head)
    return ObjectiveOutput(loss, {"accuracy": accuracy}, flops, model_flops_of(model.config, batch, head))


def model_flops_of(config, batch: dict, head_forward: float) -> float | None:
    """Training FLOPs of the encoder's useful work on `batch` (its real tokens and attention inside each example,
    which the loader counted: `real_tokens`, `attention_pairs`) plus a head's forward; None when not counted."""
    if "real_tokens" not in batch:
        return None
    return training_flops(encoder_model_flops(config, batch["real_tokens"], batch["attention_pairs"]) + head_forward)


class MLM(Objective):
    stream = "mono"
    Config = MLMConfig
    reads_packed_rows = True  # a loss per token, wherever its example lies

    def make_batch(self, raw: MonoBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        return monolingual_batch(raw, self.special, self.config, self.uses_languages, rng)

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        return masked_lm_output(model, batch)
