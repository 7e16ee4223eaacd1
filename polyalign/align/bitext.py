"""The bitext `polyalign align` reads: two line-aligned files, or one file of `source ||| target` lines (the
format of fast_align, eflomal and awesome-align). The whole input is checked before anything is aligned or
written, so a bad line costs no output; then it is read again, streaming, as (line, source words, target words).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from polyalign.align.aer import read_word_pairs, read_words
from polyalign.io import DataError, open_binary, where

SEPARATOR = "|||"
BOTH_FORMS = "give --src and --tgt (two line-aligned files) or --pairs FILE (`source ||| target` lines)"


@dataclass(frozen=True)
class Bitext:
    """Where the pairs come from: `source` and `target` files, or one `source ||| target` file (`target` None)."""

    source: Path
    target: Path | None = None

    def paths(self) -> list[Path]:
        return [self.source] if self.target is None else [self.source, self.target]


def bitext_from_options(src: Path | None, tgt: Path | None, pairs: Path | None) -> Bitext:
    """The bitext that --src, --tgt and --pairs name; --src alone is a `source ||| target` file."""
    if pairs is not None:
        if src is not None or tgt is not None:
            raise DataError(f"--pairs {pairs} holds both sides: drop --src/--tgt, or drop --pairs")
        return Bitext(pairs)
    if src is None:
        raise DataError(f"--tgt {tgt} needs --src; {BOTH_FORMS}" if tgt else BOTH_FORMS)
    if tgt is None:
        return Bitext(src)
    for path in (src, tgt):
        open_binary(path).close()  # a missing file is one line before anything else
    if os.path.samefile(src, tgt):
        raise DataError(
            f"--src and --tgt are the same file ({src}): every sentence would be aligned to itself; give the "
            "target side as --tgt, or a `source ||| target` file as --pairs"
        )
    return Bitext(src, tgt)


def split_pair(words: list[str], path: Path, line: int) -> tuple[list[str], list[str]]:
    """The words of a `source ||| target` line, split at its one separator."""
    marks = [k for k, w in enumerate(words) if w == SEPARATOR]
    if len(marks) != 1:
        found = "no ` ||| `" if not marks else f"{len(marks)} ` ||| `"
        raise DataError(
            f"{where(path, line)}: expected `source ||| target`, found {found}; one pair per line (for two "
            "line-aligned files give --src and --tgt)"
        )
    return words[: marks[0]], words[marks[0] + 1 :]


def check_bitext(bitext: Bitext) -> int:
    """Read the whole input once: the number of pairs, or a DataError (file:line) at its first problem."""
    if bitext.target is None:
        count = 0
        for count, words in read_words(bitext.source):
            split_pair(words, bitext.source, count)
        return count
    counts = []
    for path in bitext.paths():
        count = 0
        for count, words in read_words(path):
            if any(SEPARATOR in w for w in words):
                raise DataError(
                    f"{where(path, count)}: holds `|||`, but --src and --tgt are one side each; for "
                    f"`source ||| target` lines pass the file alone as --pairs {path}"
                )
        counts.append(count)
    if counts[0] != counts[1]:
        raise DataError(
            f"{bitext.source} has {counts[0]} lines but {bitext.target} has {counts[1]}: --src and --tgt must be "
            "line-aligned (one sentence pair per line number)"
        )
    return counts[0]


def read_bitext(bitext: Bitext) -> Iterator[tuple[int, list[str], list[str]]]:
    """Yield (line number, source words, target words), streaming."""
    if bitext.target is not None:
        yield from read_word_pairs(bitext.source, bitext.target)
        return
    for line, words in read_words(bitext.source):
        yield line, *split_pair(words, bitext.source, line)
