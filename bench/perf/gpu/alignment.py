"""What the GPU aligner step reads sentence pairs with: pairs from the training bitext, and pairs/s of a command."""

from __future__ import annotations

import gzip
import itertools
import os
from pathlib import Path

from bench.perf.gpu.step import ROOT, SAMPLE, SHARED


def rate(status: str, pairs: int, seconds: float) -> dict:
    """pairs/s of a whole command, start-up included; none for a command that did not finish."""
    return {"pairs_per_s": pairs / seconds} if status == "ok" else {}


def write_pairs(folder: Path, n: int) -> tuple[Path, Path, str]:
    """n sentence pairs (en-de, en-es, en-fr, en-ru in turn, repeated as needed) from ../shared/data/train when
    it is here, else from the bundled sample; words are the text split at spaces."""
    shared = SHARED / "data" / "train" / "parallel"
    langs = ("de", "es", "fr", "ru")
    if all((shared / f"en-{x}.{x}.gz").is_file() for x in langs):
        origin, read = shared, lambda p: gzip.open(f"{p}.gz", "rt", encoding="utf-8")
    else:
        origin, read = SAMPLE / "parallel", lambda p: open(p, encoding="utf-8")
    per_language = []
    for x in langs:
        with read(origin / f"en-{x}.{x}") as fx, read(origin / f"en-{x}.en") as fe:
            per_language.append(
                [(a.strip(), b.strip()) for a, b in itertools.islice(zip(fx, fe, strict=True), n // len(langs))]
            )
    interleaved = [p for group in itertools.zip_longest(*per_language) for p in group if p and p[0] and p[1]]
    pairs = list(itertools.islice(itertools.cycle(interleaved), n))
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = folder / "src.txt", folder / "tgt.txt"
    src.write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(b + "\n" for _, b in pairs), encoding="utf-8")
    return src, tgt, shown(origin)


def shown(path: Path) -> str:
    """A path as a person at the repository root would type it."""
    return os.path.relpath(path, ROOT) if path.is_relative_to(ROOT.parent) else str(path)
