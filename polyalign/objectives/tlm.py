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
from polyalign.objectives.mlm import MLM, MLMConfig, masked_batch


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


class TLM(MLM):
    stream = "parallel"
    Config = TLMConfig

    def make_batch(self, raw: ParallelBatch, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        swap = rng.random(len(raw.source)) < self.config.swap_prob
        return self.ordered_batch(raw, swap, rng)

    def ordered_batch(self, raw: ParallelBatch, swap: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """The masked batch with the order of each pair given by `swap` (PPA §2.2: MoCo's shuffle decides it)."""
        first, second, first_lang, second_lang = order_pairs(raw, swap)
        use_languages = self.uses_languages and self.config.style == "xlm"
        layout = pair_layout(
            first,
            second,
            first_lang if use_languages else None,
            second_lang if use_languages else None,
            self.special,
            self.config.style,
        )
        batch = masked_batch(layout, self.special, self.config, rng)
        batch["swapped"] = torch.from_numpy(swap)
        return batch
