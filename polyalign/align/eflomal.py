"""The statistical baseline: eflomal (Östling & Tiedemann 2016) trained on bitext plus the test sentences.

As awesome-align and SimAlign run it: the test pairs are aligned together with a larger bitext of the same
language pair (eflomal is unsupervised, so the test sentences are part of its training text), both
directions are aligned, and the two are symmetrised with grow-diag-final-and. The bitext is raw text, so it
is tokenised to look like the gold's tokenisation: punctuation split off; Chinese and Japanese, which the
gold segments into words, by longest match against the words of the test sentences (no segmenter needed).
"""

from __future__ import annotations

import tempfile
import unicodedata
from collections.abc import Iterable
from pathlib import Path

Links = list[tuple[int, int]]
NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))
UNSEGMENTED = ("zh", "ja")


def grow_diag_final_and(forward: Iterable[tuple[int, int]], reverse: Iterable[tuple[int, int]]) -> Links:
    """Koehn et al. (2003) symmetrisation: start from the intersection, grow into neighbouring (also
    diagonal) union links that cover an unaligned word, then add union links whose both words are unaligned."""
    forward, reverse = set(forward), set(reverse)
    union = forward | reverse
    links = forward & reverse
    rows, cols = {i for i, _ in links}, {j for _, j in links}

    def add(i: int, j: int) -> None:
        links.add((i, j))
        rows.add(i)
        cols.add(j)

    grown = True
    while grown:  # grow-diag
        grown = False
        for i, j in sorted(links):
            for di, dj in NEIGHBOURS:
                k = (i + di, j + dj)
                if k in union and k not in links and (k[0] not in rows or k[1] not in cols):
                    add(*k)
                    grown = True
    for direction in (forward, reverse):  # final-and
        for i, j in sorted(direction):
            if i not in rows and j not in cols:
                add(i, j)
    return sorted(links)


def tokenize(text: str) -> list[str]:
    """Whitespace tokens with every punctuation character split off as its own token."""
    out = []
    for word in text.split():
        current = ""
        for ch in word:
            if unicodedata.category(ch).startswith("P"):
                if current:
                    out.append(current)
                out.append(ch)
                current = ""
            else:
                current += ch
        if current:
            out.append(current)
    return out


def segment_longest_match(text: str, vocabulary: set[str], longest: int = 8) -> list[str]:
    """Greedy longest-match word segmentation of unsegmented text (Chinese, Japanese) against a vocabulary;
    characters no vocabulary word covers become one-character tokens."""
    out = []
    for chunk in tokenize(text):
        i = 0
        while i < len(chunk):
            for size in range(min(longest, len(chunk) - i), 0, -1):
                if size == 1 or chunk[i : i + size] in vocabulary:
                    out.append(chunk[i : i + size])
                    i += size
                    break
    return out


def strip_diacritics(text: str) -> str:
    """Romanian WPT test text is mostly written without diacritics; strip them from bitext to match."""
    return "".join(c for c in unicodedata.normalize("NFD", text) if not unicodedata.combining(c))


def tokenize_bitext(lines: Iterable[str], language: str, test_sentences: list[list[str]]) -> list[str]:
    """Raw bitext lines -> space-joined tokens resembling the gold tokenisation of `language`."""
    if language in UNSEGMENTED:
        vocabulary = {w for sent in test_sentences for w in sent}
        return [" ".join(segment_longest_match(line, vocabulary)) for line in lines]
    if language == "ro":
        return [" ".join(tokenize(strip_diacritics(line))) for line in lines]
    return [" ".join(tokenize(line)) for line in lines]


def eflomal_align(test: list[tuple[list[str], list[str]]], bitext: list[tuple[str, str]]) -> list[Links]:
    """Align the test pairs (words given) with eflomal trained on them plus `bitext` (tokenised lines,
    space-separated); grow-diag-final-and of both directions. Returns word links per test pair."""
    import eflomal

    src = [" ".join(s) for s, _ in test] + [s for s, _ in bitext]
    tgt = [" ".join(t) for _, t in test] + [t for _, t in bitext]
    # eflomal cannot read empty sentences; a placeholder token keeps the line count (its links are dropped).
    src = [s if s.strip() else "∅" for s in src]
    tgt = [t if t.strip() else "∅" for t in tgt]
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "forward.links", Path(tmp) / "reverse.links"
        eflomal.Aligner().align(src, tgt, links_filename_fwd=str(fwd), links_filename_rev=str(rev), quiet=True)
        forward = fwd.read_text(encoding="utf-8").splitlines()
        reverse = rev.read_text(encoding="utf-8").splitlines()
    out = []
    for (s, t), f_line, r_line in zip(test, forward, reverse, strict=False):
        links = grow_diag_final_and(_parse(f_line), _parse(r_line))
        out.append([(i, j) for i, j in links if i < len(s) and j < len(t)])
    return out


def _parse(line: str) -> Links:
    return [tuple(map(int, link.split("-"))) for link in line.split()]
