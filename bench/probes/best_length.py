"""Why Tatoeba-14 is far below dev-split retrieval: sentence length, or the kind of sentence?

Tatoeba sentences are short (about 7 English words) and every candidate is short; the dev split of our bitext
has long sentences (about 22 words). This script separates the two at one layer of one model, on the visible
Tatoeba-14 languages:
  - accuracy by English sentence length, on the dev split and on Tatoeba (each retrieving among all its pairs);
  - a matched comparison: dev pairs whose English side has at most `--max-words` words, retrieving among those
    only, against Tatoeba pairs of the same length range subsampled to the same number of pairs per language
    (so the candidate pools have the same size and the same length range). If the short dev pairs retrieve as
    badly as matched Tatoeba, length explains the gap; if far better, the kind of sentence does.
Writes its numbers as JSON to --out. Light: one encoding pass over 2 x 14 x 1,000 pairs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bench.reporting import write_json
from polyalign.checkpoint import load_model
from polyalign.evaluate.embed import embed_sentences
from polyalign.evaluate.tatoeba import read_tatoeba, retrieval_hits
from polyalign.languages import TATOEBA_14

BUCKETS = ((1, 5), (6, 10), (11, 20), (21, 10_000))


def words(sentence: str) -> int:
    return len(sentence.split())


def embed_pairs(loaded, xx: list[str], en: list[str], lang: str, layer: int) -> tuple[np.ndarray, np.ndarray]:
    return embed_sentences(loaded, xx, lang)[layer], embed_sentences(loaded, en, "en")[layer]


def both_ways_hits(ex: np.ndarray, ee: np.ndarray, subset: np.ndarray | None = None) -> np.ndarray:
    """(2, N) hits, row 0 xx->en and row 1 en->xx, pair i as the query, retrieving among `subset` (default all)."""
    if subset is not None:
        ex, ee = ex[subset], ee[subset]
    return np.stack([retrieval_hits(ex, ee), retrieval_hits(ee, ex)])


def by_length(hits: np.ndarray, lengths: np.ndarray) -> list[dict]:
    rows = []
    for lo, hi in BUCKETS:
        sel = (lengths >= lo) & (lengths <= hi)
        acc = 100 * hits[:, sel].mean() if sel.any() else None
        rows.append({"words": f"{lo}-{hi}" if hi < 10_000 else f"{lo}+", "pairs": int(sel.sum()), "acc": acc})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--dev", type=Path, required=True, help="dev split folder (Tatoeba layout)")
    parser.add_argument("--tatoeba", type=Path, default=Path("../shared/data/eval/tatoeba"))
    parser.add_argument("--layer", type=int, required=True)
    parser.add_argument("--max-words", type=int, default=12, help="length range of the matched comparison")
    parser.add_argument("--draws", type=int, default=5, help="Tatoeba subsamples averaged in the matched comparison")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    loaded = load_model(args.model)
    rng = np.random.default_rng(0)
    sets = {"dev": ([], []), "tatoeba": ([], [])}  # name -> (hits per language, English lengths per language)
    matched = {"dev_short": [], "tatoeba_matched": [], "pairs_per_language": {}}
    for lang in TATOEBA_14:
        texts = {"dev": read_tatoeba(args.dev, lang), "tatoeba": read_tatoeba(args.tatoeba, lang)}
        vectors = {name: embed_pairs(loaded, xx, en, lang, args.layer) for name, (xx, en) in texts.items()}
        for name, (_, en) in texts.items():
            sets[name][0].append(both_ways_hits(*vectors[name]))
            sets[name][1].append(np.array([words(s) for s in en]))
        short = np.array([i for i, s in enumerate(texts["dev"][1]) if words(s) <= args.max_words], dtype=int)
        t_short = np.array([i for i, s in enumerate(texts["tatoeba"][1]) if words(s) <= args.max_words], dtype=int)
        n = min(len(short), len(t_short))
        matched["pairs_per_language"][lang] = n
        if n < 10:
            continue
        matched["dev_short"].append(100 * both_ways_hits(*vectors["dev"], short[:n]).mean())
        draws = [rng.choice(t_short, n, replace=False) for _ in range(args.draws)]
        matched["tatoeba_matched"].append(np.mean([100 * both_ways_hits(*vectors["tatoeba"], d).mean() for d in draws]))
    report = {
        "model": str(args.model),
        "layer": args.layer,
        "max_words": args.max_words,
        "by_length": {
            name: by_length(np.concatenate(hits, axis=1), np.concatenate(lengths))
            for name, (hits, lengths) in sets.items()
        },
        "words_per_english_sentence": {
            name: float(np.concatenate(lengths).mean()) for name, (_, lengths) in sets.items()
        },
        "matched": {
            "languages": len(matched["dev_short"]),
            "pairs_per_language": matched["pairs_per_language"],
            "dev_short_acc": float(np.mean(matched["dev_short"])),
            "tatoeba_matched_acc": float(np.mean(matched["tatoeba_matched"])),
        },
    }
    write_json(args.out, report)
    print(
        f"wrote {args.out}: matched dev-short {report['matched']['dev_short_acc']:.1f} vs Tatoeba "
        f"{report['matched']['tatoeba_matched_acc']:.1f}"
    )


if __name__ == "__main__":
    main()
