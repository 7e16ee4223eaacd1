"""Which hidden layer to read when none is chosen: each paper's rule for its depth, scaled to a model's depth,
and the check of a layer someone chose. Layer 0 is the embeddings, layer L the last of L layers."""

from __future__ import annotations

from polyalign.io import DataError


def xtreme_sentence_layer(num_layers: int) -> int:
    """Sentence retrieval (Tatoeba, BUCC): XTREME's layer 7 of XLM-R base's 12 (Hu et al. 2020), scaled to the
    depth and rounded half up (4 of 6, 2 of 4)."""
    return max(1, (7 * num_layers + 6) // 12)


def simalign_word_layer(num_layers: int) -> int:
    """Word alignment: SimAlign's layer 8 of 12 (Jalili Sabet et al. 2020; also where XLM-Align's Figure 4
    peaks), i.e. two thirds of the way up, rounded up (4 of 6)."""
    return max(1, -(-2 * num_layers // 3))


def xlm_align_label_layer(num_layers: int) -> int:
    """DWA's self-labelling layer: XLM-Align's layer 10 of 12 (Table 11), the same fraction of the depth
    (at least 1)."""
    return max(1, round(10 * num_layers / 12))


def check_layer(layer: int, num_layers: int) -> None:
    if not 0 <= layer <= num_layers:
        raise DataError(f"--layer {layer}: the model has layers 0..{num_layers} (0 = embeddings)")
