"""A sequence-to-sequence Transformer that a VECO encoder initialises completely (VECO §3.2, Figure 3).

The encoder is the VECO encoder with its cross-attention plugged out. The decoder has the same layers:
self-attention (made causal) and feed-forward from the VECO layers, encoder-decoder attention from their
cross-attention modules. It is a standard encoder-decoder: every decoder layer attends to the encoder's final
output, which is also how the cross-attention was pre-trained (keys and values from the partner's last layer
H^L, §2.2). Embeddings are shared by encoder and decoder, and the output layer is the tied MLM head, so
nothing in the model starts untrained.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from polyalign.model import VOCABULARY_KEYS, MaskedLanguageModel
from polyalign.model.encoder import Encoder, EncoderConfig
from polyalign.model.heads import MaskedLMHead
from polyalign.model.veco import is_cross_attention_weight
from polyalign.model.vocabulary import keep_vocabulary_in_state_dicts


def seq2seq_state_from_veco(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map a VECO MaskedLanguageModel state dict onto Seq2SeqTransformer names: `encoder.*` without the
    cross-attention for the encoder, every `encoder.*` (cross-attention included) again for the decoder,
    `lm_head.*` unchanged."""
    out = {}
    for name, value in state.items():
        if name.startswith("encoder."):
            if not is_cross_attention_weight(name):
                out[name] = value
            out["decoder." + name.removeprefix("encoder.")] = value
        else:
            out[name] = value
    return out


def causal_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) padding mask -> (B, T, T): query i may see real keys j <= i."""
    T = attention_mask.shape[1]
    lower = torch.tril(torch.ones(T, T, dtype=torch.bool, device=attention_mask.device))
    return lower[None] & attention_mask[:, None, :].bool()


class Seq2SeqTransformer(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        if not config.cross_attention:
            raise ValueError("the decoder needs cross-attention sublayers: build from a config with cross_attention")
        self.config = config
        self.encoder = Encoder(dataclasses.replace(config, cross_attention=False))
        self.decoder = Encoder(config)
        self.decoder.embeddings = self.encoder.embeddings  # one vocabulary, one embedding table
        self.lm_head = MaskedLMHead(config, self.encoder.embeddings.word)
        keys = (*VOCABULARY_KEYS, "decoder.embeddings.word.weight")
        keep_vocabulary_in_state_dicts(self, keys, config.vocab_size, config.embedding_rows)

    @classmethod
    def from_encoder(cls, model: MaskedLanguageModel) -> Seq2SeqTransformer:
        """Initialise from a pre-trained encoder; decoder weights are copies, free to diverge. A VECO model
        (cross_attention on) fills every weight (§3.2); an encoder without cross-attention (XLM, MLM) leaves
        the encoder-decoder attention newly initialised, the usual way to start from such encoders."""
        seq2seq = cls(dataclasses.replace(model.config, cross_attention=True))
        missing, unexpected = seq2seq.load_state_dict(seq2seq_state_from_veco(model.state_dict()), strict=False)
        if unexpected or any(not is_cross_attention_weight(name) for name in missing):
            raise ValueError(f"weights do not map onto the seq2seq model: missing {missing}, unexpected {unexpected}")
        if model.config.cross_attention and missing:
            raise ValueError(f"a VECO model should fill every weight; missing {missing}")
        return seq2seq

    def encode(self, source: dict[str, torch.Tensor]) -> torch.Tensor:
        """The encoder's final output H^L (B, S, C): the memory every decoder layer attends to."""
        return self.encoder(**source).last_hidden_state

    def decode(self, memory: torch.Tensor, memory_mask: torch.Tensor, target: dict[str, torch.Tensor]) -> torch.Tensor:
        """Decoder states (B, T, C) for target inputs (`<s> y`), each position seeing only earlier ones."""
        inputs = {**target, "attention_mask": causal_mask(target["attention_mask"])}
        return self.decoder(**inputs, memory=memory, memory_mask=memory_mask).last_hidden_state

    def forward(self, source: dict[str, torch.Tensor], target: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.decode(self.encode(source), source["attention_mask"], target)

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits from the (pre-trained) MLM head, here predicting the next target token; the
        name lets `masked_lm_loss` score it."""
        return self.lm_head(hidden)

    @torch.no_grad()
    def greedy(
        self,
        source: dict[str, torch.Tensor],
        bos: int,
        eos: int,
        max_length: int,
        target_language: int | None = None,
    ) -> list[list[int]]:
        """Greedy decoding, one token per step for the whole batch; returns ids without bos/eos."""
        memory, memory_mask = self.encode(source), source["attention_mask"]
        B, device = source["input_ids"].shape[0], source["input_ids"].device
        ys = torch.full((B, 1), bos, dtype=torch.long, device=device)
        finished = torch.zeros(B, dtype=torch.bool, device=device)
        for _ in range(max_length):
            target = {"input_ids": ys, "attention_mask": torch.ones_like(ys, dtype=torch.bool)}
            if target_language is not None and self.config.num_languages:
                target["language_ids"] = torch.full_like(ys, target_language)
            next_token = self.mlm_logits(self.decode(memory, memory_mask, target)[:, -1]).argmax(-1)  # (B,)
            next_token = next_token.masked_fill(finished, eos)
            ys = torch.cat([ys, next_token[:, None]], dim=1)
            finished |= next_token == eos
            if finished.all():
                break
        out = []
        for row in ys[:, 1:].tolist():
            out.append(row[: row.index(eos)] if eos in row else row)
        return out
