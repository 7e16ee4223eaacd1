"""What every objective is: a module with a config, a data stream, a batch maker and a loss.

The trainer knows nothing about any objective beyond this interface: it asks for a batch from the named
stream, lets the objective turn it into tensors (on CPU, with the trainer's seeded generator), moves them to
the device, and calls forward. What else it must know (unused parameters, sharding, a pretrained start) it
reads from the class attributes below, never from an objective's name. Objectives never touch the optimizer,
the device or logging.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from polyalign.data.masking import masked_targets
from polyalign.data.packing import pack_batch
from polyalign.model import EncoderConfig, MaskedLanguageModel, model_inputs
from polyalign.tokenizer import SpecialTokens

__all__ = ["Objective", "ObjectiveOutput", "model_inputs"]  # model_inputs: the encoder's, offered to objectives


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor
    """Scalar loss, already averaged over its prediction targets."""
    metrics: dict[str, torch.Tensor | float] = field(default_factory=dict)
    """Logged values (detached), e.g. accuracy; the trainer prefixes them with the objective's name."""
    flops: float = 0.0
    """Analytic training FLOPs (forward + backward) this call computed, padding included (hardware FLOPs): what
    compute budgets (`trainer.max_flops`) count."""
    model_flops: float | None = None
    """The same for the model's useful work alone (real tokens, attention inside each example, the MLM head at the
    real targets), what model FLOPs utilisation divides; None: as `flops`."""


class Objective(nn.Module):
    """Base class: subclasses set `stream` and `Config`, and implement make_batch and forward."""

    stream: ClassVar[str] = "mono"  # which data stream feeds it: "mono" or "parallel"
    Config: ClassVar[type]
    leaves_parameters_unused: ClassVar[tuple[str, ...]] = ()
    """The parts of the model (parameter-name prefixes, e.g. "lm_head") it never gives a gradient: when every
    objective of a recipe leaves a part unused, DDP must look for unused parameters every step."""
    cannot_shard: ClassVar[str] = ""
    """Why it cannot train under FSDP (`trainer.distributed: fsdp`), as a clause; empty when it can."""
    needs_pretrained_start: ClassVar[str] = ""
    """Why it needs `init_from` (a pretrained start), as a clause; empty when it does not. Such an objective's
    Config offers `allow_cold_start: bool`, the user's override."""
    reads_packed_rows: ClassVar[bool] = False
    """Whether its forward reads packed rows (several examples side by side in a row, `example_ids` in the batch;
    polyalign/data/packing.py): a token-level loss does, whatever row its tokens lie in. One that reads each
    sentence or pair as a unit (pooling it, aligning its two sides) does not until it reads its segments; a
    recipe with such an objective trains unpacked under `data.pack: auto`."""

    def __init__(self, config, special: SpecialTokens, model_config: EncoderConfig, languages: list[str] | None = None):
        super().__init__()
        self.config = config
        self.special = special
        self.model_config = model_config
        self.languages = list(languages or [])
        """Language codes in language-embedding order (empty when unknown), for objectives that pick languages."""

    @property
    def uses_languages(self) -> bool:
        return self.model_config.num_languages > 0

    def setup(self, model: MaskedLanguageModel) -> None:
        """Called once after the model is built (weights loaded), before training: an objective that shares
        or copies model weights (a generator sharing embeddings, a momentum encoder) does it here."""

    def mlm_heads(self, model: MaskedLanguageModel) -> dict[str, MaskedLanguageModel]:
        """The models whose MLM head its loss reads, by name: when `init_from` has no trained MLM head, the
        trainer first trains these heads alone on MLM (`trainer.head_warmup_steps`). The model itself unless
        the objective leaves `lm_head` unused."""
        return {} if "lm_head" in self.leaves_parameters_unused else {"lm_head": model}

    def make_batch(self, raw, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def make_training_batch(self, raw, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """make_batch, its examples then laid into packed rows when the stream packed them (`raw.packing`), and
        a masked batch's prediction targets as flat indices (`masked_targets`), so that the step selects them
        with shapes that do not depend on the data."""
        batch = self.make_batch(raw, rng)
        if batch.get("attention_mask") is not None and batch["attention_mask"].dim() == 2:  # for model FLOPs
            lengths = batch["attention_mask"].sum(1)
            batch |= {"real_tokens": int(lengths.sum()), "attention_pairs": int((lengths**2).sum())}
        if raw.packing is not None:
            batch = pack_batch(batch, raw.packing, self.special.pad)
        for key in [k for k in batch if k.endswith("labels") and "masked_" not in k]:  # `labels`, a part's `tlm_labels`
            prefix = key[: -len("labels")]
            batch |= {prefix + name: value for name, value in masked_targets(batch[key]).items()}
        return batch

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        raise NotImplementedError
