"""Vocabulary-sized weights padded to a multiple of 64 rows inside the model, the tokenizer's size outside it.

A GPU runs the MLM head's three products over the (V, E) embedding matrix on tensor-core kernels only when V is
a multiple of 8; at XLM-R's 250,002 rows they fall back to slow `align2` kernels (Megatron-LM pads its
vocabulary for the same reason: `make_vocab_size_divisible_by`). So the embedding table and the tied output
layer hold `padded_rows` rows. The extra rows start at zero, are never an input (no token id reaches them)
and never a prediction (`MaskedLMHead` leaves their logits out of every softmax), so they stay zero.
State dicts show the tokenizer's size: trimmed when written, padded when read, so checkpoints, Hugging Face
exports and imports, and models saved before the padding existed all hold `vocab_size` rows.
"""

from __future__ import annotations

import torch
from torch import nn


def padded_rows(vocab_size: int, multiple: int) -> int:
    """`vocab_size` rounded up to a multiple of `multiple`."""
    return -(-vocab_size // multiple) * multiple


def _is_sharded(t: torch.Tensor) -> bool:
    # FSDP's DTensors are trimmed and padded as full tensors by train/fsdp.py, not shard by shard here
    return hasattr(t, "device_mesh")


def trim_state(state: dict[str, torch.Tensor], keys, vocab_size: int) -> None:
    """Cut the tensors under `keys` to `vocab_size` rows, in place. Tensors that were one (tied) stay one, and
    each is a copy of its own, so that safetensors sees no partly shared storage."""
    trimmed: dict[tuple, torch.Tensor] = {}
    for key in keys:
        t = state.get(key)
        if t is None or t.shape[0] <= vocab_size or _is_sharded(t):
            continue
        same = (t.device, t.data_ptr(), t.shape)  # state_dict() detaches each name apart: ties share memory
        if same not in trimmed:
            trimmed[same] = t.detach()[:vocab_size].clone()
        state[key] = trimmed[same]


def pad_state(state: dict[str, torch.Tensor], keys, vocab_size: int, rows: int) -> None:
    """Pad the tensors under `keys` that hold `vocab_size` rows with zero rows up to `rows`, in place."""
    for key in keys:
        t = state.get(key)
        if t is None or t.shape[0] != vocab_size or rows == vocab_size or _is_sharded(t):
            continue
        state[key] = torch.cat([t, t.new_zeros(rows - vocab_size, *t.shape[1:])])


def keep_vocabulary_in_state_dicts(module: nn.Module, keys: tuple[str, ...], vocab_size: int, rows: int) -> None:
    """Make `module`'s state dict hold `vocab_size` rows under `keys` (names relative to the module) while its
    parameters hold `rows`; loading pads what holds `vocab_size` rows."""
    module.vocabulary_keys = keys  # read by `vocabulary_keys_of` for FSDP's full state dicts

    def trim(module, state, prefix, local_metadata) -> None:
        trim_state(state, [prefix + k for k in keys], vocab_size)

    def pad(module, state, prefix, *args) -> None:
        pad_state(state, [prefix + k for k in keys], vocab_size, rows)

    module.register_state_dict_post_hook(trim)
    module.register_load_state_dict_pre_hook(pad)


def vocabulary_keys_of(module: nn.Module) -> list[tuple[list[str], int, int]]:
    """(full state-dict keys, vocab_size, rows) of every model inside `module` that pads its vocabulary."""
    found = []
    for prefix, sub in module.named_modules():
        keys = getattr(sub, "vocabulary_keys", None)
        if keys is not None:
            dot = f"{prefix}." if prefix else ""
            found.append(([dot + k for k in keys], sub.config.vocab_size, sub.config.embedding_rows))
    return found
