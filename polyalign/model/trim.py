"""Vocabulary trimming (Ushio et al. 2023, "An Efficient Multilingual Language Model Compression through Vocabulary
Trimming"): keep the embedding rows (and the MLM head's) of the pieces a corpus uses, in their old order.

Nothing else changes, so a text whose pieces are all kept is encoded to the same vectors: only the ids differ
(new id = position of the old id among the kept ones).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from polyalign.model import MaskedLanguageModel

WORD_EMBEDDINGS = "encoder.embeddings.word.weight"


def check_keep(keep: torch.Tensor, vocab_size: int, special: dict[str, int]) -> None:
    """`keep` must be increasing old ids inside the vocabulary, with every special piece among them."""
    if keep.ndim != 1 or len(keep) == 0 or bool((keep[1:] <= keep[:-1]).any()):
        raise ValueError("keep: an increasing, non-empty list of ids")
    if int(keep[0]) < 0 or int(keep[-1]) >= vocab_size:
        raise ValueError(f"keep: ids must lie in [0, {vocab_size})")
    missing = [name for name, i in special.items() if i not in set(keep.tolist())]
    if missing:
        raise ValueError(f"keep: the special pieces {missing} must be kept")


def new_id(keep: torch.Tensor, old: int) -> int:
    """Where a kept old id lands in the trimmed vocabulary."""
    return int(torch.searchsorted(keep, torch.tensor(old)))


def trim_vocabulary(model: MaskedLanguageModel, keep: torch.Tensor) -> MaskedLanguageModel:
    """A copy of `model` with only the vocabulary rows `keep` (old ids, increasing), renumbered from 0.

    Every tensor with a row per vocabulary entry (the word embeddings, the tied decoder and its bias) is cut; a
    model whose tables hold more rows than the vocabulary (padding) gets its padding rows zero."""
    c = model.config
    keep = keep.to(torch.long)
    check_keep(keep, c.vocab_size, {"pad": c.pad_token_id})
    config = replace(c, vocab_size=len(keep), pad_token_id=new_id(keep, c.pad_token_id))
    trimmed = MaskedLanguageModel(config)
    rows = model.state_dict()[WORD_EMBEDDINGS].shape[0]  # the table's rows: the vocabulary, padded or not
    target = trimmed.state_dict()
    state = {}
    for name, tensor in model.state_dict().items():
        if (name == WORD_EMBEDDINGS or name.startswith("lm_head.decoder.")) and tensor.shape[0] == rows:
            cut = tensor.index_select(0, keep.to(tensor.device))
            pad = target[name].shape[0] - len(keep)
            state[name] = torch.cat([cut, cut.new_zeros(pad, *cut.shape[1:])]) if pad > 0 else cut
        else:
            state[name] = tensor
    trimmed.load_state_dict(state, strict=True)
    return trimmed.to(next(model.parameters()).device)
