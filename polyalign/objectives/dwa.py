"""Denoising word alignment (XLM-Align §3.2), trained together with TLM from one forward pass.

Each step, for a batch of translation pairs laid out and masked exactly as TLM does:
1) self-labeling (§3.1, no gradient, dropout off): encode the *clean* pair, align its tokens with the
   optimal-transport aligner at the self-labeling layer (Sinkhorn + iterative filtering, or §5.4's union of
   both argmax directions), giving links A;
2) one forward pass of the *masked* pair: TLM's loss from the last layer, and the DWA loss from the DWA
   layer: a pointer network (Eqs. 11-13) predicts, for each query position P = aligned ∩ masked (Eq. 14),
   the position it was self-labeled to on the other side, in both directions (Eq. 15).
TLM and DWA share the forward pass as in XLM-Align §4.1, so this one objective returns both losses (the
recipe lists `mlm` and `dwa`, which together are XLM-Align's MLM + TLM + DWA). DWA continues a pretrained
model (§3.3 cold start): `polyalign pretrain` refuses it without `init_from` unless `allow_cold_start: true`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from polyalign.align.extract import OTSettings, ot_links
from polyalign.align.words import gather_side, side_positions
from polyalign.data.masking import IGNORE
from polyalign.data.streams import ParallelBatch
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.layers import xlm_align_label_layer
from polyalign.model import MaskedLanguageModel
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs
from polyalign.objectives.mlm import masked_lm_loss
from polyalign.objectives.tlm import TLMConfig, translation_batch
from polyalign.schema import flat_field


@dataclass
class DWAConfig:
    tlm: TLMConfig = flat_field(TLMConfig)
    """The TLM batch both losses read (`mask_prob`, `replace_probs`, `style`, `swap_prob` beside the others in a
    recipe): XLM-Align trains DWA beside TLM on the same masked pairs, from one forward pass (§4.1)."""
    label_layer: int | None = None
    """Layer whose hidden states self-label the alignments; default `xlm_align_label_layer`: 10 of 12 (Table 11)
    scaled to the model's depth."""
    dwa_layer: int | None = None
    """Layer feeding the pointer network; default the last (§5.3 finds the top layers best)."""
    tlm_weight: float = 1.0
    """Weight of the TLM loss computed from the same forward pass; 0 trains DWA alone."""
    mu: float = 1.0
    """Entropic regularisation of the self-labeling OT (Eq. 3; Table 11)."""
    sinkhorn_iterations: int = 2
    filter_iterations: int = 2
    """Rounds of iterative alignment filtering (Eqs. 8-9; Table 11), at least 1."""
    alpha: float = 0.9
    """Discount of alignment filtering (Eq. 9; Table 11)."""
    filtering: str = "iterative"
    """`iterative` (§3.1, Eqs. 7-9) or `disable` (§5.4: self-labels are the union of the forward and backward
    argmax of the OT plan; more labels, less precise, worse end tasks in Table 6)."""
    allow_cold_start: bool = False
    """Allow DWA without `init_from`. §3.3 and §6: from scratch the self-labels are poor and "the DWA task does
    not work very well", so a run without a pretrained start is refused unless this is true."""

    def __post_init__(self) -> None:
        self.ot_settings()  # checks filtering and filter_iterations

    def ot_settings(self) -> OTSettings:
        return OTSettings(
            self.mu, self.sinkhorn_iterations, self.filter_iterations, self.alpha, filtering=self.filtering
        )


class PointerNetwork(nn.Module):
    """XLM-Align Eqs. (11)-(13): a_i = softmax(q_i·K / sqrt(d_h)), q_i = linear(h*_i), K = linear(h* of the
    other side). The same two projections serve both directions."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """queries (B, n, C), keys (B, m, C), key_mask (B, m) -> log alignment probabilities (B, n, m)."""
        scores = self.query(queries) @ self.key(keys).transpose(-1, -2) / math.sqrt(queries.shape[-1])
        scores = scores.float().masked_fill(~key_mask[:, None, :], float("-inf"))
        return F.log_softmax(scores, dim=-1)


def pointer_loss(
    log_probs: torch.Tensor, links: torch.Tensor, query_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed cross-entropy of Eq. (15) over the query rows that have a self-labeled link (Eq. 14).

    log_probs, links (B, n, m); query_mask (B, n) marks the masked positions. A query linked to several
    positions (filtering round 2 may add one) gets a uniform target over them. Returns (loss sum, number of
    queries, number of queries whose argmax is a labeled position).
    """
    counts = links.sum(-1)  # (B, n)
    queries = query_mask & (counts > 0)  # Eq. (14): P = aligned ∩ masked
    picked = torch.where(links, log_probs, 0.0).sum(-1) / counts.clamp(min=1)  # (B, n): mean log-prob of labels
    loss_sum = -(picked * queries).sum()
    hits = links.gather(-1, log_probs.argmax(-1, keepdim=True)).squeeze(-1) & queries
    return loss_sum, queries.sum(), hits.sum()


