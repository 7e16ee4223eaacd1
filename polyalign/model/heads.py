"""Output heads that sit on the encoder."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from polyalign.model.encoder import EncoderConfig


class MaskedLMHead(nn.Module):
    """dense -> GELU -> LayerNorm -> vocabulary projection tied to the input embeddings (BERT, RoBERTa).

    The projection has the embedding table's padded rows (model/vocabulary.py); `forward` returns only the
    vocabulary's logits, and losses that take `features` and the projection leave the padding rows out."""

    def __init__(self, c: EncoderConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.vocab_size = c.vocab_size
        self.dense = nn.Linear(c.hidden_size, c.embedding_width)
        self.norm = nn.LayerNorm(c.embedding_width, eps=c.layer_norm_eps)
        self.decoder = nn.Linear(c.embedding_width, c.embedding_rows)
        self.decoder.weight = word_embeddings.weight  # tied
        nn.init.normal_(self.dense.weight, std=c.initializer_range)
        nn.init.zeros_(self.dense.bias)
        nn.init.zeros_(self.decoder.bias)
        with torch.no_grad():  # the padding rows start at zero, as loading an unpadded state dict leaves them
            self.decoder.weight[c.vocab_size :] = 0

    def features(self, hidden):
        """hidden (N, C) -> the projection's input (N, E)."""
        return self.norm(F.gelu(self.dense(hidden)))

    def forward(self, hidden):
        """hidden (..., C), usually only the masked positions (N, C) -> logits (..., V), no padding column."""
        x, V = self.features(hidden), self.vocab_size
        if x.is_cuda:  # the padded product runs on tensor-core kernels; slicing its logits is cheap beside it
            return self.decoder(x)[..., :V]
        # a CPU gains nothing from the padded rows, and the sliced logits' copies cost it ~10% of the head
        return F.linear(x, self.decoder.weight[:V], self.decoder.bias[:V])


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
