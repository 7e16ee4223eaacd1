"""eflomal's AER on every gold set: the statistical aligner the encoders are held against (bench/results/alignment.md,
best.md). eflomal trains on the en-xx training bitext of each gold set's languages and aligns the gold sentences.

Usage: flock /tmp/polyalign-cpu.lock python -m bench.probes.eflomal_baseline [--limit N] [--out FILE.json]
Writes per gold set: AER, precision, recall, bitext and test pairs, seconds (the `eflomal` entry of
bench/results/alignment.json was measured so, with every bitext line).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import time
from pathlib import Path

from bench.measures import GOLD_SETS
from bench.reporting import commit, machine, write_json
from polyalign.align.aer import alignment_error_rate, read_gold
from polyalign.align.eflomal import eflomal_align, tokenize_bitext


def read_bitext(folder: Path, source_lang: str, target_lang: str, limit: int) -> tuple[list[str], list[str]]:
    """The en-xx training pair for a gold set's languages, oriented source -> target, first `limit` lines."""
    xx = source_lang if target_lang == "en" else target_lang

    def lines(lang: str) -> list[str]:
        with gzip.open(folder / f"en-{xx}.{lang}.gz", "rt", encoding="utf-8") as f:
            return [line.strip() for line in itertools.islice(f, limit or None)]

    return lines(source_lang), lines(target_lang)


def run_eflomal(gold_root: Path, bitext: Path, limit: int) -> dict:
    out = {}
    for pair in GOLD_SETS:
        gold = read_gold(gold_root / pair)
        source_lang, target_lang = gold.languages
        src, tgt = read_bitext(bitext, source_lang, target_lang, limit)
        train = list(
            zip(
                tokenize_bitext(src, source_lang, gold.source),
                tokenize_bitext(tgt, target_lang, gold.target),
                strict=True,
            )
        )
        t0 = time.perf_counter()
        links = eflomal_align(list(zip(gold.source, gold.target, strict=True)), train)
        seconds = time.perf_counter() - t0
        score = alignment_error_rate(links, gold.sure, gold.possible)
        out[pair] = {**vars(score), "bitext_pairs": len(train), "test_pairs": len(gold.source), "seconds": seconds}
        print(f"eflomal {pair}: AER {score.aer:.2f} ({len(train)} bitext pairs, {seconds:.0f} s)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gold-root", type=Path, default=Path("../shared/data/eval/word_alignment"))
    parser.add_argument("--bitext", type=Path, default=Path("../shared/data/train/parallel"))
    parser.add_argument("--limit", type=int, default=0, help="bitext pairs per language pair (0 = all)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/alignment/eflomal.json"))
    args = parser.parse_args()
    result = {"code": commit(), "machine": machine(), "eflomal": run_eflomal(args.gold_root, args.bitext, args.limit)}
    write_json(args.out, result)


if __name__ == "__main__":
    main()