class DWA(Objective):
    """TLM + denoising word alignment on translation pairs (see the module docstring)."""

    stream = "parallel"
    Config = DWAConfig
    needs_pretrained_start = "XLM-Align §3.3: from scratch its self-labels are poor"

    def __init__(self, config: DWAConfig, special, model_config):
        super().__init__(config, special, model_config)
        L = model_config.num_layers
        self.label_layer = xlm_align_label_layer(L) if config.label_layer is None else config.label_layer
        self.dwa_layer = L if config.dwa_layer is None else config.dwa_layer
        for name, layer in (("label_layer", self.label_layer), ("dwa_layer", self.dwa_layer)):
            if not 1 <= layer <= L:
                raise ValueError(f"dwa {name}={layer}: the model has layers 1..{L}")
        self.ot = config.ot_settings()
        self.pointer = PointerNetwork(model_config.hidden_size)

    def make_batch(self, raw: ParallelBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        return translation_batch(raw, self.special, self.config.tlm, self.uses_languages, rng)  # TLM's masked pairs

    def sides(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, tuple, tuple]:
        """The clean ids (B, T) and the positions of each sentence's own tokens: ((B, n) index, mask) for the
        first and the second sentence of the pair."""
        clean = torch.where(batch["labels"] != IGNORE, batch["labels"], batch["input_ids"])
        real = batch["attention_mask"].bool() & (clean != self.special.cls) & (clean != self.special.sep)
        return clean, side_positions(real & (batch["segment"] == 0)), side_positions(real & (batch["segment"] == 1))

    @torch.no_grad()
    def self_label(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """§3.1 on the clean pair: OT links (B, n, m) between the two sentences' tokens at the labeling layer,
        with dropout off (labels come from the model itself, not from a dropout sample of it)."""
        clean, (s_index, s_mask), (t_index, t_mask) = self.sides(batch)
        was_training = model.training
        model.eval()
        try:
            out = model(**{**model_inputs(batch), "input_ids": clean}, output_hidden_states=True)
        finally:
            model.train(was_training)
        hidden = out.hidden_states[self.label_layer]
        mask = s_mask[:, :, None] & t_mask[:, None, :]  # (B, n, m)
        return ot_links(gather_side(hidden, s_index), gather_side(hidden, t_index), mask, self.ot)

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        labels = batch["labels"]
        masked = labels != IGNORE
        _, (s_index, s_mask), (t_index, t_mask) = self.sides(batch)

        # 1) self-labeling on the clean pair (Algorithm 1, line 6)
        links = self.self_label(model, batch)

        # 2) one forward pass of the masked pair for TLM and DWA (§4.1)
        out = model(**model_inputs(batch), output_hidden_states=True)
        if self.config.tlm_weight:
            tlm_loss, accuracy, n_predicted = masked_lm_loss(model, out.last_hidden_state, batch)
        else:  # DWA alone: the 250k-way output of a large vocabulary is not computed for a weight of 0
            tlm_loss, accuracy, n_predicted = torch.zeros((), device=labels.device), float("nan"), 0
        h = out.hidden_states[self.dwa_layer]
        source, target = gather_side(h, s_index), gather_side(h, t_index)  # (B, n, C), (B, m, C)
        forward_sum, forward_n, forward_hits = pointer_loss(
            self.pointer(source, target, t_mask), links, masked.gather(1, s_index) & s_mask
        )
        backward_sum, backward_n, backward_hits = pointer_loss(
            self.pointer(target, source, s_mask), links.transpose(1, 2), masked.gather(1, t_index) & t_mask
        )
        queries = forward_n + backward_n
        dwa_loss = (forward_sum + backward_sum) / queries.clamp(min=1)
        loss = dwa_loss + (self.config.tlm_weight * tlm_loss if self.config.tlm_weight else 0.0)

        B, T = batch["input_ids"].shape
        n, m, C = s_index.shape[1], t_index.shape[1], model.config.hidden_size
        encoder = encoder_forward_flops(model.config, B, T)
        pointer = 2 * 2 * B * (n + m) * C * C + 2 * 2 * 2 * B * n * m * C  # projections, both directions' scores
        flops = training_flops(encoder + mlm_head_forward_flops(model.config, n_predicted) + pointer) + encoder
        metrics = {
            "tlm_loss": tlm_loss.detach(),
            "dwa_loss": dwa_loss.detach(),
            "accuracy": accuracy,
            "dwa_accuracy": (forward_hits + backward_hits).float() / queries.clamp(min=1),
            "labels_per_pair": links.sum().float() / B,
            "queries_per_pair": queries.float() / B,
        }
        return ObjectiveOutput(loss, metrics, flops)
