"""Sentence-level code-switching with English for translate-train fine-tuning (PPA §2.3).

A translated pair-input example in language xx (premise/hypothesis, question/context) and its English
original become two examples, (a_xx, b_en) and (a_en, b_xx); the original (a_xx, b_xx) is not used
(PPA footnote 2), and the two must meet in the same batch. Examples are plain mappings (field -> value);
each side names its fields, and everything that belongs to a side moves with it (for QA, the answer span
moves with the context). Fields on neither side (the label, an id) come from the translated example.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from polyalign.io import DataError


def code_switch(
    translated: Mapping, english: Mapping, first: Sequence[str], second: Sequence[str]
) -> tuple[dict, dict]:
    """(a_xx, b_en) and (a_en, b_xx) from (a_xx, b_xx) and its English original (a_en, b_en).
    `first` and `second` name the fields of side a and side b."""
    with_english_second = {**translated, **{f: english[f] for f in second}}
    with_english_first = {**translated, **{f: english[f] for f in first}}
    return with_english_second, with_english_first


def code_switched_groups(
    translated: Sequence[Mapping], english: Sequence[Mapping], first: Sequence[str], second: Sequence[str]
) -> list[tuple[dict, dict]]:
    """One pair of code-switched examples per translated example; translated[i] translates english[i]."""
    if len(translated) != len(english):
        raise DataError(
            f"code-switching needs each translated example's English original: got {len(translated)} translated "
            f"and {len(english)} English examples; pass the translate-train file aligned with the English one"
        )
    return [code_switch(t, e, first, second) for t, e in zip(translated, english, strict=True)]


def batches_keeping_groups(groups: Sequence[Sequence], batch_size: int, rng: np.random.Generator) -> list[list]:
    """Shuffle the groups and fill batches with whole groups, so a group never straddles two batches (§2.3:
    both code-switched versions of an example are in the same batch). Groups may have any size up to
    batch_size (English examples in translate-train-all are groups of one)."""
    if any(len(g) > batch_size for g in groups):
        raise ValueError(f"batch_size={batch_size} is smaller than a group of {max(map(len, groups))} examples")
    batches, current = [], []
    for i in rng.permutation(len(groups)):
        group = groups[i]
        if len(current) + len(group) > batch_size:
            batches.append(current)
            current = []
        current.extend(group)
    if current:
        batches.append(current)
    return batches
