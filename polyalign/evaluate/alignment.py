"""Word-alignment evaluation: AER against gold sure/possible links, at one layer or swept over all layers.

Protocol: words given (gold tokenisation), each sentence encoded on its own (`separate`) unless asked
otherwise, token links from the hidden states of one layer by `ot` / `argmax` / `itermax`, lifted to word
links ("if two subwords are aligned, their words are aligned"), AER with sure and possible links.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from polyalign.align.aer import AERScore, GoldSet, alignment_error_rate, read_gold
from polyalign.align.aligner import Aligner, check_layer
from polyalign.checkpoint import LoadedModel

PROTOCOL = (
    "AER (Och & Ney) with sure/possible gold links; words given; {encoding} encoding; layer {layer} "
    "(0 = embeddings); method {method}; subword links lifted to words"
)


@dataclass
class AlignmentResult:
    pair: str
    method: str
    layer: int
    aer: float
    precision: float
    recall: float
    encoding: str = "separate"
    sentences: int = 0
    sweep: list[dict] | None = field(default=None)
    """Per layer {"layer", "aer", "precision", "recall"}, when all layers were evaluated."""

    def to_dict(self) -> dict:
        out = {
            "pair": self.pair,
            "method": self.method,
            "layer": self.layer,
            "aer": round(self.aer, 2),
            "precision": round(self.precision, 2),
            "recall": round(self.recall, 2),
            "encoding": self.encoding,
            "sentences": self.sentences,
            "protocol": PROTOCOL.format(encoding=self.encoding, layer=self.layer, method=self.method),
        }
        if self.sweep is not None:
            out["sweep"] = self.sweep
        return out

    def write_sweep(self, out_dir: str | Path, title: str = "word alignment") -> tuple[Path, Path]:
        from polyalign.evaluate.plots import plot_series

        if self.sweep is None:
            raise ValueError("no layer sweep: evaluate with sweep=True")
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        csv_path = out_dir / "alignment_layers.csv"
        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["layer", "aer", "precision", "recall"])
            for row in self.sweep:
                w.writerow([row["layer"], row["aer"], row["precision"], row["recall"]])
        layers = [r["layer"] for r in self.sweep]
        png = plot_series(
            {k: (layers, [r[k] for r in self.sweep]) for k in ("aer", "precision", "recall")},
            out_dir / "alignment_layers.png",
            "layer",
            "%",
            f"{title}: {self.pair}, {self.method}",
        )
        return csv_path, png


def _row(layer: int, score: AERScore) -> dict:
    return {
        "layer": layer,
        "aer": round(score.aer, 2),
        "precision": round(score.precision, 2),
        "recall": round(score.recall, 2),
    }


def score_gold(gold: GoldSet, links) -> AERScore:
    return alignment_error_rate(links, gold.sure, gold.possible)


def evaluate_alignment(
    loaded_model: LoadedModel,
    gold_dir: str | Path,
    method: str = "ot",
    layer: int | None = None,
    sweep: bool = False,
    encoding: str = "separate",
    batch_tokens: int = 8192,
    progress: bool = False,
) -> AlignmentResult:
    """AER of `method` at `layer` (default: two thirds up) on a gold folder; with `sweep`, every layer too
    (one encoding pass either way)."""
    gold = read_gold(gold_dir)
    aligner = Aligner(loaded_model, encoding=encoding, batch_tokens=batch_tokens)
    layer = aligner.default_layer if layer is None else layer
    check_layer(layer, aligner.num_layers)
    layers = list(range(aligner.num_layers + 1)) if sweep else [layer]
    encoded = aligner.encode_words(list(zip(gold.source, gold.target, strict=True)))
    links = aligner.align_encoded(encoded, [method], layers, gold.languages, progress)
    scores = {lay: score_gold(gold, links[(method, lay)]) for lay in layers}
    s = scores[layer]
    rows = [_row(lay, scores[lay]) for lay in layers] if sweep else None
    return AlignmentResult(gold.name, method, layer, s.aer, s.precision, s.recall, encoding, len(gold.source), rows)
