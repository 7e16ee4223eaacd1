"""Alignment error rate (Och & Ney 2003) with sure and possible links, and the gold files it reads.

A gold folder holds `src.txt` and `tgt.txt` (one pre-tokenised sentence per line, words separated by spaces)
and `gold.txt` (one line per sentence, Pharaoh links, 0-based, source first: `i-j` sure, `i?j` possible).
With predicted links A, sure links S and possible links P ⊇ S:
    precision = |A ∩ P| / |A|,  recall = |A ∩ S| / |S|,  AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from polyalign.io import DataError, open_binary, where

LINK = re.compile(r"^(\d+)([-?])(\d+)$")


@dataclass
class AERScore:
    aer: float
    precision: float
    recall: float
    """All three in percent."""


def _keys(links: Sequence[Sequence[tuple[int, int]]]) -> np.ndarray:
    """Every (sentence, i, j) as one int64, so set operations over a whole corpus are array operations."""
    rows = [(s, i, j) for s, sent in enumerate(links) for i, j in sent]
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return np.unique((a[:, 0] << 40) | (a[:, 1] << 20) | a[:, 2])


def alignment_error_rate(
    predicted: Sequence[Sequence[tuple[int, int]]],
    sure: Sequence[Sequence[tuple[int, int]]],
    possible: Sequence[Sequence[tuple[int, int]]],
) -> AERScore:
    """AER, precision and recall (percent) over a corpus; `possible` should include the sure links (it is
    united with them here either way)."""
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(f"{len(predicted)} predicted sentences, {len(sure)} sure, {len(possible)} possible")
    A, S = _keys(predicted), _keys(sure)
    P = np.union1d(_keys(possible), S)
    a_s, a_p = np.isin(A, S).sum(), np.isin(A, P).sum()
    precision = a_p / len(A) if len(A) else 0.0
    recall = a_s / len(S) if len(S) else 0.0
    aer = 1.0 - (a_s + a_p) / (len(A) + len(S)) if len(A) + len(S) else 0.0
    return AERScore(100.0 * float(aer), 100.0 * float(precision), 100.0 * float(recall))


def sentence_counts(predicted, sure, possible) -> np.ndarray:
    """Per sentence [|A|, |A ∩ S|, |A ∩ P|, |S|] (P united with S), shape (sentences, 4): AER's sufficient
    statistics, which add up over any sample of sentences."""
    out = np.zeros((len(predicted), 4), dtype=np.int64)
    for k, (a, s, p) in enumerate(zip(predicted, sure, possible, strict=True)):
        a, s = set(a), set(s)
        p = set(p) | s
        out[k] = len(a), len(a & s), len(a & p), len(s)
    return out


def aer_from_counts(counts: np.ndarray) -> np.ndarray:
    """AER (percent) from summed counts (..., 4)."""
    a, a_s, a_p, s = np.moveaxis(counts, -1, 0)
    return 100.0 * (1.0 - (a_s + a_p) / np.maximum(a + s, 1))


def aer_difference_interval(
    first, second, sure, possible, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """AER(second) - AER(first) on the same sentences, and its 95% paired bootstrap interval (sentences drawn
    with replacement, both aligners scored on each draw): (difference, low, high), in points."""
    a, b = sentence_counts(first, sure, possible), sentence_counts(second, sure, possible)
    draws = np.random.default_rng(seed).integers(0, len(a), size=(resamples, len(a)))  # (R, N) sentence ids
    differences = aer_from_counts(b[draws].sum(1)) - aer_from_counts(a[draws].sum(1))
    low, high = np.percentile(differences, [2.5, 97.5])
    return float(aer_from_counts(b.sum(0)) - aer_from_counts(a.sum(0))), float(low), float(high)


# ---------------------------------------------------------------------------------------------------------
# Reading text and gold files


def read_words(path: str | Path) -> Iterator[tuple[int, list[str]]]:
    """Yield (line number, words) of a pre-tokenised file, streaming; an empty line is a sentence of no words."""
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"{where(path, lineno)}: invalid UTF-8 (byte at {err.start + 1})") from None
            yield lineno, text.split()


def read_word_pairs(src: str | Path, tgt: str | Path) -> Iterator[tuple[int, list[str], list[str]]]:
    """Yield (line number, source words, target words) from two line-aligned files."""
    source, target = read_words(src), read_words(tgt)
    for (lineno, s), (_, t) in _zip_lines(source, target, src, tgt):
        yield lineno, s, t


def _zip_lines(a: Iterator, b: Iterator, path_a, path_b):
    while True:
        x, y = next(a, None), next(b, None)
        if x is None and y is None:
            return
        if x is None or y is None:
            short, long_, item = (path_a, path_b, y) if x is None else (path_b, path_a, x)
            raise DataError(
                f"{where(long_, item[0])}: {short} ends after {item[0] - 1} lines; the files must be line-aligned"
            )
        yield x, y


@dataclass
class GoldSet:
    """A gold word-alignment set: sentences and their sure and possible (⊇ sure) links."""

    name: str
    source: list[list[str]]
    target: list[list[str]]
    sure: list[list[tuple[int, int]]]
    possible: list[list[tuple[int, int]]]

    @property
    def languages(self) -> tuple[str, str] | None:
        """(source, target) language codes from a folder name such as `de-en` or `ro-en-wpt05`."""
        parts = self.name.split("-")
        if len(parts) >= 2 and all(p.isalpha() and 2 <= len(p) <= 3 for p in parts[:2]):
            return parts[0], parts[1]
        return None


def read_gold(folder: str | Path) -> GoldSet:
    """Read src.txt, tgt.txt and gold.txt from a gold folder, checking link syntax, ranges and line counts."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: gold folder not found (expected src.txt, tgt.txt, gold.txt)")
    pairs = list(read_word_pairs(folder / "src.txt", folder / "tgt.txt"))
    source, target = [p[1] for p in pairs], [p[2] for p in pairs]
    sure, possible = [], []
    gold_path = folder / "gold.txt"
    lines = list(read_words(gold_path))
    if len(lines) != len(pairs):
        raise DataError(
            f"{where(gold_path, min(len(lines), len(pairs)) + 1)}: gold.txt has {len(lines)} lines but src.txt "
            f"has {len(pairs)}; give one line of links per sentence pair (an empty line for none)"
        )
    for (lineno, tokens), s, t in zip(lines, source, target, strict=True):
        sure_links, possible_links = [], []
        for token in tokens:
            m = LINK.match(token)
            if m is None:
                raise DataError(
                    f"{where(gold_path, lineno)}: bad link {token!r}; write links as i-j (sure) or i?j (possible), "
                    "0-based, source index first"
                )
            i, j = int(m[1]), int(m[3])
            if i >= len(s) or j >= len(t):
                raise DataError(
                    f"{where(gold_path, lineno)}: link {token} is out of range: the sentence pair has {len(s)} "
                    f"source and {len(t)} target words (indices are 0-based, source first)"
                )
            (sure_links if m[2] == "-" else possible_links).append((i, j))
        sure.append(sure_links)
        possible.append(sorted(set(possible_links) | set(sure_links)))
    return GoldSet(folder.name, source, target, sure, possible)
