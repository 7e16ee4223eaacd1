"""The unigram floor of a language-model loss: what predicting every token from its language's frequencies alone
scores, in nats. A masked-token loss (MLM, TLM, an RTD generator) or a translation loss at or above it says the
model has not yet learned anything a context could tell it, so measures that need context (retrieval, word
alignment, translation) cannot separate two such models: the investigation of a claim reads that as scale.

Masked positions are drawn uniformly from the text's tokens, so the expected loss of the per-language unigram
predictor is H(token | language) = sum_l n_l H_l / sum_l n_l over the training text (mono and parallel sides).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

UNIGRAM = "unigram"
"""Floor of a masked-token loss over the section's training languages: H(token | language)."""
TARGET_PREFIX = "unigram:"
"""`unigram:en`: floor of a translation loss into English: the unigram entropy of the English text."""
MAJORITY_PREFIX = "majority:"
"""`majority:mrtd/replaced`: floor of a detector's accuracy: predicting "original" at every token scores 1 - the
replaced rate (a metric the same run logs), so a detector at that accuracy has learned nothing to detect with."""
MAJORITY_MARGIN = 0.005
"""Accuracy within half a point of the majority floor counts as at it (the only position a detector can tell
without learning, the never-masked <s> and </s>, is worth about that much)."""


def majority_floor(replaced_rate: float) -> float:
    """Accuracy of predicting the more frequent of replaced / original at every token."""
    return max(replaced_rate, 1.0 - replaced_rate)


def beats_majority(accuracy: float, majority: float) -> bool:
    """A detector has learned something to detect with: its accuracy is above the majority floor by more than
    MAJORITY_MARGIN."""
    return accuracy > majority + MAJORITY_MARGIN


def first_step_beating_majority(curve: list[dict]) -> int | None:
    """The first logged window ({step, discriminator_accuracy, replaced}) whose detector beats the majority class
    of its own replaced rate (None: none does)."""
    return next(
        (p["step"] for p in curve if beats_majority(p["discriminator_accuracy"], majority_floor(p["replaced"]))),
        None,
    )


def entropy(counts: np.ndarray) -> float:
    """Shannon entropy (nats) of the distribution the counts give."""
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def conditional_entropy(counts_by_language: dict[str, np.ndarray]) -> float:
    """H(token | language): each language's unigram entropy, weighted by its number of tokens."""
    totals = {lang: float(c.sum()) for lang, c in counts_by_language.items() if c.sum() > 0}
    if not totals:
        raise ValueError("no tokens to count")
    return sum(totals[lang] * entropy(counts_by_language[lang]) for lang in totals) / sum(totals.values())


def token_counts(prepared: Path, language: str) -> np.ndarray:
    """Token counts of one language in a `polyalign prepare` folder: its monolingual text and its side of every
    parallel file."""
    meta = json.loads((prepared / "meta.json").read_text())
    dtype, size = np.dtype(meta["dtype"]), int(meta["vocab_size"])
    files = [prepared / "mono" / f"{language}.ids", *sorted((prepared / "parallel").glob(f"*.{language}.ids"))]
    counts = np.zeros(size, dtype=np.int64)
    for path in files:
        if path.is_file():
            counts += np.bincount(np.fromfile(path, dtype=dtype), minlength=size)[:size]
    return counts


@functools.cache
def unigram_floor(kind: str, prepared: Path, languages: tuple[str, ...] | None) -> float:
    """The floor named by a Check's `floor` (UNIGRAM or `unigram:<lang>`), from a prepared folder (languages
    None: every language it holds). Cached: the claims of a section share it, and it reads the whole corpus."""
    if kind == UNIGRAM:
        if languages is None:
            languages = json.loads((prepared / "meta.json").read_text())["languages"]
        return conditional_entropy({lang: token_counts(prepared, lang) for lang in languages})
    if kind.startswith(TARGET_PREFIX):
        return entropy(token_counts(prepared, kind.removeprefix(TARGET_PREFIX)))
    raise ValueError(f"floor {kind!r}: use {UNIGRAM!r} or '{TARGET_PREFIX}<language>'")
