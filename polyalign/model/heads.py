"""Output heads that sit on the encoder."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from polyalign.model.encoder import EncoderConfig


class MaskedLMHead(nn.Module):
    """dense -> GELU -> LayerNorm -> vocabulary projection tied to the input embeddings (BERT, RoBERTa)."""

    def __init__(self, c: EncoderConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.embedding_width)
        self.norm = nn.LayerNorm(c.embedding_width, eps=c.layer_norm_eps)
        self.decoder = nn.Linear(c.embedding_width, c.vocab_size)
        self.decoder.weight = word_embeddings.weight  # tied
        nn.init.normal_(self.dense.weight, std=c.initializer_range)
        nn.init.zeros_(self.dense.bias)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, hidden):
        """hidden (N, C), usually only the masked positions -> logits (N, V)."""
        return self.decoder(self.norm(F.gelu(self.dense(hidden))))


class ReplacedTokenHead(nn.Module):
    """dense -> GELU -> one logit per token, "was this token replaced?" (ELECTRA's discriminator head)."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.logit = nn.Linear(c.hidden_size, 1)
        for linear in (self.dense, self.logit):
            nn.init.normal_(linear.weight, std=c.initializer_range)
            nn.init.zeros_(linear.bias)

    def forward(self, hidden):
        """hidden (B, T, C) -> logits (B, T)."""
        return self.logit(F.gelu(self.dense(hidden))).squeeze(-1)
