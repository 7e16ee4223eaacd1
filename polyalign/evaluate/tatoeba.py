"""Tatoeba sentence retrieval (LASER test set; XTREME protocol).

Protocol: mean-pooled hidden states of one layer (XTREME's layer 7 of 12, scaled to the depth), cosine
similarity, nearest neighbour; acc@1 from xx to English and from English to xx, per language and averaged.
`score="margin"` ranks by the ratio margin (Artetxe and Schwenk 2019) instead, which discounts hub sentences.
All layers are computed in one pass, so a layer sweep costs nothing extra; every distinct sentence is encoded
once (English ones recur across languages), and one score matrix per layer serves both directions.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from polyalign.checkpoint import LoadedModel
from polyalign.evaluate.embed import check_sentence_options, embed_sentences
from polyalign.evaluate.margin import MARGIN_K, margin_matrix
from polyalign.io import DataError, LinePolicy, atomic_text_file, read_lines
from polyalign.languages import TATOEBA_14, to_tatoeba

PROTOCOL = (
    "Tatoeba: {pooling}-pooled hidden states of layer {layer} (0 = embeddings), {score} nearest neighbour, "
    "acc@1 xx->en and en->xx"
)
SCORES = ("cosine", "margin")


def read_tatoeba(data_dir: str | Path, lang: str) -> tuple[list[str], list[str]]:
    """Line-aligned (xx sentences, English sentences) from tatoeba.{xxx}-eng.{xxx|eng}."""
    code = to_tatoeba(lang)
    base = Path(data_dir) / f"tatoeba.{code}-eng"
    policy = LinePolicy(max_chars=100_000, on_bad="error", fix="evaluation files must have no bad lines; fix the file")
    xx = [t for _, t in read_lines(f"{base}.{code}", policy)]
    en = [t for _, t in read_lines(f"{base}.eng", policy)]
    if len(xx) != len(en):
        raise DataError(f"{base}.{code}: {len(xx)} lines but {base}.eng has {len(en)}; they must be line-aligned")
    return xx, en


def available_languages(data_dir: str | Path) -> list[str]:
    names = {p.name.split(".")[1].split("-")[0] for p in Path(data_dir).glob("tatoeba.*-eng.eng")}
    return sorted(names)


def resolve_languages(spec: str, data_dir: str | Path, loaded: LoadedModel | None = None) -> list[str]:
    """`tatoeba14`, `all`, or a comma list (ISO 639-1 or 639-3 codes)."""
    have = available_languages(data_dir)
    if not have:
        raise DataError(f"{data_dir}: no tatoeba.*-eng.eng files here")
    if spec == "all":
        return have
    wanted = list(TATOEBA_14) if spec == "tatoeba14" else [to_tatoeba(s.strip()) for s in spec.split(",") if s.strip()]
    missing = [w for w in wanted if w not in have]
    if missing:
        raise DataError(f"{data_dir}: no Tatoeba files for {missing}; available: {', '.join(have)}")
    return wanted


def similarity_scores(queries: np.ndarray, keys: np.ndarray, score: str = "cosine") -> np.ndarray:
    """(Nq, Nk) cosines, or ratio margins, of every query against every key (one matmul)."""
    q = torch.nn.functional.normalize(torch.from_numpy(queries), dim=-1)
    k = torch.nn.functional.normalize(torch.from_numpy(keys), dim=-1)
    similarity = (q @ k.T).numpy()  # (Nq, Nk) cosines
    if score == "margin":
        return margin_matrix(similarity)
    if score != "cosine":
        raise ValueError(f"score={score!r}: use one of {SCORES}")
    return similarity


def retrieval_hits(queries: np.ndarray, keys: np.ndarray, score: str = "cosine") -> np.ndarray:
    """Per query, whether nearest-neighbour search (by cosine or ratio margin) finds key i for query i."""
    return similarity_scores(queries, keys, score).argmax(1) == np.arange(len(queries))


def retrieval_accuracy(queries: np.ndarray, keys: np.ndarray, score: str = "cosine") -> float:
    """acc@1 of nearest-neighbour search (by cosine or ratio margin) where query i's correct key is key i."""
    return float(retrieval_hits(queries, keys, score).mean())


def retrieval_accuracies(xx: np.ndarray, en: np.ndarray, score: str = "cosine") -> tuple[float, float]:
    """acc@1 xx->en and en->xx from one score matrix: both scores are symmetric (the ratio margin of (x, y)
    uses both neighbourhoods), so en->xx reads the columns of the xx->en matrix."""
    similarity = similarity_scores(xx, en, score)  # (N, N): rows xx, columns en
    truth = np.arange(len(xx))
    return float((similarity.argmax(1) == truth).mean()), float((similarity.argmax(0) == truth).mean())


