"""The unigram floors of a prepared folder's text: its token counts read from the shards, their entropy computed
by bench/verdict.py's pure functions. The runner stores the floors with a section's results; the rules read them."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from bench.verdict import conditional_entropy, entropy


def token_counts(prepared: Path, language: str) -> np.ndarray:
    """Token counts of one language in a `polyalign prepare` folder: its mono text and its side of every pair."""
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
    """`unigram`: H(token | language) over the languages (None: every language of the folder); `unigram:en`: the
    floor of a translation loss into English, the unigram entropy of the English text."""
    if kind == "unigram":
        languages = languages or tuple(json.loads((prepared / "meta.json").read_text())["languages"])
        return conditional_entropy({lang: token_counts(prepared, lang) for lang in languages})
    if kind.startswith("unigram:"):
        return entropy(token_counts(prepared, kind.removeprefix("unigram:")))
    raise ValueError(f"floor {kind!r}: use 'unigram' or 'unigram:<language>'")
