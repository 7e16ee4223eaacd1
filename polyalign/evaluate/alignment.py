"""Word-alignment evaluation: AER against gold sure/possible links, at one layer or swept over all layers.

Protocol: words given (gold tokenisation); the model read as `polyalign align` reads it (`resolve_reading`: the
folder's alignment.json, then the arguments given, then the fallbacks), so that this scores the links `align`
writes; token links from the hidden states of one layer, lifted to word links ("if two subwords are
aligned, their words are aligned"), AER with sure and possible links. Pairs longer than the model's position
table are truncated (their cut-off words get no links) and counted, not hidden.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from polyalign.align.aer import AERScore, GoldSet, alignment_error_rate, read_gold
from polyalign.align.aligner import PROTOCOL_VERSION, Aligner
from polyalign.checkpoint import LoadedModel
from polyalign.io import atomic_text_file

PROTOCOL = (
    "AER (Och & Ney) with sure/possible gold links; words given; {encoding} encoding; layer {layer} "
    "(0 = embeddings); method {method}; subword links lifted to words; {truncated} of {sentences} pairs "
    "truncated to the model's positions"
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
    softmax_threshold: float | None = None
    """The `softmax` method's threshold (None for the other methods)."""
    sentences: int = 0
    truncated: int = 0
    """Pairs cut to fit the position table (scored with the words that fit; the cut-off ones get no links)."""
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
            "truncated": self.truncated,
            "protocol": PROTOCOL.format(**vars(self)),
            "protocol_version": PROTOCOL_VERSION,
        }
        if self.method == "softmax":
            out["softmax_threshold"] = self.softmax_threshold
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
        with atomic_text_file(csv_path) as f:  # a reader never sees half a table
            w = csv.writer(f)
            w.writerow(["layer", "aer", "precision", "recall", "method", "encoding", "truncated"])
            for row in self.sweep:
                w.writerow(
                    [
                        row["layer"],
                        row["aer"],
                        row["precision"],
                        row["recall"],
                        self.method,
                        self.encoding,
                        self.truncated,
                    ]
                )
        layers = [r["layer"] for r in self.sweep]
        png = plot_series(
            {k: (layers, [r[k] for r in self.sweep]) for k in ("aer", "precision", "recall")},
            out_dir / "alignment_layers.png",
            "layer",
            "%",
            f"{title}: {self.pair}, {self.method}, {self.encoding} encoding",
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
    method: str | None = None,
    layer: int | None = None,
    sweep: bool = False,
    encoding: str | None = None,
    batch_tokens: int = 8192,
    progress: bool = False,
    precision: str = "bf16",
    softmax_threshold: float | None = None,
) -> AlignmentResult:
    """AER on a gold folder with the model read as `resolve_reading` says for these arguments (None: the folder's
    alignment.json, else the fallback); with `sweep`, every layer too (one encoding pass either way)."""
    gold = read_gold(gold_dir)
    aligner = Aligner(loaded_model, encoding, batch_tokens, precision, softmax_threshold=softmax_threshold,
                      method=method, layer=layer)  # fmt: skip
    method, layer = aligner.reading.method, aligner.reading.layer
    layers = list(range(aligner.num_layers + 1)) if sweep else [layer]
    encoded = aligner.encode_words(list(zip(gold.source, gold.target, strict=True)))
    links = aligner.align_encoded(encoded, [method], layers, gold.languages, progress)
    scores = {lay: score_gold(gold, links[(method, lay)]) for lay in layers}
    s = scores[layer]
    rows = [_row(lay, scores[lay]) for lay in layers] if sweep else None
    threshold = aligner.softmax_threshold if method == "softmax" else None
    return AlignmentResult(gold.name, method, layer, s.aer, s.precision, s.recall, aligner.encoding, threshold,
                           len(gold.source), aligner.truncated, rows)  # fmt: skip
