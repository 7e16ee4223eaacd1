"""Extraction variants on the same hidden states: what the step from states to links is worth.

    flock /tmp/polyalign-cpu.lock python -m bench.probes.extraction_variants MODEL [MODEL ...] [--layers 7,8]

For each model folder and layer, every gold set's pairs are encoded once (separate encoding, bf16, bare "▁" pieces
unlinked, as the e5 protocol) and links are extracted in several ways from the same states:
- `argmax`, `itermax`, `softmax-0.1`: polyalign's methods (align/extract.py);
- `+mean3`: the states averaged over the layer and its two neighbours before the method;
- `+distortion-K`: SimAlign's distortion correction (Jalili Sabet et al. 2020, §2.4; `apply_distortion` in its
  released code): the similarity times 1 - K (i/(n-1) - j/(m-1))^2, a prior for links near the diagonal.
Each is scored on the whole gold set and its dev (even) and test (odd) halves (bench/selection.py `halves`); the
probe prints the mean over the gold sets of each and writes them to bench/results/extraction_variants.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from bench import selection as S
from bench.reporting import commit
from bench.selection_run import subset
from bench.studies.e5 import GOLD_SETS
from polyalign.align.extract import cosine_similarity, mutual_argmax, simalign_itermax, softmax_links
from polyalign.align.transport import dot_products
from polyalign.align.words import lift_to_words, link_lists, pad_word_ids
from polyalign.data.batching import length_batches

ROOT = Path(__file__).resolve().parents[2]
GOLD = ROOT / "../shared/data/eval/word_alignment"
OUT = ROOT / "bench/results/extraction_variants.json"


def distortion(scores: torch.Tensor, s_mask: torch.Tensor, t_mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """SimAlign's distortion correction: scores (..., B, n, m) times 1 - ratio (i/(n-1) - j/(m-1))^2, with n, m each
    pair's real lengths."""
    n, m = s_mask.sum(-1).clamp(min=2) - 1, t_mask.sum(-1).clamp(min=2) - 1  # (B,)
    i = torch.arange(s_mask.shape[-1], device=scores.device)[None, :] / n[:, None]  # (B, n)
    j = torch.arange(t_mask.shape[-1], device=scores.device)[None, :] / m[:, None]  # (B, m)
    return scores * (1.0 - ratio * (i[:, :, None] - j[:, None, :]) ** 2)


def argmax_links(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    forward, backward = mutual_argmax(scores, mask)
    return forward & backward


def variants(source, target, mask, s_mask, t_mask) -> dict[str, torch.Tensor]:
    """Links (B, n, m) per variant from states (3, B, n|m, C): the layer below, the layer, the layer above."""
    here_s, here_t = source[1], target[1]
    mean_s, mean_t = source.mean(0), target.mean(0)
    out = {}
    for tag, (s, t) in {"": (here_s, here_t), "+mean3": (mean_s, mean_t)}.items():
        cos = cosine_similarity(s, t)
        out[f"argmax{tag}"] = argmax_links(cos, mask)
        out[f"itermax{tag}"] = simalign_itermax(cos, mask)
        out[f"softmax-0.1{tag}"] = softmax_links(dot_products(s, t), mask, 0.1)
        for ratio in (0.25, 0.5):
            out[f"argmax{tag}+distortion-{ratio:g}"] = argmax_links(distortion(cos, s_mask, t_mask, ratio), mask)
    return out


def model_scores(folder: Path, layers: list[int]) -> dict:
    from polyalign.align.aer import read_gold
    from polyalign.align.aligner import Aligner
    from polyalign.checkpoint import load_model

    aligner = Aligner(load_model(folder), encoding="separate")
    out: dict = {}
    for name in GOLD_SETS:
        gold = read_gold(GOLD / name)
        encoded = aligner.encode_words(list(zip(gold.source, gold.target, strict=True)))
        lang = aligner._language_ids(gold.languages)
        found: dict = {}
        lengths = [2 * (max(len(p.source_ids), len(p.target_ids)) + 2) for p in encoded]
        wanted = sorted({k for layer in layers for k in (layer - 1, layer, layer + 1)})
        for idx in length_batches(lengths, aligner.batch_tokens):
            batch = [encoded[i] for i in idx]
            source, s_mask, target, t_mask = aligner._side_states(batch, wanted, lang)
            s_words = pad_word_ids([p.source_words for p in batch], s_mask.shape[1])
            t_words = pad_word_ids([p.target_words for p in batch], t_mask.shape[1])
            mask = (s_mask & (s_words >= 0))[:, :, None] & (t_mask & (t_words >= 0))[:, None, :]
            Ws, Wt = max(p.num_source for p in batch), max(p.num_target for p in batch)
            for layer in layers:
                k = [wanted.index(x) for x in (layer - 1, layer, layer + 1)]
                for variant, links in variants(source[k], target[k], mask, s_mask, t_mask).items():
                    words = link_lists(lift_to_words(links, s_words, t_words, Ws, Wt))
                    cell = found.setdefault((variant, layer), [None] * len(encoded))
                    for i, pair_links in zip(idx, words, strict=True):
                        cell[i] = pair_links
        from polyalign.evaluate.alignment import score_gold

        for (variant, layer), links in found.items():
            for half, rows in S.halves(len(links)).items():
                cell = out.setdefault(f"{variant}/{layer}", {}).setdefault(half, {})
                cell[name] = round(score_gold(subset(gold, rows), [links[i] for i in rows]).aer, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--layers", default="7,8")
    args = parser.parse_args()
    layers = [int(x) for x in args.layers.split(",")]
    saved = json.loads(OUT.read_text()) if OUT.is_file() else {}
    for model in args.models:
        started = time.time()
        scores = model_scores(ROOT / model, layers)
        saved.setdefault("models", {})[model] = scores
        saved["commit"], saved["gold_sets"] = commit(), list(GOLD_SETS)
        OUT.write_text(json.dumps(saved, indent=1) + "\n")
        print(f"{model} ({time.time() - started:.0f} s): mean AER over {len(GOLD_SETS)} sets, dev / test / all")
        for key, halves in sorted(scores.items(), key=lambda kv: S.mean(kv[1]["dev"], GOLD_SETS)):
            means = [S.mean(halves[h], GOLD_SETS) for h in ("dev", "test", "all")]
            print(f"  {key:40s} " + " / ".join(f"{m:.2f}" for m in means))


if __name__ == "__main__":
    main()
