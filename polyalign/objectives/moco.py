"""Momentum contrast for sentence-level alignment, with TLM on the same pairs (PPA §2.1-2.2; MoCo).

The model is the query encoder; the key encoder is an exponential-moving-average copy of it (Eq. 1) that
is never trained. For each translation pair a coin decides which side the query encoder sees (random
input shuffling), and the same coin orders the pair for TLM. A sentence is a pooled final hidden state
(the first token as in PPA §2.1, or the mean over real tokens as in its footnote 1), L2-normalised and
projected (Eq. 2); negatives come from a queue of recent keys (InfoNCE, Eq. 3).
Loss = L_MoCo + L_TLM (Eq. 4); `tlm: false` leaves L_MoCo alone (the -TLM ablation of Table 5).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from polyalign.data.layout import sentence_layout
from polyalign.data.streams import ParallelBatch
from polyalign.flops import encoder_forward_flops, training_flops
from polyalign.model import MaskedLanguageModel
from polyalign.model.losses import cross_entropy
from polyalign.model.pooling import POOLINGS, pool
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs
from polyalign.objectives.mlm import MLMConfig
from polyalign.objectives.tlm import TLM, TLMConfig, order_pairs

KEY, TLM_PREFIX = "key_", "tlm_"  # batch entries of the key side and of the TLM sequence; the query side is bare


@dataclass
class MoCoConfig(MLMConfig):
    """PPA §3.3 defaults. The inherited masking settings apply to the TLM term."""

    momentum: float = 0.999
    """m of Eq. (1): the key encoder keeps this share of its weights at each update."""
    queue_size: int = 32_000
    """K: negative keys kept (PPA §2.1 scales MoCo's 65,536 down so the queue does not go stale)."""
    temperature: float = 0.05
    """tau of Eq. (3)."""
    projection_size: int = 300
    """d_k of Eq. (2). 0: no projection head, InfoNCE on the pooled states themselves (the vectors retrieval
    reads), an ablation of Eq. (2) that PPA does not run."""
    tlm: bool = True
    """Add PPA-style TLM on the same pairs in the same order (Eq. 4); false gives the -TLM ablation."""
    batch_negatives: bool = False
    """Also score each query against the other keys of its own batch (fresh keys from the current key
    encoder), as in-batch contrast does. Off in PPA: its negatives are the queue alone. Every queue key is older
    than every positive, so while the key encoder drifts fast a query can tell its positive by freshness rather
    than content (the toy test shows it at momentum 0.9); the batch's own keys are as fresh as the positive and
    close that shortcut. From small-base at lr 1e-3, momentum 0.99 it did not show and this option did not
    change retrieval (arm `batchneg`)."""
    pooling: str = "mean"
    """Sentence vector: `first` = the first token's final state (PPA §2.1, mBERT's trained [CLS]); `mean` =
    mean over real tokens, specials included (PPA footnote 1; the `mean` of `evaluate tatoeba`). Default
    `mean`: in a model pre-trained by MLM/TLM alone (ours, XLM-R) the first token was never trained to sum
    up the sentence, and on small-base its state separates translations half as well (measured)."""

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"moco pooling={self.pooling!r}: use one of {POOLINGS}")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"moco momentum={self.momentum}: must lie in [0, 1)")
        if self.queue_size < 1 or self.projection_size < 0:
            raise ValueError(
                f"moco queue_size={self.queue_size}, projection_size={self.projection_size}: need queue_size >= 1 "
                "and projection_size >= 0 (0 = no projection head)"
            )
        if self.temperature <= 0:
            raise ValueError(f"moco temperature={self.temperature}: must be > 0")


# ---------------------------------------------------------------------------------------------------------
# The math, as pure functions


