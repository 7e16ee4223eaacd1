"""Sentence-level code-switching with English for translate-train fine-tuning (PPA §2.3).

A translated pair-input example in language xx (premise/hypothesis, question/context) and its English
original become two examples, (a_xx, b_en) and (a_en, b_xx); the original (a_xx, b_xx) is not used
(PPA footnote 2), and the two must meet in the same batch: they share a `group`, and the fine-tuning loop
batches whole groups (`loop.training_batches`). Examples are dataclasses; each side names its fields, and
everything that belongs to a side moves with it (its language; for QA, the answer span moves with the
context). Fields on neither side (the label, an id) come from the translated example.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace


def code_switch(translated, english, first: Sequence[str], second: Sequence[str]) -> tuple:
    """(a_xx, b_en) and (a_en, b_xx) from (a_xx, b_xx) and its English original (a_en, b_en).
    `first` and `second` name the fields of side a and side b."""
    with_english_second = replace(translated, **{f: getattr(english, f) for f in second})
    with_english_first = replace(translated, **{f: getattr(english, f) for f in first})
    return with_english_second, with_english_first


def code_switch_training_set(
    examples: Sequence, originals: Mapping[str, object], key: str, first: Sequence[str], second: Sequence[str]
) -> tuple[list, int]:
    """English examples as they are; every translated example replaced by its two code-switched versions, which
    share a group (§2.3: code-switching is for the languages other than English). `originals` holds the English
    examples by `key` (the field that links a translation to its original). Returns the examples and how many
    translated examples had no English original (dropped)."""
    out, missing = [], 0
    for e in examples:
        if e.language == "en":
            out.append(e)
            continue
        english = originals.get(getattr(e, key))
        if english is None:
            missing += 1
            continue
        group = f"{getattr(e, key)}:{e.language}"
        out += [replace(x, group=group) for x in code_switch(e, english, first, second)]
    return out, missing


def describe(before: int, after: int, missing: int) -> str:
    """The protocol sentence for a code-switched training set."""
    dropped = f"; {missing} without an English original were dropped" if missing else ""
    return (
        f" Code-switched (PPA §2.3): every translated training example is replaced by (a_xx, b_en) and "
        f"(a_en, b_xx), trained in the same batch, the original dropped; English examples stay as they are; "
        f"{before} -> {after} training examples{dropped}."
    )