def embed_unique(loaded: LoadedModel, sentences: list[str], language: str, **options) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct sentence embedded once: returns the (L + 1, U, C) embeddings and, per input sentence, its
    row among them (a sentence's embedding does not depend on the others in its length-sorted batch)."""
    unique, index = np.unique(np.array(sentences, dtype=object), return_inverse=True)
    return embed_sentences(loaded, list(unique), language, **options), index.reshape(-1)


@dataclass
class TatoebaResult:
    layers: list[int]
    languages: list[str]
    xx_to_en: np.ndarray  # (layers, languages) accuracy in %
    en_to_xx: np.ndarray
    layer: int  # the reported layer
    sizes: dict[str, int] = field(default_factory=dict)
    pooling: str = "mean"
    score: str = "cosine"
    prefix: str = ""

    def row(self, layer: int) -> dict:
        i = self.layers.index(layer)
        per_lang = {
            lang: {"xx_to_en": round(float(self.xx_to_en[i, j]), 2), "en_to_xx": round(float(self.en_to_xx[i, j]), 2)}
            for j, lang in enumerate(self.languages)
        }
        out = {
            "layer": layer,
            "per_language": per_lang,
            "average": {
                "xx_to_en": float(self.xx_to_en[i].mean()),
                "en_to_xx": float(self.en_to_xx[i].mean()),
                "both": float((self.xx_to_en[i].mean() + self.en_to_xx[i].mean()) / 2),
            },
        }
        t14 = [j for j, lang in enumerate(self.languages) if lang in TATOEBA_14]
        if len(t14) == len(TATOEBA_14):
            out["tatoeba14"] = {
                "xx_to_en": float(self.xx_to_en[i, t14].mean()),
                "en_to_xx": float(self.en_to_xx[i, t14].mean()),
            }
        return out

    def protocol(self) -> str:
        score = "cosine" if self.score == "cosine" else f"ratio-margin (k = {MARGIN_K}, Artetxe and Schwenk 2019)"
        text = PROTOCOL.format(pooling=self.pooling, layer=self.layer, score=score)
        return text + (f"; every sentence prefixed with {self.prefix!r}" if self.prefix else "")

    def to_dict(self) -> dict:
        return {
            "protocol": self.protocol(),
            "reported": self.row(self.layer),
            "sweep": [self.row(layer) for layer in self.layers],
            "sizes": self.sizes,
        }

    def write_sweep(self, out_dir: str | Path, title: str = "Tatoeba") -> tuple[Path, Path]:
        from polyalign.evaluate.plots import plot_series

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        csv_path = out_dir / "tatoeba_layers.csv"
        with atomic_text_file(csv_path) as f:  # a reader never sees half a table
            w = csv.writer(f)
            w.writerow(["layer", "direction", *self.languages, "average"])
            for i, layer in enumerate(self.layers):
                for name, acc in (("xx_to_en", self.xx_to_en), ("en_to_xx", self.en_to_xx)):
                    w.writerow([layer, name, *(f"{a:.2f}" for a in acc[i]), f"{acc[i].mean():.2f}"])
        png = plot_series(
            {
                "xx→en": (self.layers, self.xx_to_en.mean(1).tolist()),
                "en→xx": (self.layers, self.en_to_xx.mean(1).tolist()),
            },
            out_dir / "tatoeba_layers.png",
            "layer",
            "acc@1 (%)",
            f"{title}: average over {len(self.languages)} languages",
        )
        return csv_path, png


def evaluate_tatoeba(
    loaded: LoadedModel,
    data_dir: str | Path,
    languages: list[str],
    layer: int | None = None,
    batch_tokens: int = 16384,
    progress: bool = False,
    pooling: str = "mean",
    score: str = "cosine",
    prefix: str = "",
) -> TatoebaResult:
    L = loaded.model.config.num_layers
    layer = check_sentence_options(L, layer, pooling)
    if score not in SCORES:
        raise DataError(f"--score {score}: use one of {', '.join(SCORES)}")
    layers = list(range(L + 1))
    x2e = np.zeros((L + 1, len(languages)))
    e2x = np.zeros((L + 1, len(languages)))
    texts = {lang: read_tatoeba(data_dir, lang) for lang in languages}
    sizes = {lang: len(xx) for lang, (xx, _) in texts.items()}
    options = {"batch_tokens": batch_tokens, "progress": progress, "pooling": pooling, "prefix": prefix}
    # English sentences recur across the 14 files: all of them are embedded once, in one length-sorted pass.
    english = [sentence for _, en in texts.values() for sentence in en]
    ee, english_row = embed_unique(loaded, english, "en", **options)  # (L + 1, U, C), (sum of sizes,)
    start = 0
    for j, lang in enumerate(languages):
        xx, en = texts[lang]
        ex, xx_row = embed_unique(loaded, xx, lang, **options)
        own = english_row[start : start + len(en)]
        start += len(en)
        for i in layers:
            x2e[i, j], e2x[i, j] = (100 * a for a in retrieval_accuracies(ex[i][xx_row], ee[i][own], score))
    return TatoebaResult(layers, languages, x2e, e2x, layer, sizes, pooling, score, prefix)