def sentence_vectors(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """h of PPA §2.1, L2-normalised, in fp32: the first token's final state ([CLS] / <s>) or the mean over
    the real tokens (footnote 1). hidden (B, T, C), attention_mask (B, T) -> (B, C)."""
    return F.normalize(pool(hidden, attention_mask, pooling), dim=-1)


@torch.no_grad()
def momentum_update(key: nn.Module, query: nn.Module, momentum: float) -> None:
    """Eq. (1): theta_k = m theta_k + (1 - m) theta_q, parameter by parameter (key is a deep copy of query)."""
    for k, q in zip(key.parameters(), query.parameters(), strict=True):
        k.mul_(momentum).add_(q.detach(), alpha=1.0 - momentum)


def info_nce(
    queries: torch.Tensor,
    keys: torch.Tensor,
    negatives: torch.Tensor,
    temperature: float,
    batch_negatives: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (3): query i's positive is key i, its negatives are every row of `negatives` (and, with
    `batch_negatives`, every other key of the batch). queries, keys (B, D); negatives (K, D).
    Returns (mean loss, share of queries ranking their positive first)."""
    positive = (queries * keys).sum(-1, keepdim=True)  # (B, 1)
    negative = queries @ negatives.T  # (B, K)
    parts = [positive, negative]
    if batch_negatives:
        own = torch.eye(len(keys), dtype=torch.bool, device=keys.device)
        parts.append((queries @ keys.T).masked_fill(own, float("-inf")))  # (B, B): key i is the positive already
    logits = torch.cat(parts, dim=1) / temperature  # the positive is class 0
    target = torch.zeros(len(queries), dtype=torch.long, device=queries.device)
    with torch.no_grad():
        accuracy = (logits.argmax(-1) == 0).float().mean()
    return cross_entropy(logits, target), accuracy


@torch.no_grad()
def batch_accuracy(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Share of queries whose own key scores highest among the batch's keys: all as fresh as the positive, so
    unlike the queue accuracy this cannot be won by telling fresh keys from stale ones."""
    return ((queries @ keys.T).argmax(-1) == torch.arange(len(keys), device=keys.device)).float().mean()


def enqueue(queue: torch.Tensor, pointer: int, keys: torch.Tensor) -> int:
    """Write `keys` (N, D) into the ring buffer `queue` (K, D) from row `pointer` on, the oldest rows going
    out first; returns the next pointer. Of more than K keys only the last K fit."""
    K = queue.shape[0]
    keys = keys[-K:]
    rows = (pointer + torch.arange(len(keys), device=queue.device)) % K
    queue[rows] = keys.to(queue.dtype)
    return (pointer + len(keys)) % K


def queue_in_order(queue: torch.Tensor, pointer: int) -> torch.Tensor:
    """The queue's rows from oldest to newest."""
    return torch.roll(queue, shifts=-pointer, dims=0)


def gather_across_processes(x: torch.Tensor) -> torch.Tensor:
    """All processes' `x` (N_rank, D) concatenated in rank order, so every queue receives the same keys
    (MoCo's concat_all_gather); sizes may differ between processes. A single process returns `x`."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    world = dist.get_world_size()
    size = torch.tensor([len(x)], device=x.device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    padded = x.new_zeros((int(max(sizes)), *x.shape[1:]))  # all_gather needs equal shapes
    padded[: len(x)] = x
    parts = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([p[: int(n)] for p, n in zip(parts, sizes, strict=True)])


# ---------------------------------------------------------------------------------------------------------


class Projection(nn.Module):
    """Eq. (2): z = W2 ReLU(W1 h), W1 (d_h x d_h), W2 (d_k x d_h), after SimCLR."""

    def __init__(self, hidden_size: int, projection_size: int):
        super().__init__()
        self.inner = nn.Linear(hidden_size, hidden_size, bias=False)
        self.outer = nn.Linear(hidden_size, projection_size, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.outer(F.relu(self.inner(h)))


class MoCo(Objective):
    stream = "parallel"
    Config = MoCoConfig
    cannot_shard = "updates its momentum encoder in place outside the optimizer, which sharded weights do not keep"

    def __init__(self, config: MoCoConfig, special, model_config):
        super().__init__(config, special, model_config)
        head = config.projection_size > 0
        self.query_projection = Projection(model_config.hidden_size, config.projection_size) if head else nn.Identity()
        key_size = config.projection_size if head else model_config.hidden_size
        self.tlm = None
        if config.tlm:
            tlm_config = TLMConfig(mask_prob=config.mask_prob, replace_probs=config.replace_probs, style="ppa")
            self.tlm = TLM(tlm_config, special, model_config)
        # Buffers, so checkpoints and --resume keep the queue. Randomly initialised, as in MoCo (PPA §2.1).
        self.register_buffer("queue", F.normalize(torch.randn(config.queue_size, key_size), dim=1))
        self.register_buffer("queue_pointer", torch.zeros((), dtype=torch.long))
        self.key_encoder: nn.Module | None = None
        self.key_projection: nn.Module | None = None

    def setup(self, model: MaskedLanguageModel) -> None:
        # The key network starts as an exact copy of the query network (encoder + projection) and is only
        # ever moved by the momentum update, never by the optimizer.
        self.key_encoder = copy.deepcopy(model.encoder).requires_grad_(False)
        self.key_projection = copy.deepcopy(self.query_projection).requires_grad_(False)

    def mlm_heads(self, model: MaskedLanguageModel) -> dict[str, MaskedLanguageModel]:
        return {"lm_head": model} if self.tlm is not None else {}  # only its TLM term reads the MLM head

    def make_batch(self, raw: ParallelBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        # PPA §2.1 random input shuffling: per pair, a coin decides which side is the query; §2.2: the same
        # coin orders the TLM sequence (query side first).
        swap = rng.random(len(raw.source)) < 0.5
        query_side, key_side, _, _ = order_pairs(raw, swap)
        # No language ids on either side: PPA uses none, and the sentence vectors must be language-agnostic.
        batch = sentence_layout(query_side, None, self.special).tensors()
        batch |= {KEY + k: v for k, v in sentence_layout(key_side, None, self.special).tensors().items()}
        if self.tlm is not None:
            batch |= {TLM_PREFIX + k: v for k, v in self.tlm.ordered_batch(raw, swap, rng).items()}
        batch["swapped"] = torch.from_numpy(swap)
        return batch

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        if self.key_encoder is None:
            raise RuntimeError("MoCo.setup(model) must run before training: it creates the key encoder")
        m, pooling = self.config.momentum, self.config.pooling
        key_batch = {k[len(KEY) :]: v for k, v in batch.items() if k.startswith(KEY)}
        # 1) queries: the query encoder's final states (under the trainer's autocast).
        hidden = model(**model_inputs(batch)).last_hidden_state
        # 2) keys: move the key network towards the current query weights (Eq. 1), then encode. This runs
        #    once per forward, so with A accumulation steps the key network moves by m^A per optimizer step.
        with torch.no_grad():
            momentum_update(self.key_encoder, model.encoder, m)
            momentum_update(self.key_projection, self.query_projection, m)
            key_hidden = self.key_encoder(**model_inputs(key_batch)).last_hidden_state
        # 3) pool, project (Eq. 2) and score (Eq. 3) in fp32 outside autocast: unit vectors make the dot
        #    products cosines, and at tau = 0.05 a bf16 rounding of a cosine (~4e-3) would move a logit by ~0.1.
        with torch.autocast(hidden.device.type, enabled=False):
            queries = F.normalize(
                self.query_projection(sentence_vectors(hidden, batch["attention_mask"], pooling)), dim=-1
            )
            with torch.no_grad():
                key_vectors = sentence_vectors(key_hidden, key_batch["attention_mask"], pooling)
                keys = F.normalize(self.key_projection(key_vectors), dim=-1)
            # InfoNCE against the queue as it was before this batch (a copy: the queue changes below).
            moco_loss, accuracy = info_nce(
                queries, keys, self.queue.clone().float(), self.config.temperature, self.config.batch_negatives
            )
            fresh_accuracy = batch_accuracy(queries.detach(), keys)
        # 4) enqueue this step's keys from every process, oldest out.
        pointer = enqueue(self.queue, int(self.queue_pointer), gather_across_processes(keys))
        self.queue_pointer.fill_(pointer)

        B, T = batch["input_ids"].shape
        K, D = self.queue.shape
        scored = K + 1 + (B if self.config.batch_negatives else 0)
        flops = training_flops(encoder_forward_flops(model.config, B, T) + 2.0 * B * scored * D)
        flops += encoder_forward_flops(model.config, *key_batch["input_ids"].shape)  # key side: forward only
        metrics = {"moco_loss": moco_loss.detach(), "moco_accuracy": accuracy, "moco_batch_accuracy": fresh_accuracy}
        loss = moco_loss
        if self.tlm is not None:  # Eq. (4)
            tlm = self.tlm(model, {k[len(TLM_PREFIX) :]: v for k, v in batch.items() if k.startswith(TLM_PREFIX)})
            loss = loss + tlm.loss
            flops += tlm.flops
            metrics |= {"tlm_loss": tlm.loss.detach(), "tlm_accuracy": tlm.metrics["accuracy"]}
        return ObjectiveOutput(loss, metrics, flops)
