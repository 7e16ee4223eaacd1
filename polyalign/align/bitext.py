"""The bitext `polyalign align` reads: two line-aligned files, or one file of `source ||| target` lines (the
format of fast_align, eflomal and awesome-align). The words are the whitespace-separated tokens of each line, or,
for raw text (`tokenize`), those split again around every punctuation character (`words_of`), so that `Cherie,` is
two words. The whole input is checked before anything is aligned or written, so a bad line costs no output, and a
pair with an empty side (nothing to align) is named in one note, in either form, and keeps its (empty) output line;
then the input is read again, streaming, as (line, source words, target words).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from polyalign.align.aer import read_word_pairs, read_words
from polyalign.io import DataError, open_binary, where
from polyalign.tables import console

SEPARATOR = "|||"
MAX_NAMED = 20
"""Pairs with an empty side named one by one in the note; any more are counted."""
BOTH_FORMS = "give --src and --tgt (two line-aligned files) or --pairs FILE (`source ||| target` lines)"


@dataclass(frozen=True)
class Bitext:
    """Where the pairs come from: `source` and `target` files, or one `source ||| target` file (`target` None)."""

    source: Path
    target: Path | None = None
    tokenize: bool = False
    """Raw text: split each line into words with `words_of` (the links index those words)."""

    def paths(self) -> list[Path]:
        return [self.source] if self.target is None else [self.source, self.target]


@cache
def _pre_tokenizer():
    from tokenizers.pre_tokenizers import BertPreTokenizer

    return BertPreTokenizer()


def words_of(words: list[str]) -> list[str]:
    """Raw text's words: BERT's pre-tokenisation (the `tokenizers` package), which splits at whitespace and around
    every punctuation character (`2014,` -> `2014` `,`; `don't` -> `don` `'` `t`) and keeps other text whole."""
    return [word for word, _ in _pre_tokenizer().pre_tokenize_str(" ".join(words))]


def bitext_from_options(src: Path | None, tgt: Path | None, pairs: Path | None, tokenize: bool = False) -> Bitext:
    """The bitext that --src, --tgt and --pairs name; --src alone is a `source ||| target` file."""
    if pairs is not None:
        if src is not None or tgt is not None:
            raise DataError(f"--pairs {pairs} holds both sides: drop --src/--tgt, or drop --pairs")
        return Bitext(pairs, tokenize=tokenize)
    if src is None:
        raise DataError(f"--tgt {tgt} needs --src; {BOTH_FORMS}" if tgt else BOTH_FORMS)
    if tgt is None:
        return Bitext(src, tokenize=tokenize)
    for path in (src, tgt):
        open_binary(path).close()  # a missing file is one line before anything else
    if os.path.samefile(src, tgt):
        raise DataError(
            f"--src and --tgt are the same file ({src}): every sentence would be aligned to itself; give the "
            "target side as --tgt, or a `source ||| target` file as --pairs"
        )
    return Bitext(src, tgt, tokenize)


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
    if bitext.target is not None:
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
                f"{bitext.source} has {counts[0]} lines but {bitext.target} has {counts[1]}: --src and --tgt must "
                "be line-aligned (one sentence pair per line number)"
            )
    count, empty = 0, []
    for count, source, target in read_bitext(bitext):
        if not source or not target:
            empty.append(empty_side(bitext, count, source, target))
    if empty:
        named = ", ".join(empty[:MAX_NAMED]) + (f" and {len(empty) - MAX_NAMED} more" if len(empty) > MAX_NAMED else "")
        console.print(
            f"[yellow]note: {named}: nothing to align, so no links (an empty output line) and, in fit-aligner, no "
            "training on the pair[/yellow]",
            highlight=False,
            soft_wrap=True,  # one line, whatever the terminal's width
        )
    return count


def empty_side(bitext: Bitext, line: int, source: list[str], target: list[str]) -> str:
    """Where a pair with an empty side is, and which side, in either input form."""
    if bitext.target is not None:
        return f"{where(bitext.source if not source else bitext.target, line)} (an empty line)"
    if not source and not target:
        return f"{where(bitext.source, line)} (an empty line)"
    return f"{where(bitext.source, line)} (an empty {'source' if not source else 'target'} side)"


def read_bitext(bitext: Bitext) -> Iterator[tuple[int, list[str], list[str]]]:
    """Yield (line number, source words, target words), streaming."""
    split = words_of if bitext.tokenize else list
    if bitext.target is not None:
        for line, source, target in read_word_pairs(bitext.source, bitext.target):
            yield line, split(source), split(target)
        return
    for line, words in read_words(bitext.source):
        if not words:
            yield line, [], []
            continue
        source, target = split_pair(words, bitext.source, line)
        yield line, split(source), split(target)
