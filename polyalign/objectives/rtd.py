"""Replaced token detection, ELECTRA-style, on multilingual text (MRTD) and on translation pairs (TRTD)
(XLM-E §2-3).

A small generator (an Encoder with a third of the discriminator's layers and the same width, XLM-E Table 6)
learns MLM on the masked input (Eq. 1; on a concatenated pair that is TLM, §3.1); tokens sampled from it
replace the masked positions (Eqs. 2, 4); the model being trained, the discriminator, predicts for every
token whether it was replaced (Eqs. 3, 5). Loss L_G + λ·L_D with λ = 50 (§4.1).

MRTD and TRTD share one generator and one detection head (§3.2 trains one θ_G and one θ_D on all four
losses): `share_generator` builds these parts once and hands them to both. Token embeddings are
shared between generator and discriminator (ELECTRA §3.2); the generator's other parameters never see L_D,
because sampling cuts the graph.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from polyalign.data.masking import IGNORE
from polyalign.data.streams import MonoBatch, ParallelBatch
from polyalign.flops import replaced_token_detection_flops, replaced_token_detection_model_flops
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.model.heads import ReplacedTokenHead
from polyalign.objectives.base import Objective, ObjectiveOutput, model_inputs
from polyalign.objectives.mlm import MLMConfig, masked_lm_loss, masked_targets_of, monolingual_batch
from polyalign.objectives.tlm import TLMConfig, translation_batch
from polyalign.schema import flat_field

GENERATOR_INITS = ("new", "model")


@dataclass
class RTDConfig:
    masking: MLMConfig = flat_field(lambda: MLMConfig(replace_probs=(1.0, 0.0, 0.0)))
    """The generator's MLM batch (its keys, `mask_prob` and `replace_probs`, sit beside the others in a recipe):
    every masked position becomes MASK (XLM-E §2, x^masked); positions are chosen uniformly (§3.1: span masking
    hurt), mask_prob 0.15 as in ELECTRA-Base (XLM-E Table 6 lists none)."""
    discriminator_weight: float = 50.0
    """λ in L_G + λ·L_D (XLM-E §4.1)."""
    generator_layers: int = 0
    """Generator depth; 0 = a third of the discriminator's layers (XLM-E Table 6: 4 of 12). Same width."""
    generator_init: str = "new"
    """`new`: the generator starts from random weights, as XLM-E's does (§4.1: both from scratch). `model`: it
    starts as a copy of the model it trains beside (its first `generator_layers` layers, its embeddings and its
    MLM head): for a run continued from a pre-trained MLM, a generator whose replacements are plausible from
    the first step (§3.1: a weaker generator "in turn harms pre-training")."""

    def __post_init__(self) -> None:
        if self.generator_init not in GENERATOR_INITS:
            raise ValueError(f"generator_init={self.generator_init!r}: use one of {GENERATOR_INITS}")


@dataclass
class TRTDConfig(RTDConfig):
    masking: TLMConfig = flat_field(lambda: TLMConfig(replace_probs=(1.0, 0.0, 0.0), style="ppa"))
    """The generator's TLM batch (`mask_prob`, `replace_probs`, `style`, `swap_prob` beside the others in a
    recipe), masked as MRTD's. Style `ppa`: `<s> e </s> f </s>`, positions running on: "the translation pair as a
    single sentence" (XLM-E §3.1), which keeps relative positions across the pair meaningful; `xlm`: positions
    restart at f."""


# ---------------------------------------------------------------------------------------------------------
# The math, as pure functions


def sample_replacements(logits: torch.Tensor) -> torch.Tensor:
    """One token per row of (N, V) generator logits, drawn from softmax(logits) (Eq. 2). No gradient
    flows through the draw."""
    with torch.no_grad():
        return torch.multinomial(torch.softmax(logits.detach().float(), dim=-1), 1).squeeze(1)  # (N,)


