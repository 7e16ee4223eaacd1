"""Translation language modelling: MLM on a concatenated translation pair (XLM §3.3; PPA §2.2).

The forward pass is MLM's; only the batch differs. Style `xlm` resets positions and adds language
embeddings; style `ppa` runs positions on and uses only a separator. The order of the two sides is random.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from polyalign.data.layout import TLM_STYLES, pair_layout
from polyalign.data.streams import ParallelBatch
from polyalign.model import MaskedLanguageModel
from polyalign.objectives.base import Objective, ObjectiveOutput
from polyalign.objectives.mlm import MLMConfig, masked_batch, masked_lm_output


@dataclass
class TLMConfig(MLMConfig):
    style: str = "xlm"
    """`xlm` (position reset + language embeddings) or `ppa` (positions run on, separator only)."""
    swap_prob: float = 0.5
    """Probability that the target side comes first."""

    def __post_init__(self) -> None:
        if self.style not in TLM_STYLES:
            raise ValueError(f"tlm style={self.style!r}: use one of {TLM_STYLES}")


def order_pairs(raw: ParallelBatch, swap: np.ndarray) -> tuple[list, list, np.ndarray, np.ndarray]:
    """Swap source and target in the rows where `swap` is True."""
    first = [t if s else x for x, t, s in zip(raw.source, raw.target, swap, strict=True)]
    second = [x if s else t for x, t, s in zip(raw.source, raw.target, swap, strict=True)]
    first_lang = np.where(swap, raw.target_languages, raw.source_languages)
    second_lang = np.where(swap, raw.source_languages, raw.target_languages)
    return first, second, first_lang, second_lang


def translation_batch(
    raw: ParallelBatch,
    special,
    config: TLMConfig,
    uses_languages: bool,
    rng: np.random.Generator,
    swap: np.ndarray | None = None,
) -> dict[str, torch.Tensor]:
    """TLM's batch: each pair laid out as one sequence in `config.style`, masked. `swap` (B,) puts the target side
    first where True (PPA §2.2: MoCo's shuffle decides it); default a coin per pair with `config.swap_prob`."""
    if swap is None:
        swap = rng.random(len(raw.source)) < config.swap_prob
    first, second, first_lang, second_lang = order_pairs(raw, swap)
    use_languages = uses_languages and config.style == "xlm"
    layout = pair_layout(
        first,
        second,
        first_lang if use_languages else None,
        second_lang if use_languages else None,
        special,
        config.style,
    )
    batch = masked_batch(layout, special, config, rng)
    batch["swapped"] = torch.from_numpy(swap)
    return batch


class TLM(Objective):
    """MLM's forward on translation_batch."""

    stream = "parallel"
    Config = TLMConfig
    reads_packed_rows = True  # a loss per token, wherever its example lies

    def make_batch(self, raw: ParallelBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        return translation_batch(raw, self.special, self.config, self.uses_languages, rng)

    def ordered_batch(self, raw: ParallelBatch, swap: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """The batch with the order of each pair given by `swap` (MoCo, which holds a TLM, draws it)."""
        return translation_batch(raw, self.special, self.config, self.uses_languages, rng, swap)

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        return masked_lm_output(model, batch)
