"""Packed rows: several examples (sentences, or translation pairs read as one sequence) laid side by side in rows
of a fixed length, so that a batch carries almost no padding (RoBERTa §4.2 packs full sentences; ModernBERT and
MosaicBERT train unpadded).

A stream that packs places each example it draws into the first row with room for it (`RowFiller`) and ends the
batch at the first example that fits nowhere; the batch's tokens then count real tokens only. The objective lays
its examples out and masks them one by one, as without packing, and `pack_batch` moves each example's tokens to its
place. Every packed token carries `example_ids`, the index of its example in the batch (-1 at padding): the encoder
keeps attention inside an example, and positions, language ids and token types are each example's own, so a packed
example is encoded as if it were alone. `unpadding_indices` finds where the real tokens and examples of a batch lie,
for an encoder that computes no padding at all (model/unpadded.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from polyalign.data.masking import IGNORE

ROW_MULTIPLE = 8
"""Row lengths are rounded up to a multiple of this: GPU attention and matrix kernels want aligned shapes."""


@dataclass
class Packing:
    """Where each example of a batch lies: `rows` rows of `length` tokens; example b at (row, start column)."""

    rows: int
    length: int
    placement: list[tuple[int, int]] = field(default_factory=list)


def row_length(longest_example: int) -> int:
    """The packed rows' length for examples of at most `longest_example` tokens (special tokens included)."""
    return -(-longest_example // ROW_MULTIPLE) * ROW_MULTIPLE


class RowFiller:
    """First-fit placement of examples into at most `rows` rows of `length` tokens."""

    def __init__(self, rows: int, length: int):
        self.packing = Packing(rows, length)
        self.used = [0] * rows

    def rows_used(self) -> Packing:
        """The packing cut to the rows that hold an example (first fit opens a row only when those before it are
        full, so these come first): a batch capped by its examples count computes no empty rows."""
        return Packing(sum(u > 0 for u in self.used), self.packing.length, list(self.packing.placement))

    def place(self, n: int) -> bool:
        """Put an example of n tokens in the first row with room for it; False (nothing placed) when none has."""
        for r, used in enumerate(self.used):
            if used + n <= self.packing.length:
                self.packing.placement.append((r, used))
                self.used[r] = used + n
                return True
        return False


PADDING = {"labels": IGNORE, "segment": -1}
"""What a packed row holds after its last example, by batch key (input ids: the tokenizer's padding id; else 0)."""


def pack_batch(batch: dict[str, torch.Tensor], packing: Packing, pad_id: int) -> dict[str, torch.Tensor]:
    """Lay an unpacked batch's examples into packed rows. Every (B, T) entry moves with its example (each
    example's real tokens, where `attention_mask` is True, start at column 0 of its row, as the layouts put them);
    (B,) entries stay one per example; `example_ids` (rows, length) is added."""
    mask = batch["attention_mask"].bool()  # (B, T)
    B, T = mask.shape
    if len(packing.placement) != B:
        raise ValueError(f"the packing places {len(packing.placement)} examples, the batch has {B}")
    lengths = mask.sum(1)  # (B,)
    if not bool((mask == (torch.arange(T) < lengths[:, None])).all()):
        raise ValueError("pack_batch needs each example's real tokens first in its row (right padding)")
    # Destination of every real token: flat index row * length + start + column.
    rows = torch.tensor([r for r, _ in packing.placement], dtype=torch.long)
    starts = torch.tensor([s for _, s in packing.placement], dtype=torch.long)
    if bool((starts + lengths > packing.length).any()):
        raise ValueError(f"an example does not fit its place in a row of {packing.length} tokens")
    destination = (rows * packing.length + starts)[:, None] + torch.arange(T)  # (B, T)
    destination = destination[mask]  # (N,) in row-major order of the real tokens
    size = packing.rows * packing.length

    def move(values: torch.Tensor, fill) -> torch.Tensor:
        out = torch.full((size,), fill, dtype=values.dtype)
        out[destination] = values[mask]
        return out.view(packing.rows, packing.length)

    packed = {}
    for key, value in batch.items():
        if not torch.is_tensor(value) or value.dim() == 0 or value.shape[0] != B:
            packed[key] = value
        elif value.shape == (B, T):
            packed[key] = move(value, pad_id if key == "input_ids" else PADDING.get(key, 0))
        elif value.dim() == 1:
            packed[key] = value
        else:
            raise ValueError(f"pack_batch: {key} has shape {tuple(value.shape)}, neither (B, T) nor (B,)")
    packed["example_ids"] = move(torch.arange(B)[:, None].expand(B, T), -1)
    return packed


UNPADDING_INPUTS = ("token_index", "cu_seqlens", "max_seqlen")
"""The batch entries `unpadding_indices` adds, keyword arguments of the encoder's forward."""


def unpadding_indices(batch: dict[str, torch.Tensor], prefix: str = "") -> dict:
    """token_index, cu_seqlens and max_seqlen (see model/unpadded.py) of one side of a CPU batch, keyed with
    `prefix`: the examples of packed rows (`example_ids`), else one per row (its `attention_mask`, or the whole row)."""
    ids = batch[prefix + "input_ids"]
    B, T = ids.shape
    example_ids = batch.get(prefix + "example_ids")
    mask = batch.get(prefix + "attention_mask")
    if example_ids is not None:
        real = example_ids >= 0
        example = example_ids
    else:
        if mask is not None and mask.dim() != 2:
            raise ValueError(f"{prefix}attention_mask of shape {tuple(mask.shape)}: unpadding takes (B, T) masks only")
        real = mask.bool() if mask is not None else torch.ones(B, T, dtype=torch.bool)
        example = torch.arange(B)[:, None].expand(B, T)
    token_index = real.flatten().nonzero().squeeze(1)  # (N,) row-major
    _, lengths = torch.unique_consecutive(example.flatten()[token_index], return_counts=True)  # (S,)
    cu_seqlens = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu_seqlens[1:] = lengths.cumsum(0)
    return {
        prefix + "token_index": token_index,
        prefix + "cu_seqlens": cu_seqlens,
        prefix + "max_seqlen": int(lengths.max()) if len(lengths) else 0,
    }