def corrupt(original: torch.Tensor, index: torch.Tensor, valid: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
    """x^corrupt (Eqs. 2, 4): the samples (K,) at the flat masked positions `index` (K,) where `valid`, the
    original elsewhere. Padding entries write into one spare slot past the end, which is dropped."""
    flat = original.reshape(-1)
    N = flat.numel()
    slots = torch.where(valid, index, N)  # (K,)
    out = torch.cat([flat, flat.new_zeros(1)]).index_copy(0, slots, samples.to(flat.dtype))
    return out[:N].view_as(original)


def replaced_token_labels(original: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
    """z_i of Eq. (3): 1 where the token differs from the original. A sampled token that equals the original
    counts as original (ELECTRA §2)."""
    return (corrupted != original).float()


def masked_mean(values: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where `where` holds (a multiply and a sum: no selection whose size depends on the data)."""
    where = where.to(values.dtype)
    return (values * where).sum() / where.sum().clamp(min=1)


def detection_loss(logits: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor):
    """Eqs. (3), (5): binary cross-entropy at every real token, averaged. Returns (loss, accuracy)."""
    real = attention_mask.bool()
    acc = torch.promote_types(logits.dtype, torch.float32)
    losses = F.binary_cross_entropy_with_logits(logits.to(acc), labels.to(acc), reduction="none")
    loss = masked_mean(losses, real)
    with torch.no_grad():
        accuracy = masked_mean(((logits > 0).to(acc) == labels).to(acc), real)
    return loss, accuracy


# ---------------------------------------------------------------------------------------------------------
# The parts MRTD and TRTD share


def generator_config(discriminator: EncoderConfig, layers: int = 0) -> EncoderConfig:
    """The discriminator's config with fewer layers: `layers`, or a third of them (XLM-E Table 6)."""
    return dataclasses.replace(discriminator, num_layers=layers or max(1, discriminator.num_layers // 3))


def bottom_of(model: MaskedLanguageModel, num_layers: int) -> dict[str, torch.Tensor]:
    """The model's weights a generator of `num_layers` layers has places for: embeddings, the first
    `num_layers` layers, the MLM head (a copy, so that the two then train apart)."""

    def kept(name: str) -> bool:
        parts = name.split(".")
        return parts[:2] != ["encoder", "layers"] or int(parts[2]) < num_layers

    return {name: value.detach().clone() for name, value in model.state_dict().items() if kept(name)}


class GeneratorAndHead(nn.Module):
    """θ_G (a small MaskedLanguageModel whose token embeddings are the discriminator's) and the
    discriminator's detection head."""

    def __init__(self, model: MaskedLanguageModel, generator_layers: int = 0, generator_init: str = "new"):
        super().__init__()
        self.generator = MaskedLanguageModel(generator_config(model.config, generator_layers))
        self.generator_init = generator_init
        if generator_init == "model":
            self.generator.load_state_dict(bottom_of(model, self.generator.config.num_layers))
        shared = model.encoder.embeddings.word
        self.generator.encoder.embeddings.word = shared  # ELECTRA §3.2: shared token embeddings
        self.generator.lm_head.decoder.weight = shared.weight  # the generator's MLM head stays tied to them
        self.detection_head = ReplacedTokenHead(model.config)


def share_generator(objectives: Iterable[Objective], model: MaskedLanguageModel) -> None:
    """Build the one GeneratorAndHead the replaced-token-detection objectives among `objectives` train (XLM-E §3.2:
    one θ_G, one θ_D) and hand it to each; they must agree on the generator they ask for."""
    detectors = [o for o in objectives if isinstance(o, ReplacedTokenDetection)]
    if not detectors:
        return
    first, *others = detectors
    asked = (first.config.generator_layers, first.config.generator_init)
    for other in others:
        layers, init = other.config.generator_layers, other.config.generator_init
        if generator_config(model.config, layers).num_layers != generator_config(model.config, asked[0]).num_layers:
            raise ValueError(
                f"generator_layers: MRTD and TRTD share one generator, but one asks for {layers} layers and the other "
                f"for {asked[0]}; give both the same generator_layers"
            )
        if init != asked[1]:
            raise ValueError(
                f"generator_init: MRTD and TRTD share one generator, but one asks for {init!r} and the other for "
                f"{asked[1]!r}; give both the same generator_init"
            )
    parts = GeneratorAndHead(model, *asked)
    for detector in detectors:
        detector.parts = parts


@dataclass
class Detection:
    """Everything one replaced-token-detection step computes (forward sums the losses)."""

    generator_loss: torch.Tensor
    generator_accuracy: torch.Tensor
    discriminator_loss: torch.Tensor
    discriminator_accuracy: torch.Tensor
    original: torch.Tensor  # (B, T) ids before masking
    corrupted: torch.Tensor  # (B, T) what the discriminator saw
    replaced: torch.Tensor  # (B, T) 1.0 where corrupted != original
    masked_count: int


# ---------------------------------------------------------------------------------------------------------
# The objectives


class ReplacedTokenDetection(Objective):
    """The shared core. MRTD and TRTD differ only in their data: MLM's batches and TLM's."""

    leaves_parameters_unused = ("lm_head",)  # XLM-E trains a detection head instead
    reads_packed_rows = True  # losses per token (detection at every real one), wherever its example lies

    def __init__(self, config, special, model_config: EncoderConfig):
        super().__init__(config, special, model_config)
        self.parts: GeneratorAndHead | None = None

    def setup(self, model: MaskedLanguageModel) -> None:
        if self.parts is None:  # alone in its recipe: nothing to share (share_generator hands out a shared one)
            self.parts = GeneratorAndHead(model, self.config.generator_layers, self.config.generator_init)

    def mlm_heads(self, model: MaskedLanguageModel) -> dict[str, MaskedLanguageModel]:
        # A generator copied from the model (`generator_init: model`) copies its head too; a `new` one is meant to
        # start from random weights altogether (XLM-E §4.1).
        return {"generator": self.parts.generator} if self.config.generator_init == "model" else {}

    def detect(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> Detection:
        if self.parts is None:
            raise RuntimeError(f"{type(self).__name__}: call setup(model) before training")
        generator, inputs, labels = self.parts.generator, model_inputs(batch), batch["labels"]
        targets = masked_targets_of(batch)
        # 1) generator: MLM on the masked text or pair (Eq. 1 / the TRTD generator loss)
        hidden = generator(**inputs).last_hidden_state
        logits, generator_loss, generator_accuracy, n = masked_lm_loss(generator, hidden, targets, return_logits=True)
        # 2) corrupt the masked positions with the generator's samples (Eqs. 2, 4)
        masked = labels != IGNORE
        original = torch.where(masked, labels, batch["input_ids"])
        valid = targets["masked_labels"] != IGNORE
        corrupted = corrupt(original, targets["masked_index"], valid, sample_replacements(logits))
        replaced = replaced_token_labels(original, corrupted)
        # 3) discriminator: the model being trained, on the corrupted input (Eqs. 3, 5)
        disc_hidden = model(**{**inputs, "input_ids": corrupted}).last_hidden_state  # (B, T, C)
        disc_loss, disc_accuracy = detection_loss(
            self.parts.detection_head(disc_hidden), replaced, batch["attention_mask"]
        )
        return Detection(generator_loss, generator_accuracy, disc_loss, disc_accuracy, original, corrupted, replaced, n)

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        d = self.detect(model, batch)
        loss = d.generator_loss + self.config.discriminator_weight * d.discriminator_loss  # L_G + λ·L_D
        real = batch["attention_mask"].bool()
        metrics = {
            "generator_loss": d.generator_loss,
            "generator_accuracy": d.generator_accuracy,
            "discriminator_loss": d.discriminator_loss,
            "discriminator_accuracy": d.discriminator_accuracy,
            "replaced": masked_mean(d.replaced, real),
        }
        B, T = batch["input_ids"].shape
        generator = self.parts.generator.config
        flops = replaced_token_detection_flops(generator, model.config, B, T, d.masked_count)
        model_flops = None
        if "real_tokens" in batch:  # counted by the loader (Objective.make_training_batch)
            model_flops = replaced_token_detection_model_flops(
                generator, model.config, batch["real_tokens"], batch["attention_pairs"], d.masked_count
            )
        return ObjectiveOutput(loss, metrics, flops, model_flops)


class MRTD(ReplacedTokenDetection):
    """Multilingual replaced token detection (XLM-E §3.1) on monolingual text."""

    stream = "mono"
    Config = RTDConfig

    def make_batch(self, raw: MonoBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        return monolingual_batch(raw, self.special, self.config.masking, self.uses_languages, rng)


class TRTD(ReplacedTokenDetection):
    """Translation replaced token detection (XLM-E §3.1) on concatenated translation pairs."""

    stream = "parallel"
    Config = TRTDConfig

    def make_batch(self, raw: ParallelBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        return translation_batch(raw, self.special, self.config.masking, self.uses_languages, rng)
