"""XLM-Align's OT filtering (Eq. 9) read literally against the released code's Itermax, beside SimAlign's argmax and
itermax: on planted alignments (states built from the gold links, with noise) and on a model's own states.

The literal reading discounts by alpha every entry whose row or column holds a link, so a later round may link a
row and a column that are both aligned already; the released `iter_max` (polyalign's `filter_alignments`) gives
those entries weight 0. Writes bench/results/ot_filtering.md and .json.

  .venv/bin/python -m bench.probes.ot_filtering [--model ../shared/models/small-base]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from bench.reporting import page_text, provenance, table, write_json
from polyalign.align import extract
from polyalign.align.aer import alignment_error_rate, read_gold
from polyalign.align.aligner import Aligner
from polyalign.align.extract import OTSettings, ot_links, subword_links
from polyalign.checkpoint import load_model

GOLD = Path("../shared/data/eval/word_alignment")
SIGMAS = (0.5, 1.5, 3.0)
"""Noise of the planted states, in units of the word vectors' scale (1: as large as the signal)."""
DIM = 64


def literal_eq9(log_scores: torch.Tensor, mask: torch.Tensor, iterations: int = 2, alpha: float = 0.9):
    """Eq. (9) as printed: 0 at links, alpha x A* wherever the row or the column holds a link, A* elsewhere."""
    scores = log_scores.float().masked_fill(~mask, float("-inf"))
    links = torch.zeros(scores.shape, dtype=torch.bool)
    for _ in range(iterations):
        forward, backward = extract.mutual_argmax(scores, mask)
        links |= forward & backward & torch.isfinite(scores)
        touched = links.any(-1, keepdim=True) | links.any(-2, keepdim=True)
        scores = torch.where(links, float("-inf"), torch.where(touched, scores + math.log(alpha), scores))
    return links


def planted_states(n: int, m: int, sure, sigma: float, generator: torch.Generator):
    """Source words: random vectors; a target word: the mean of its sure-linked source words (a random vector
    when it has none), plus Gaussian noise of scale sigma; a shared offset keeps dot products positive, as the
    anisotropic states of trained encoders have them."""
    source = torch.randn(n, DIM, generator=generator)
    linked = [[i for i, j in sure if j == t] for t in range(m)]
    target = torch.stack([source[ids].mean(0) if ids else torch.randn(DIM, generator=generator) for ids in linked])
    target = target + sigma * torch.randn(m, DIM, generator=generator)
    offset = torch.randn(DIM, generator=generator)
    return source + offset, target + offset


def planted(gold_dir: Path) -> list[dict]:
    gold = read_gold(gold_dir)
    rows = []
    for sigma in SIGMAS:
        generator = torch.Generator().manual_seed(0)
        links = {"ot (released Itermax)": [], "ot (Eq. 9 literal)": [], "argmax": [], "itermax": []}
        for src, tgt, sure in zip(gold.source, gold.target, gold.sure, strict=True):
            hs, ht = planted_states(len(src), len(tgt), sure, sigma, generator)
            mask = torch.ones(len(src), len(tgt), dtype=torch.bool)
            found = {
                "ot (released Itermax)": subword_links("ot", hs, ht, mask),
                "ot (Eq. 9 literal)": with_literal_filtering(ot_links, hs, ht, mask),
                "argmax": subword_links("argmax", hs, ht, mask),
                "itermax": subword_links("itermax", hs, ht, mask),
            }
            for name, got in found.items():
                links[name].append([tuple(x) for x in got.nonzero().tolist()])
        for name, predicted in links.items():
            score = alignment_error_rate(predicted, gold.sure, gold.possible)
            rows.append({"sigma": sigma, "method": name, "aer": score.aer, "precision": score.precision})
    return rows


def with_literal_filtering(run, *args):
    """`run(*args)` with `ot`'s filtering swapped for the literal Eq. (9)."""
    released = extract.filter_alignments
    extract.filter_alignments = literal_eq9
    try:
        return run(*args)
    finally:
        extract.filter_alignments = released


def model_states(model: Path) -> list[dict]:
    """Both filterings on the model's own states (pair encoding, default layer), every gold set."""
    aligner = Aligner(load_model(model), encoding="pair", settings=OTSettings())
    rows = []
    for gold_dir in sorted(p for p in GOLD.iterdir() if (p / "gold.txt").is_file()):
        gold = read_gold(gold_dir)
        encoded = aligner.encode_words(list(zip(gold.source, gold.target, strict=True)))
        layer = aligner.default_layer
        released = aligner.align_encoded(encoded, ["ot"], [layer], gold.languages)[("ot", layer)]
        literal = with_literal_filtering(aligner.align_encoded, encoded, ["ot"], [layer], gold.languages)
        for name, predicted in (("ot (released Itermax)", released), ("ot (Eq. 9 literal)", literal[("ot", layer)])):
            score = alignment_error_rate(predicted, gold.sure, gold.possible)
            rows.append({"gold": gold_dir.name, "method": name, "aer": score.aer, "precision": score.precision})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("../shared/models/small-base"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/ot_filtering"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    synthetic, real = planted(GOLD / "de-en"), model_states(args.model)
    command = f"python -m bench.probes.ot_filtering --model {args.model}"
    saved = {"provenance": provenance(command), "model_path": str(args.model), "planted": synthetic, "model": real}
    write_json(args.out.with_suffix(".json"), saved)
    print(write_page(saved, args.out.with_suffix(".md")))


def write_page(saved: dict, page: Path) -> Path:
    """The page from what the probe saved (its JSON)."""
    synthetic, real = saved["planted"], saved["model"]
    model = saved.get("model_path", "../shared/models/small-base")
    methods = list(dict.fromkeys(r["method"] for r in synthetic))
    golds = list(dict.fromkeys(r["gold"] for r in real))
    by = {(r["sigma"], r["method"]): r for r in synthetic}
    on_model = {(r["gold"], r["method"]): r for r in real}
    lines = [
        "# OT filtering: Eq. 9 read literally vs the released Itermax",
        "",
        saved["provenance"],
        "",
        __doc__.split("\n\n")[1].replace("\n", " "),
        "",
        "## Planted alignments (de-en gold links, AER / precision, %)",
        "",
        table(
            ["noise sigma", *methods],
            [[s, *(f"{by[s, m]['aer']:.1f} / {by[s, m]['precision']:.1f}" for m in methods)] for s in SIGMAS],
        ),
        f"## {model} (pair encoding, default layer; AER / precision, %)",
        "",
        table(
            ["method", *golds],
            [
                [m, *(f"{on_model[g, m]['aer']:.2f} / {on_model[g, m]['precision']:.1f}" for g in golds)]
                for m in ("ot (released Itermax)", "ot (Eq. 9 literal)")
            ],
        ),
    ]
    page.write_text(page_text(lines))
    return page
