"""What the pair layout alone does to OT AER: each model's AER at every layer with the pair laid out as every model
now reads it (`<s> x </s> y </s>`, positions running on: polyalign/align/aligner.py PAIR_STYLE) and as XLM's TLM
lays it out (positions restarting at the second sentence, each side's language id when the model has them).

The restart gives a target word the position embedding of the source word at the same index: a diagonal prior that
no training put there. Measured on the same weights, so any difference is the layout's. Writes
bench/results/pair_layout.md and .json.

  .venv/bin/python -m bench.probes.pair_layout [--model ../shared/models/small-base --model RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench.reporting import page_text, provenance, table, write_json
from polyalign.align.aer import read_gold
from polyalign.align.aligner import PAIR_STYLE, Aligner
from polyalign.checkpoint import load_model
from polyalign.evaluate.alignment import score_gold

GOLD = Path("../shared/data/eval/word_alignment")
LAYOUTS = {PAIR_STYLE: "positions running on (every model's)", "xlm": "positions restarting at y (XLM's TLM)"}


def aer_by_layer(model: str, pair_style: str) -> list[float]:
    """Mean OT AER over the gold sets at every layer (0 = embeddings), pair encoding in `pair_style`."""
    loaded = load_model(model)
    per_gold = []
    for folder in sorted(p for p in GOLD.iterdir() if p.is_dir()):
        gold = read_gold(folder)
        aligner = Aligner(loaded, encoding="pair", pair_style=pair_style)
        layers = list(range(aligner.num_layers + 1))
        encoded = aligner.encode_words(list(zip(gold.source, gold.target, strict=True)))
        links = aligner.align_encoded(encoded, ["ot"], layers, gold.languages)
        per_gold.append([score_gold(gold, links[("ot", layer)]).aer for layer in layers])
    return [statistics.mean(column) for column in zip(*per_gold, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="model or run folder (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    models = args.model or ["../shared/models/small-base"]
    results = {m: {style: aer_by_layer(m, style) for style in LAYOUTS} for m in models}
    command = "flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.probes.pair_layout " + " ".join(
        f"--model {m}" for m in models
    )
    args.out.mkdir(parents=True, exist_ok=True)
    saved = {"provenance": provenance(command), "aer_by_layer": results}
    write_json(args.out / "pair_layout.json", saved)
    print(write_page(saved, args.out))


def write_page(saved: dict, out: Path) -> Path:
    """pair_layout.md in `out` from what the probe saved (its JSON)."""
    results = saved["aer_by_layer"]
    rows = [
        [f"`{m}`", LAYOUTS[style], *(f"{v:.2f}" for v in sweep)]
        for m, by_style in results.items()
        for style, sweep in by_style.items()
    ]
    depth = max(len(s) for by_style in results.values() for s in by_style.values())
    page = [
        "# OT AER under two pair layouts, same weights",
        "",
        saved["provenance"],
        "",
        "Mean OT AER over the 7 gold sets (pair encoding, XLM-Align's released Itermax filtering) at every layer "
        "(0 = embeddings). Lower is better; the difference between the two rows of a model is the layout's alone.",
        "",
        table(["model", "pair layout", *(f"layer {i}" for i in range(depth))], rows),
    ]
    (out / "pair_layout.md").write_text(page_text(page))
    return out / "pair_layout.md"


if __name__ == "__main__":
    main()
