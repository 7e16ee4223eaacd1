"""VECO's two streams over a pair, and plugging its cross-attention out (NLU transfer) or in (§3.1).

A batch of pairs is stacked: rows [0, B) hold x and rows [B, 2B) hold y, all padded to one length, so each
row's partner is the row half a batch away. The encoder's cross-attention sublayers (EncoderConfig
`cross_attention: true`) run only when memory states are passed in; every layer reads the same memory, the
partner's last-layer states H^L (§2.2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel


def swap_halves(t: torch.Tensor) -> torch.Tensor:
    """(2B, ...) -> (2B, ...) with the two halves exchanged: row r's partner moves to row r."""
    B = t.shape[0] // 2
    return torch.cat([t[B:], t[:B]])


@dataclass
class TwoStreams:
    own: torch.Tensor
    """H^L (2B, T, C): self-attention only, each sequence sees its own context (VECO Eqs. 2-5)."""
    paired: torch.Tensor
    """S^L (2B, T, C): self-attention, then cross-attention to the partner's last layer H^L (Eqs. 6-9)."""
    own_states: tuple[torch.Tensor, ...]
    """H^0 .. H^L, the embeddings and every layer's output of the own stream."""


def two_streams(
    model: MaskedLanguageModel, inputs: dict[str, torch.Tensor], stop_gradient: bool = True, x_only: bool = False
) -> TwoStreams:
    """Both VECO representations of a stacked pair batch (rows [0, B) = x, [B, 2B) = y).

    Every layer l of the paired stream takes queries from S^(l-1) and keys and values from the partner's
    last layer H^L (§2.2: "the keys and values come from the last layer's representations of paired input").
    With `stop_gradient` (pre-training, §2.2) H^L is a constant inside the paired terms, so their gradient
    never runs through the 2L-layer path own stream -> paired stream. With `x_only` the paired stream is computed
    for x's rows alone, S^L (B, T, C): inference that scores the inputs saves a quarter of the work.
    """
    own = model(**inputs, output_hidden_states=True)
    memory = swap_halves(own.last_hidden_state)  # (2B, T, C): the partner's H^L
    if stop_gradient:
        memory = memory.detach()
    mask = inputs.get("attention_mask")  # absent for a batch without padding (the loader drops it: flash)
    memory_mask = None if mask is None else swap_halves(mask)
    if x_only:
        B = memory.shape[0] // 2
        inputs, memory = {k: v[:B] for k, v in inputs.items()}, memory[:B]
        memory_mask = None if memory_mask is None else memory_mask[:B]
    paired = model(**inputs, memory=memory, memory_mask=memory_mask)
    return TwoStreams(own.last_hidden_state, paired.last_hidden_state, own.hidden_states)


# ---------------------------------------------------------------------------------------------------------
# Plug-out (§3.1): the encoder without its cross-attention, an ordinary polyalign model


def is_cross_attention_weight(name: str) -> bool:
    return ".cross_attention." in name or ".cross_attention_norm." in name


def plug_out(model: MaskedLanguageModel) -> MaskedLanguageModel:
    """The same encoder and MLM head without the cross-attention sublayers (a copy; `model` is untouched)."""
    config = dataclasses.replace(model.config, cross_attention=False)
    plain = MaskedLanguageModel(config)
    kept = {k: v for k, v in model.state_dict().items() if not is_cross_attention_weight(k)}
    plain.load_state_dict(kept, strict=True)
    return plain.train(model.training)


# ---------------------------------------------------------------------------------------------------------
# Plug-in (§3.1): with a translation y of every input x, classify from [H^L_x : S^L_x]

PLUG_IN_NEEDS_CROSS_ATTENTION = "plug-in fine-tuning needs a model with cross-attention (a VECO model)"


def stack_pair(x: dict[str, torch.Tensor], y: dict[str, torch.Tensor], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad x (B, Tx) and y (B, Ty) model inputs to one length and stack them into (2B, T)."""
    T = max(x["input_ids"].shape[1], y["input_ids"].shape[1])
    out = {}
    for key in x:
        value = pad_id if key == "input_ids" else 0  # attention_mask pads with False, ids of any kind with 0
        out[key] = torch.cat([F.pad(t[key], (0, T - t[key].shape[1]), value=value) for t in (x, y)])
    return out


def plug_in_features(
    model: MaskedLanguageModel, x: dict[str, torch.Tensor], y: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token features [H^L : S^L] for x (B, Tx, 2C) and for y (B, Ty, 2C); gradients flow everywhere."""
    B, Tx, Ty = x["input_ids"].shape[0], x["input_ids"].shape[1], y["input_ids"].shape[1]
    streams = two_streams(model, stack_pair(x, y, model.config.pad_token_id), stop_gradient=False)
    features = torch.cat([streams.own, streams.paired], dim=-1)  # (2B, T, 2C)
    return features[:B, :Tx], features[B:, :Ty]


class PlugInClassifier(nn.Module):
    """Sentence(-pair) classification with the cross-attention plugged in: a linear layer on the first
    token's [H^L : S^L]. forward(x, y) returns logits for x and for y, (B, num_labels) each."""

    def __init__(self, model: MaskedLanguageModel, num_labels: int, dropout: float = 0.1):
        super().__init__()
        if not model.config.cross_attention:
            raise ValueError(PLUG_IN_NEEDS_CROSS_ATTENTION)
        self.model = model
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * model.config.hidden_size, num_labels)

    def forward(self, x: dict[str, torch.Tensor], y: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        features_x, features_y = plug_in_features(self.model, x, y)
        return self.classifier(self.dropout(features_x[:, 0])), self.classifier(self.dropout(features_y[:, 0]))


class PlugInEncoder(nn.Module):
    """The fine-tuning representation with the cross-attention plugged in (§3.1), for the task loop: a stacked
    pair batch (rows [0, B) the inputs, [B, 2B) their translations, as `two_streams` takes) -> [H^L : S^L]
    (2B, T, 2C) for every row, so a head predicts the label of x from x's rows and of y from y's."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        if not encoder.config.cross_attention:
            raise DataError(PLUG_IN_NEEDS_CROSS_ATTENTION)
        self.encoder = encoder
        self.output_size = 2 * encoder.config.hidden_size

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids", "language_ids") if k in batch}
        # Inference reads the inputs' rows [0, B) only (the task's outputs): their partners' paired stream is left
        # as zeros.
        streams = two_streams(self.encoder, inputs, stop_gradient=False, x_only=not self.training)
        paired = streams.paired
        if not self.training:
            paired = torch.cat([paired, torch.zeros_like(paired)])
        return torch.cat([streams.own, paired], dim=-1)
