"""A development split of the bitext: pairs held out of training, for choosing recipes without test sets.

`prepare --dev-pairs N` sets aside N seeded, randomly chosen pairs of every en-xx parallel file and writes
them in the Tatoeba layout (`dev/tatoeba.{xxx}-eng.{xxx|eng}`), so `evaluate tatoeba --data PREPARED/dev
--langs all` retrieves among them with the same protocol as the test set. The held-out pairs never enter the
token shards. (Their English side may still occur in another language's pairs, as the English side of
multi-way parallel text such as Bible verses does.)
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from polyalign.languages import to_tatoeba

DEV_FOLDER = "dev"


def dev_line_numbers(num_lines: int, num_dev: int, name: str, seed: int = 0) -> set[int]:
    """1-based line numbers of the `num_dev` pairs held out of a file of `num_lines` lines; seeded by the
    file's pair name, so every run of prepare holds out the same pairs."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
    picks = rng.choice(num_lines, size=min(num_dev, num_lines), replace=False)
    return {int(i) + 1 for i in picks}


def write_dev_pairs(out: Path, src_lang: str, tgt_lang: str, pairs: list[tuple[str, str]]) -> Path | None:
    """Write held-out (src, tgt) pairs of an English pair in the Tatoeba layout; returns the xx file, or
    None when neither side is English (the Tatoeba layout needs one)."""
    if "en" not in (src_lang, tgt_lang) or src_lang == tgt_lang:
        return None
    xx_lang = tgt_lang if src_lang == "en" else src_lang
    code = to_tatoeba(xx_lang)
    folder = out / DEV_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    xx = [b if src_lang == "en" else a for a, b in pairs]
    en = [a if src_lang == "en" else b for a, b in pairs]
    (folder / f"tatoeba.{code}-eng.{code}").write_text("".join(t + "\n" for t in xx), encoding="utf-8")
    (folder / f"tatoeba.{code}-eng.eng").write_text("".join(t + "\n" for t in en), encoding="utf-8")
    return folder / f"tatoeba.{code}-eng.{code}"
