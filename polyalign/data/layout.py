"""Turn token-id lists into padded model inputs: single sentences and translation pairs.

A single sentence is `<s> x </s>`. A translation pair (TLM) comes in two styles:
- `xlm`: `<s> x </s> <s> y </s>`, positions restart at the second sentence and every token carries its
  sentence's language id (XLM §3.3, Figure 1: TLM is MLM on a concatenated pair).
- `ppa`: `<s> x </s> y </s>`, positions run on, and which side comes first is random (PPA §2.2). TLM in this
  style passes no language ids; the aligner passes them for a model that has language embeddings (each token
  its side's), so that every model reads a pair in this one layout (polyalign/align/aligner.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyalign.tokenizer import SpecialTokens

TLM_STYLES = ("xlm", "ppa")


@dataclass
class Layout:
    """Padded batch, numpy arrays of shape (B, T)."""

    input_ids: np.ndarray
    attention_mask: np.ndarray  # True at real tokens
    position_ids: np.ndarray
    language_ids: np.ndarray | None
    maskable: np.ndarray  # True at real, non-special tokens (what MLM may corrupt)
    segment: np.ndarray  # 0 = first sentence (with its specials), 1 = second, -1 = padding

    def tensors(self) -> dict:
        import torch

        out = {
            "input_ids": torch.from_numpy(self.input_ids),
            "attention_mask": torch.from_numpy(self.attention_mask),
            "position_ids": torch.from_numpy(self.position_ids),
            "segment": torch.from_numpy(self.segment),
        }
        if self.language_ids is not None:
            out["language_ids"] = torch.from_numpy(self.language_ids)
        return out


def _empty(B: int, T: int, pad: int, with_languages: bool) -> Layout:
    return Layout(
        input_ids=np.full((B, T), pad, dtype=np.int64),
        attention_mask=np.zeros((B, T), dtype=bool),
        position_ids=np.zeros((B, T), dtype=np.int64),
        language_ids=np.zeros((B, T), dtype=np.int64) if with_languages else None,
        maskable=np.zeros((B, T), dtype=bool),
        segment=np.full((B, T), -1, dtype=np.int8),
    )


def _place(
    out: Layout, b: int, start: int, ids: np.ndarray, sp: SpecialTokens, seg: int, lang: int | None, position_start: int
) -> int:
    """Write `<s> ids </s>` into row b from column `start`; returns the column after it."""
    n = len(ids) + 2
    cols = slice(start, start + n)
    out.input_ids[b, cols] = np.concatenate(([sp.cls], ids, [sp.sep]))
    out.attention_mask[b, cols] = True
    out.position_ids[b, cols] = np.arange(position_start, position_start + n)
    out.maskable[b, start + 1 : start + n - 1] = True
    out.segment[b, cols] = seg
    if out.language_ids is not None and lang is not None:
        out.language_ids[b, cols] = lang
    return start + n


def sentence_layout(sentences: list[np.ndarray], languages: np.ndarray | None, sp: SpecialTokens) -> Layout:
    """`<s> x </s>` per row, right-padded."""
    T = max(len(s) for s in sentences) + 2
    out = _empty(len(sentences), T, sp.pad, languages is not None)
    for b, s in enumerate(sentences):
        _place(out, b, 0, s, sp, 0, None if languages is None else int(languages[b]), 0)
    return out


def pair_layout(
    first: list[np.ndarray],
    second: list[np.ndarray],
    first_languages: np.ndarray | None,
    second_languages: np.ndarray | None,
    sp: SpecialTokens,
    style: str = "xlm",
) -> Layout:
    """Concatenate two sentences per row in a TLM style (see the module docstring)."""
    if style not in TLM_STYLES:
        raise ValueError(f"style={style!r}: use one of {TLM_STYLES}")
    with_languages = first_languages is not None
    # ppa: <s> x </s> y </s>, so the second sentence has one special fewer.
    second_extra = 2 if style == "xlm" else 1
    T = max(len(x) + len(y) for x, y in zip(first, second, strict=True)) + 2 + second_extra
    out = _empty(len(first), T, sp.pad, with_languages)
    for b, (x, y) in enumerate(zip(first, second, strict=True)):
        lx = int(first_languages[b]) if with_languages else None
        ly = int(second_languages[b]) if with_languages else None
        col = _place(out, b, 0, x, sp, 0, lx, 0)
        if style == "xlm":
            _place(out, b, col, y, sp, 1, ly, 0)
        else:
            n = len(y) + 1
            cols = slice(col, col + n)
            out.input_ids[b, cols] = np.concatenate((y, [sp.sep]))
            out.attention_mask[b, cols] = True
            out.position_ids[b, cols] = np.arange(col, col + n)
            out.maskable[b, col : col + n - 1] = True
            out.segment[b, cols] = 1
            if with_languages:
                out.language_ids[b, cols] = ly
    return out
