"""Extractive QA's pure functions: characters <-> tokens, context windows, span decoding (finetune/qa.py).

Characters <-> tokens. Our SentencePiece tokenizer has no offsets API, so the context is split on whitespace
into words with character spans, the words are tokenized one by one (`encode_words`: the same pieces
SentencePiece gives the whole text, since it splits on whitespace first), and each piece is placed inside its
word by piece lengths (`piece_offsets`). When normalisation changed a word's length (NFKC, <unk>), its pieces
all get the whole word's span. Contexts without spaces (zh, th) are long "words" that piece lengths still
resolve character by character.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np


def context_words(context: str) -> list[tuple[str, int]]:
    """Whitespace-separated words with their character offsets."""
    return [(m.group(), m.start()) for m in re.finditer(r"\S+", context)]


def piece_offsets(word: str, pieces: list[str], unknown: str = "<unk>") -> list[tuple[int, int]]:
    """Character span of each piece inside `word`, walking the pieces along the word.

    Pieces are matched against the word NFKC-normalised character by character (SentencePiece's `nmt_nfkc`
    normalises, e.g. full-width "，" to ","), and each normalised position maps back to the character it came
    from. The word-start marker "▁" and WordPiece's "##" have no width; an unknown piece covers the gap up to
    the next piece that matches. If a piece cannot be found, it and the rest share the rest of the word.
    """
    normalised, owner = "", []
    for i, ch in enumerate(word):
        n = unicodedata.normalize("NFKC", ch)
        normalised += n
        owner += [i] * len(n)
    owner.append(len(word))  # one past the end
    surfaces = [p.removeprefix("\u2581").removeprefix("##") for p in pieces]
    spans: list[tuple[int, int] | None] = []
    pos, pending = 0, []  # pending: indices of unknown pieces waiting for the next match
    for k, surface in enumerate(surfaces):
        if surface == unknown:
            pending.append(k)
            spans.append(None)
            continue
        found = normalised.find(surface, pos) if pending else (pos if normalised.startswith(surface, pos) else -1)
        if found < 0:  # give up: this piece and the rest share what is left of the word
            rest = (owner[pos], len(word))
            return [s if s is not None else rest for s in spans] + [rest] * (len(pieces) - k)
        for u in pending:
            spans[u] = (owner[pos], owner[found])
        pending = []
        spans.append((owner[found], owner[found + len(surface)]))
        pos = found + len(surface)
    for u in pending:
        spans[u] = (owner[pos], len(word))
    return spans


def answer_token_span(spans: list[tuple[int, int]], start_char: int, end_char: int) -> tuple[int, int] | None:
    """First and last token overlapping the character range [start_char, end_char)."""
    inside = [t for t, (s, e) in enumerate(spans) if e > start_char and s < end_char]
    return (inside[0], inside[-1]) if inside else None


def context_windows(n_tokens: int, size: int, stride: int) -> list[tuple[int, int]]:
    """[start, end) token ranges of at most `size` tokens, starts `stride` apart, the last one reaching the end."""
    windows, start = [], 0
    while True:
        end = min(n_tokens, start + size)
        windows.append((start, end))
        if end >= n_tokens:
            return windows
        start += stride


def max_context_flags(windows: list[tuple[int, int]]) -> list[list[bool]]:
    """For each window and token: is this the window where the token has the most context on both sides?"""
    best: dict[int, tuple[float, int]] = {}
    for w, (s, e) in enumerate(windows):
        for t in range(s, e):
            score = min(t - s, e - 1 - t) + 0.01 * (e - s)
            if t not in best or score > best[t][0]:
                best[t] = (score, w)
    return [[best[t][1] == w for t in range(s, e)] for w, (s, e) in enumerate(windows)]


def best_window_span(
    start_logits: np.ndarray, end_logits: np.ndarray, max_context: list[bool], n_best: int, max_answer_length: int
) -> tuple[float, int, int] | None:
    """Best (score, start, end) over one window's context tokens (indices into the window)."""
    n = len(max_context)
    starts = np.argsort(-start_logits[:n])[:n_best]
    ends = np.argsort(-end_logits[:n])[:n_best]
    best = None
    for s in starts:
        if not max_context[s]:
            continue
        for e in ends:
            if e < s or e - s + 1 > max_answer_length:
                continue
            score = float(start_logits[s] + end_logits[e])
            if best is None or score > best[0]:
                best = (score, int(s), int(e))
    return best
