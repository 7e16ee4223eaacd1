"""A bitext aligned into files: Pharaoh links, and on request awesome-align's probability and word-pair files, one
line per pair, streaming in length-sorted chunks. Shared by `polyalign align` and `polyalign fit-aligner`."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import IO

from polyalign.align.aligner import Aligner, EncodedPair, chunks
from polyalign.align.bitext import Bitext, read_bitext
from polyalign.align.words import pharaoh
from polyalign.io import atomic_text_file, where
from polyalign.progress import tqdm
from polyalign.tables import console

MAX_NOTES = 20
"""Truncated pairs named one by one; any more are counted in one closing line."""


def align_bitext(
    aligner: Aligner,
    bitext: Bitext,
    total: int,
    links: IO[str],
    languages: tuple[str, str] | None = None,
    probabilities: Path | None = None,
    word_pairs: Path | None = None,
    chunk: int = 20000,
    progress: bool = True,
) -> list[tuple[int, EncodedPair]]:
    """Align every pair of a checked bitext with the aligner's reading into `links` (and the optional files, written
    atomically); returns the (line, pair) of every pair whose words ran past the model's positions."""
    method, layer = aligner.reading.method, aligner.reading.layer
    bar = tqdm(total=total, desc="align", unit="pair", dynamic_ncols=True, mininterval=1.0, disable=not progress)
    cut: list[tuple[int, EncodedPair]] = []
    scored = probabilities is not None  # link probabilities cost a softmax pass: only when asked for
    with ExitStack() as stack, bar:
        prob_file = stack.enter_context(atomic_text_file(probabilities)) if probabilities else None
        words_file = stack.enter_context(atomic_text_file(word_pairs)) if word_pairs else None
        for part in chunks(read_bitext(bitext), chunk):
            encoded = aligner.encode_words([(s, t) for _, s, t in part])
            found = aligner.align_encoded(encoded, [method], [layer], languages, with_probabilities=scored)
            found = found[(method, layer)] if scored else [(pair_links, []) for pair_links in found[(method, layer)]]
            write_pairs(part, found, links, prob_file, words_file)
            cut += [(line, p) for (line, _, _), p in zip(part, encoded, strict=True) if p.cut_source or p.cut_target]
            bar.update(len(part))
    return cut


def write_pairs(part, found, links_file: IO[str], prob_file: IO[str] | None, words_file: IO[str] | None) -> None:
    """One line per pair in each file: Pharaoh links, their probabilities, the linked words; `found` holds
    (links, probabilities) per pair."""
    links_file.write("".join(pharaoh(links) + "\n" for links, _ in found))
    links_file.flush()
    if prob_file is not None:
        prob_file.write("".join(" ".join(f"{p:.4g}" for p in probs) + "\n" for _, probs in found))
    if words_file is not None:
        for (_, s, t), (links, _) in zip(part, found, strict=True):
            words_file.write(" ".join(f"{s[i]}<sep>{t[j]}" for i, j in links) + "\n")


def report_cut_pairs(cut: list[tuple[int, EncodedPair]], path: Path, positions: int) -> None:
    """One line per pair whose words ran past the model's positions (those words have no links)."""
    for line, p in cut[:MAX_NOTES]:
        console.print(
            f"[yellow]note: {where(path, line)}: past the model's {positions} positions, {p.cut_source} of "
            f"{p.num_source} source and {p.cut_target} of {p.num_target} target words are unaligned[/yellow]",
            highlight=False,
            soft_wrap=True,  # one line per pair, whatever the terminal's width
        )
    if len(cut) > MAX_NOTES:
        console.print(f"[yellow]note: and {len(cut) - MAX_NOTES} more pairs past the positions[/yellow]")
