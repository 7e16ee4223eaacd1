"""Between token sequences and words: pick each side's tokens out of a layout, lift subword links to words.

XLM-Align §4.3: "if two subwords are aligned, the words they belong to are also aligned". Word indices of
the tokens come from `Tokenizer.encode_words`, which encodes every word on its own, so a token never
straddles two words (SentencePiece's standalone "▁" belongs to the word after it; a character the
vocabulary lacks is <unk> inside its word).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
import torch.nn.functional as F


def side_positions(selected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Column positions of the True entries of each row of `selected` (B, T), left-aligned and padded:
    returns (index (B, n), mask (B, n)) with n the most entries in a row; padding points at column 0."""
    counts = selected.sum(-1)  # (B,)
    n = int(counts.max()) if selected.numel() else 0
    order = torch.argsort((~selected).to(torch.int8), dim=-1, stable=True)[:, :n]  # True columns first, in order
    mask = torch.arange(n, device=selected.device) < counts[:, None]  # (B, n)
    return order.masked_fill(~mask, 0), mask


def gather_side(hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """hidden (..., B, T, C), index (B, n) -> (..., B, n, C)."""
    lead = hidden.shape[:-3]
    expanded = index.view(*[1] * len(lead), *index.shape, 1).expand(*lead, *index.shape, hidden.shape[-1])
    return hidden.gather(-2, expanded)  # (..., B, n, C)


def pad_word_ids(word_ids: list[list[int]], length: int) -> torch.Tensor:
    """Word index of each token, padded with -1 to `length`: (B, length)."""
    lengths = np.fromiter(map(len, word_ids), dtype=np.int64, count=len(word_ids))
    out = np.full((len(word_ids), length), -1, dtype=np.int64)
    out[np.arange(length) < lengths[:, None]] = np.fromiter(itertools.chain.from_iterable(word_ids), np.int64)
    return torch.from_numpy(out)  # row-major filling of the True entries keeps each row's order


def lift_to_words(
    links: torch.Tensor, source_words: torch.Tensor, target_words: torch.Tensor, num_source: int, num_target: int
) -> torch.Tensor:
    """Word links from token links: word a ~ word b iff some token of a is linked to some token of b.

    links (..., n, m) bool; source_words (B, n), target_words (B, m) word index per token, -1 at padding;
    links' leading dims end in B. Returns (..., num_source, num_target) bool.
    """
    S = _one_hot_words(source_words, num_source)  # (B, n, Ws)
    T = _one_hot_words(target_words, num_target)  # (B, m, Wt)
    words = S.transpose(-1, -2) @ links.float() @ T  # (..., Ws, Wt): linked token pairs per word pair
    return words > 0


def lift_max_to_words(
    values: torch.Tensor, source_words: torch.Tensor, target_words: torch.Tensor, num_source: int, num_target: int
) -> torch.Tensor:
    """Per word pair the largest of its token pairs' values (0 where it has none): values (..., B, n, m) >= 0,
    word indices as in `lift_to_words`; returns (..., B, num_source, num_target)."""
    s_index = torch.where(source_words < 0, num_source, source_words)  # padding goes to an extra row, dropped
    t_index = torch.where(target_words < 0, num_target, target_words)
    by_target = values.new_zeros(*values.shape[:-1], num_target + 1)  # (..., B, n, Wt + 1)
    by_target = by_target.scatter_reduce(-1, t_index[:, None, :].expand_as(values), values, "amax")
    by_both = values.new_zeros(*values.shape[:-2], num_source + 1, num_target + 1)  # (..., B, Ws + 1, Wt + 1)
    by_both = by_both.scatter_reduce(-2, s_index[:, :, None].expand_as(by_target), by_target, "amax")
    return by_both[..., :num_source, :num_target]


def _one_hot_words(word_ids: torch.Tensor, num_words: int) -> torch.Tensor:
    index = torch.where(word_ids < 0, num_words, word_ids)  # padding goes to an extra column, dropped below
    return F.one_hot(index, num_words + 1)[..., :num_words].float()


def link_lists(links: torch.Tensor) -> list[list[tuple[int, int]]]:
    """(B, n, m) bool -> per pair the sorted (i, j) links, with one nonzero() call for the whole batch."""
    found = links.nonzero().cpu().numpy()  # (K, 3): b, i, j in row-major (hence sorted) order
    counts = np.bincount(found[:, 0], minlength=links.shape[0])
    return [list(map(tuple, part.tolist())) for part in np.split(found[:, 1:], np.cumsum(counts)[:-1])]


def values_at_links(links: torch.Tensor, values: torch.Tensor) -> list[list[float]]:
    """(B, n, m) bool links and values -> per pair the values at its links, in `link_lists` order."""
    found = links.nonzero()  # (K, 3), row-major as in link_lists
    picked = values[found[:, 0], found[:, 1], found[:, 2]].cpu().tolist()
    counts = torch.bincount(found[:, 0], minlength=links.shape[0]).tolist()
    out, start = [], 0
    for count in counts:
        out.append(picked[start : start + count])
        start += count
    return out


def pharaoh(links: list[tuple[int, int]]) -> str:
    """Links as a Pharaoh line: `i-j i-j ...` (0-based, source first)."""
    return " ".join(f"{i}-{j}" for i, j in links)


def parse_pharaoh(line: str) -> list[tuple[int, int]]:
    """A Pharaoh line (`pharaoh`'s output) back as links."""
    return [(int(i), int(j)) for i, j in (link.split("-") for link in line.split())]
