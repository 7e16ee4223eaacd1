"""Attention inside each example of packed rows (several examples side by side in one row; see
polyalign/data/packing.py): FlexAttention's block mask where it runs fused, a materialised boolean mask elsewhere."""

from __future__ import annotations

import functools

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from polyalign.model.compiling import compiled

FLEX_ATTENTION_DEVICES = ("cuda",)
"""Devices on which packed rows attend through FlexAttention; elsewhere through a materialised (B, 1, T, T) mask
(on a CPU the explicit path is the faster one, and FlexAttention has no CPU backward)."""
FLEX_MIN_HEAD_SIZE = 16
"""Narrowest head FlexAttention's CUDA kernel takes (Triton's dot products need 16); narrower ones take the mask."""


def flex_attention_fits(config, training: bool, device: torch.device) -> bool:
    """FlexAttention for an encoder's packed rows where it runs fused, unless the attention needs what it lacks:
    an additive position bias (which takes the materialised mask), attention dropout while training, heads of at
    least FLEX_MIN_HEAD_SIZE."""
    dropout = training and config.attention_dropout > 0
    heads = config.hidden_size // config.num_heads >= FLEX_MIN_HEAD_SIZE
    return device.type in FLEX_ATTENTION_DEVICES and config.position_bias == "none" and not dropout and heads


@functools.cache
def flex_attention_for(device_type: str):
    """FlexAttention compiled into one fused kernel on CUDA (eager it materialises the scores); eager elsewhere."""
    return compiled(flex_attention, dynamic=False) if device_type == "cuda" else flex_attention


def packed_attention_mask(example_ids: torch.Tensor, flex: bool):
    """Attention kept inside each example of packed rows: query i may see key j when both carry the same example
    id (padding, id -1, sees only padding, so no softmax runs over nothing). example_ids (B, T) -> a BlockMask
    when `flex` (built once per batch and shared by every layer: blocks of two examples are skipped), else
    boolean (B, 1, T, T)."""
    B, T = example_ids.shape
    if not flex:
        return (example_ids[:, :, None] == example_ids[:, None, :])[:, None]  # (B, 1, T, T)

    def same_example(b, h, q_index, kv_index):
        return example_ids[b, q_index] == example_ids[b, kv_index]

    return create_block_mask(same_example, B, None, T, T, device=example_ids.device)
