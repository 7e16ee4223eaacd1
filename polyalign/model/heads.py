"""Output heads that sit on the encoder."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from polyalign.model.encoder import EncoderConfig
from polyalign.model.losses import IGNORE_INDEX, cross_entropy, fused_loss_name, linear_cross_entropy

ACCURACY_SAMPLE = 512
"""Targets the MLM accuracy is measured on (the first ones): a full argmax over (N, V) costs as much as a layer."""

FUSED_ON_CPU = False
"""Whether the MLM loss takes the fused linear + cross-entropy on a CPU too. Off: there the chunked path over the
logits measured more than twice as fast, and the logits' memory is no constraint; on a GPU the fused path saves the
(N, V) logits, their fp32 softmax and their gradient."""


class MaskedLMHead(nn.Module):
    """dense -> GELU -> LayerNorm -> vocabulary projection tied to the input embeddings (BERT, RoBERTa).

    The projection has the embedding table's padded rows (model/vocabulary.py); `forward` returns only the
    vocabulary's logits, and losses that take `features` and the projection leave the padding rows out.
    `masked_loss` is a region the trainer may compile on its own (`compile_regions`)."""

    compile_regions = ("masked_loss",)

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

    def padded_logits(self, features):
        """features (N, E) -> logits over the padded rows (N, R), -inf at the padding columns: aligned shapes,
        and no probability (so no sample, no gradient) where no token is."""
        logits, V = self.decoder(features), self.vocab_size
        if logits.shape[-1] == V:
            return logits
        return logits.masked_fill(torch.arange(logits.shape[-1], device=logits.device) >= V, float("-inf"))

    def masked_loss(self, hidden, index, labels, return_logits: bool = False):
        """Mean cross-entropy at the flat positions `index` (K,) of hidden (..., C), against labels (K,) (IGNORE
        at padding entries): (loss, accuracy), plus the (K, V or R) logits when asked (an ELECTRA generator samples
        from them; padding columns, if any, are -inf). No shape here depends on the data.

        Traced by the compiler, the plain cross-entropy goes into the graph (its kernels fuse the softmax); run
        eagerly on a GPU, the fused linear cross-entropy never holds the (K, V) logits; on a CPU the logits go
        through the chunked cross-entropy. `loss_path` names the path."""
        x = hidden.reshape(-1, hidden.shape[-1]).index_select(0, index)  # (K, C)
        features = self.features(x)  # (K, E)
        if torch.compiler.is_compiling():
            logits = self.padded_logits(features)  # (K, R)
            acc = torch.promote_types(logits.dtype, torch.float32)
            total = F.cross_entropy(logits.to(acc), labels, ignore_index=IGNORE_INDEX, reduction="sum")
            loss = total / (labels != IGNORE_INDEX).sum().clamp(min=1)
        elif return_logits or not (features.is_cuda or FUSED_ON_CPU):
            # a CPU gains nothing from the padded rows (see forward)
            V = self.vocab_size
            logits = (
                self.padded_logits(features)
                if features.is_cuda
                else F.linear(features, self.decoder.weight[:V], self.decoder.bias[:V])
            )
            loss = cross_entropy(logits, labels)
        else:
            weight, bias = self.decoder.weight, self.decoder.bias
            loss = linear_cross_entropy(features, weight, bias, labels, self.vocab_size)
            with torch.no_grad():
                logits = self.padded_logits(features[:ACCURACY_SAMPLE])
        accuracy = sample_accuracy(logits, labels)
        return (loss, accuracy, logits) if return_logits else (loss, accuracy)


def sample_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Share of the first ACCURACY_SAMPLE rows' targets (IGNORE rows left out) whose logit is the highest."""
    with torch.no_grad():
        z, y = logits[:ACCURACY_SAMPLE], labels[:ACCURACY_SAMPLE]
        valid = y != IGNORE_INDEX
        # fp32: a CPU argmax over bf16 is ~4x slower than converting first
        hits = (z.float().argmax(-1) == y) & valid
        return hits.sum() / valid.sum().clamp(min=1)


def loss_path(device: torch.device, compiled: bool) -> str:
    """The MLM loss's path on `device` (see `MaskedLMHead.masked_loss`), as a run records it."""
    if compiled:
        return "cross-entropy compiled into the head's graph"
    if device.type == "cuda" or FUSED_ON_CPU:
        return fused_loss_name(device)
    return "chunked cross-entropy over the logits"


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
