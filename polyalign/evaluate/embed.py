"""Sentence representations from any layer of a model: batched by length, pooled, all layers at once."""

from __future__ import annotations

import numpy as np
import torch

from polyalign.checkpoint import LoadedModel
from polyalign.data.batching import length_batches, pad_sequences
from polyalign.io import DataError
from polyalign.layers import check_layer, xtreme_sentence_layer
from polyalign.model.pooling import POOLINGS, pool
from polyalign.progress import tqdm


def check_sentence_options(num_layers: int, layer: int | None, pooling: str) -> int:
    """The layer to report (`xtreme_sentence_layer` when None), after checking it and the pooling."""
    layer = xtreme_sentence_layer(num_layers) if layer is None else layer
    check_layer(layer, num_layers)
    if pooling not in POOLINGS:
        raise DataError(f"--pooling {pooling}: use one of {', '.join(POOLINGS)}")
    return layer


@torch.no_grad()
def embed_sentences(
    loaded: LoadedModel,
    sentences: list[str],
    language: str | None = None,
    max_length: int = 256,
    batch_tokens: int = 16384,
    precision: str = "bf16",
    progress: bool = False,
    pooling: str = "mean",
    prefix: str = "",
) -> np.ndarray:
    """Pooled hidden states (see `pool`) of every layer: returns (L + 1, N, C) float32, index 0 being the
    embedding layer. Runs on the model's device, in bf16 autocast there unless `precision` is fp32. `prefix`
    is put before every sentence (E5 models expect `query: `; its tokens are pooled too, as E5 pools them)."""
    model, sp = loaded.model, loaded.tokenizer.special
    device = next(model.parameters()).device
    encoded = loaded.tokenizer.encode_batch([prefix + s for s in sentences])
    seqs = [[sp.cls, *ids[: max_length - 2], sp.sep] for ids in encoded]
    language_id = loaded.language_id(language) if language else None
    out = np.zeros((model.config.num_layers + 1, len(sentences), model.config.hidden_size), dtype=np.float32)
    batches = length_batches([len(s) for s in seqs], batch_tokens)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    for idx in tqdm(batches, desc="embed", disable=not progress, leave=False):
        ids, mask = pad_sequences([seqs[i] for i in idx], sp.pad)
        ids, mask = ids.to(device), mask.to(device)
        lang = None if language_id is None else torch.full_like(ids, language_id)
        with autocast:
            hidden = model(ids, attention_mask=mask, language_ids=lang, output_hidden_states=True).hidden_states
        pooled = pool(torch.stack(hidden).float(), mask, pooling)  # (L+1, B, T, C) -> (L+1, B, C)
        out[:, idx] = pooled.cpu().numpy()
    return out
