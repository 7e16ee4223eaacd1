"""Held-out BTMLM perplexity (ERNIE-M Figure 5): each model at each pseudo-token ratio, on XNLI dev premises.

Perplexity = exp(mean stage-2 cross-entropy over all masked sentence tokens). The masking of the sentences
and the target languages are drawn from fixed seeds, so every model and every ratio is scored on the same
targets (BTMLM draws its masking on the sentence alone); ratio 0 appends no pseudo-tokens, i.e. plain MLM.
Usage: python -m bench.probes.ernie_m_perplexity --xnli DIR --out FILE.json --model NAME=RUN_OR_MODEL [--model ...]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import math
from pathlib import Path

import numpy as np
import torch

from polyalign.checkpoint import load_model
from polyalign.data.masking import IGNORE
from polyalign.data.streams import MonoBatch
from polyalign.io import write_json
from polyalign.objectives.btmlm import BTMLM, BTMLMConfig

RATIOS = (0.0, 0.05, 0.10, 0.15, 0.20)
MAX_LENGTH = 126  # as the mono stream of the recipes


def heldout_premises(xnli: Path, language: str, count: int) -> list[str]:
    """The first `count` distinct premises of XNLI dev in one language (never in the training data)."""
    with gzip.open(xnli / f"dev-{language}.tsv.gz", "rt", encoding="utf-8") as f:
        rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        return list(dict.fromkeys(r["premise"] for r in rows))[:count]


@torch.no_grad()
def btmlm_perplexity(loaded, sentences: list[np.ndarray], languages: np.ndarray, ratio: float, batch_size: int = 32):
    model = loaded.model.eval()
    objective = BTMLM(BTMLMConfig(pseudo_ratio=ratio), loaded.tokenizer.special, model.config, loaded.languages)
    total, count = 0.0, 0
    for k, start in enumerate(range(0, len(sentences), batch_size)):
        raw = MonoBatch(sentences[start : start + batch_size], languages[start : start + batch_size])
        batch = objective.make_batch(raw, np.random.default_rng([0, k]))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = objective(model, batch)
        n = int((batch["labels"] != IGNORE).sum())
        total, count = total + float(out.loss) * n, count + n
    return math.exp(total / count), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--xnli", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", action="append", required=True, help="NAME=model folder or run folder")
    parser.add_argument("--per-language", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(2)
    results = []
    for spec in args.model:
        name, path = spec.split("=", 1)
        loaded = load_model(path)
        texts, languages = [], []
        for language in loaded.languages:
            if not (args.xnli / f"dev-{language}.tsv.gz").is_file():
                continue  # not an XNLI language
            premises = heldout_premises(args.xnli, language, args.per_language)
            texts += premises
            languages += [loaded.language_id(language)] * len(premises)
        ids = [np.array(s[:MAX_LENGTH], dtype=np.int64) for s in loaded.tokenizer.encode_batch(texts)]
        for ratio in RATIOS:
            ppl, targets = btmlm_perplexity(loaded, ids, np.array(languages), ratio)
            results.append({"model": name, "path": path, "ratio": ratio, "perplexity": ppl, "targets": targets})
            print(f"{name} ratio {ratio:.2f}: perplexity {ppl:.2f} ({targets} targets)", flush=True)
    write_json(
        args.out,
        {
            "protocol": f"BTMLM stage-2 perplexity on the first {args.per_language} distinct XNLI dev premises of "
            f"each model language, greedy pseudo-tokens, bf16, fixed masking seeds",
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
