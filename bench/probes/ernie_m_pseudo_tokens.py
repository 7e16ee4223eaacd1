"""BTMLM pseudo-token precision on held-out pairs: each model's stage-1 pseudo-tokens for the dev
split of `polyalign prepare --dev-pairs`, scored against the true translations (polyalign/evaluate/pseudo_tokens.py).
Usage: python -m bench.run ernie-m-pseudo-tokens -- --data PREPARED/dev --langs all --out FILE.json \
           --model NAME=RUN_OR_MODEL [--model ...] [--ratio 0.15] [--max-pairs 200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from polyalign.checkpoint import load_model
from polyalign.evaluate.pseudo_tokens import pseudo_token_precision_on_pairs
from polyalign.evaluate.tatoeba import resolve_languages
from polyalign.io import write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, required=True, help="Tatoeba-layout folder of held-out pairs")
    parser.add_argument("--langs", default="all", help="`all`, `tatoeba14` or a comma list")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", action="append", required=True, help="NAME=model folder or run folder")
    parser.add_argument("--ratio", type=float, default=0.15, help="pseudo-tokens per sentence token (recipe ernie-m)")
    parser.add_argument("--max-pairs", type=int, default=200, help="pairs per language")
    args = parser.parse_args()
    torch.set_num_threads(2)
    languages = resolve_languages(args.langs, args.data)
    results = {}
    for spec in args.model:
        name, path = spec.split("=", 1)
        result = pseudo_token_precision_on_pairs(load_model(path), args.data, languages, args.ratio, args.max_pairs)
        results[name] = {"path": path, **result}
        print(
            f"{name}: pseudo-token precision {result['precision']:.3f} "
            f"(copy baseline {result['copy_precision']:.3f}, {result['pooled']['model']['pseudo_tokens']} tokens)",
            flush=True,
        )
    write_json(args.out, {"data": str(args.data), "results": results})
