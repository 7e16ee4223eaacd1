"""BUCC 2018 bitext mining (Zweigenbaum et al. 2018), scored as XTREME scores it (Hu et al. 2020).

Protocol: pooled hidden states of one layer for every sentence of both sides (a text that occurs under several
ids is embedded once and stands for all of them); the k = 4 nearest neighbours in both directions by cosine
(exact inner-product search on unit vectors with faiss); ratio-margin scores (Artetxe and Schwenk 2019); "max"
retrieval as in LASER's mine_bitexts: every sentence's best candidate in either direction, kept greedily from
the highest score so that no sentence is used twice. Candidates scoring at or above a threshold are the mined
pairs, scored by precision, recall and F1 against the gold id pairs. The threshold is XTREME's
`bucc_optimize`: the one that maximises F1 against the gold pairs of the set being scored (on dev, where the
gold is known, this is an oracle threshold; XTREME then applies the dev threshold to test).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np

from polyalign.checkpoint import LoadedModel
from polyalign.evaluate.embed import check_sentence_options, embed_sentences
from polyalign.evaluate.margin import MARGIN_K, ratio_margin
from polyalign.io import DataError, LinePolicy, read_lines
from polyalign.progress import tqdm

PROTOCOL = (
    "BUCC 2018 {pair} {split}: {pooling}-pooled hidden states of layer {layer} (0 = embeddings), {k} nearest "
    "neighbours both ways (faiss, cosine), ratio-margin scores (Artetxe and Schwenk 2019), LASER 'max' "
    "retrieval; mined = candidates with score >= {threshold:.4f}, the threshold that maximises F1 on the gold "
    "pairs (XTREME's bucc_optimize; on dev an oracle threshold); precision/recall/F1 over {gold} gold pairs"
)


# ---------------------------------------------------------------------------------------------------------
# Reading


def read_bucc_sentences(path: str | Path) -> Iterator[tuple[str, str]]:
    """(id, sentence) for every line `id<TAB>sentence` of a BUCC text file (gzip allowed), streaming."""
    for lineno, line in read_lines(path, LinePolicy(max_chars=100_000, on_bad="error")):
        sid, tab, text = line.partition("\t")
        if not tab or not sid:
            raise DataError(f"{path}:{lineno}: expected `id<TAB>sentence`")
        yield sid, text


def read_bucc_gold(path: str | Path) -> set[tuple[str, str]]:
    """The gold (source id, English id) pairs of a file of `src-id<TAB>en-id` lines."""
    gold = set()
    for lineno, line in read_lines(path, LinePolicy(max_chars=1000, on_bad="error")):
        parts = line.split("\t")
        if len(parts) != 2:
            raise DataError(f"{path}:{lineno}: expected `source-id<TAB>en-id`")
        gold.add((parts[0], parts[1]))
    if not gold:
        raise DataError(f"{path}: no gold pairs")
    return gold


def bucc_files(data_dir: str | Path, pair: str, split: str) -> tuple[Path, Path, Path]:
    """The source, English and gold files of `pair` (e.g. zh-en) and `split` in XTREME's naming."""
    src_lang, _, tgt_lang = pair.partition("-")
    names = (f"{pair}.{split}.{src_lang}", f"{pair}.{split}.{tgt_lang}", f"{pair}.{split}.gold")
    found = []
    for name in names:
        options = [Path(data_dir) / name, Path(data_dir) / f"{name}.gz"]
        path = next((p for p in options if p.is_file()), None)
        if path is None:
            raise DataError(f"{options[0]}(.gz): not found; BUCC files are {pair}.{split}.{{xx,en,gold}}[.gz]")
        found.append(path)
    return found[0], found[1], found[2]


# ---------------------------------------------------------------------------------------------------------
# Mining (pure functions on unit vectors)


def nearest_neighbours(queries: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Cosine similarities and indices of each query's k nearest keys (rows are unit vectors): (Nq, k) each."""
    index = faiss.IndexFlatIP(keys.shape[1])
    index.add(np.ascontiguousarray(keys, dtype=np.float32))
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(keys)))


def mine_candidates(x: np.ndarray, y: np.ndarray, k: int = MARGIN_K) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs (M, 2) of (x index, y index) and their ratio-margin scores (M,), from unit vectors.

    Scores are `ratio_margin`s over the k nearest neighbours found by faiss. "max" retrieval (LASER
    mine_bitexts): each x's and each y's best candidate, taken from the highest score down, skipping a pair
    whose x or y is already used.
    """
    x2y_sim, x2y_ind = nearest_neighbours(x, y, k)  # (Nx, k)
    y2x_sim, y2x_ind = nearest_neighbours(y, x, k)  # (Ny, k)
    x_mean, y_mean = x2y_sim.mean(1), y2x_sim.mean(1)
    fwd = ratio_margin(x2y_sim, x_mean[:, None], y_mean[x2y_ind])  # (Nx, k) margins of x's candidates
    bwd = ratio_margin(y2x_sim, y_mean[:, None], x_mean[y2x_ind])  # (Ny, k) margins of y's candidates
    fwd_best, bwd_best = fwd.argmax(1), bwd.argmax(1)
    pairs = np.concatenate(
        [
            np.stack([np.arange(len(x)), x2y_ind[np.arange(len(x)), fwd_best]], 1),
            np.stack([y2x_ind[np.arange(len(y)), bwd_best], np.arange(len(y))], 1),
        ]
    )
    scores = np.concatenate([fwd.max(1), bwd.max(1)])
    seen_x, seen_y, keep = set(), set(), []
    for i in np.argsort(-scores, kind="stable"):
        a, b = pairs[i]
        if a not in seen_x and b not in seen_y:
            seen_x.add(a)
            seen_y.add(b)
            keep.append(i)
    return pairs[keep], scores[keep]


def best_threshold(scores: np.ndarray, correct: np.ndarray, n_gold: int) -> float:
    """XTREME's bucc_optimize: walking the candidates from the highest score down, the threshold (midway to the
    next score) after the first candidate where F1 against `n_gold` gold pairs peaks."""
    order = np.argsort(-scores, kind="stable")
    s, hits = scores[order], np.cumsum(correct[order])
    precision, recall = hits / np.arange(1, len(s) + 1), hits / n_gold
    f1 = np.where(hits > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    if not len(s) or f1.max() == 0:
        return float("inf")
    i = int(f1.argmax())
    return float((s[i] + s[i + 1]) / 2) if i + 1 < len(s) else float(s[i])


def mine_ids(
    x: np.ndarray, y: np.ndarray, src_ids: dict[str, int], tgt_ids: dict[str, int], gold: set[tuple[str, str]]
) -> tuple[float, set[tuple[str, str]], int]:
    """Mine unit vectors x, y (rows named by the ids mapping to them): the threshold, the mined id pairs at
    or above it, and the number of candidate id pairs. A mined row pair stands for every id pair with those
    texts (LASER's bucc.py)."""
    pairs, scores = mine_candidates(x, y)
    src_by_row, tgt_by_row = ids_by_row(src_ids), ids_by_row(tgt_ids)
    candidates = {
        (s, t): float(score)
        for (a, b), score in zip(pairs, scores, strict=True)
        for s in src_by_row.get(a, [])
        for t in tgt_by_row.get(b, [])
    }
    ids = list(candidates)
    values = np.array([candidates[p] for p in ids])
    threshold = best_threshold(values, np.array([p in gold for p in ids], dtype=bool), len(gold))
    return threshold, {p for p, v in candidates.items() if v >= threshold}, len(candidates)


def ids_by_row(id_to_row: dict[str, int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for sid, row in id_to_row.items():
        out.setdefault(row, []).append(sid)
    return out


def precision_recall_f1(mined: set, gold: set) -> tuple[float, float, float]:
    correct = len(mined & gold)
    precision = correct / len(mined) if mined else 0.0
    recall = correct / len(gold)
    f1 = 2 * precision * recall / (precision + recall) if correct else 0.0
    return precision, recall, f1


# ---------------------------------------------------------------------------------------------------------
# The evaluation


@dataclass
class BuccResult:
    pair: str
    split: str
    layer: int
    pooling: str
    threshold: float
    precision: float
    recall: float
    f1: float
    gold: int
    mined: int
    candidates: int
    sentences: dict[str, int]
    prefix: str = ""

    def protocol(self) -> str:
        return (f"every sentence prefixed with {self.prefix!r}; " if self.prefix else "") + PROTOCOL.format(
            pair=self.pair,
            split=self.split,
            pooling=self.pooling,
            layer=self.layer,
            k=MARGIN_K,
            threshold=self.threshold,
            gold=self.gold,
        )

    def to_dict(self) -> dict:
        return {"protocol": self.protocol(), **asdict(self)}


def embed_corpus(
    loaded: LoadedModel,
    path: Path,
    language: str,
    layer: int,
    pooling: str,
    chunk: int,
    batch_tokens: int,
    progress: bool,
    prefix: str = "",
) -> tuple[dict[str, int], np.ndarray]:
    """Stream a BUCC file: {id: row} and the unit sentence vectors (rows) of its distinct texts, embedded
    `chunk` texts at a time so that only one layer of the corpus is ever held."""
    id_to_row, text_to_row, pending, parts = {}, {}, [], []

    def flush():
        vectors = embed_sentences(loaded, pending, language, batch_tokens=batch_tokens, pooling=pooling, prefix=prefix)
        vectors = vectors[layer]
        parts.append(vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12))
        pending.clear()

    for sid, text in tqdm(read_bucc_sentences(path), desc=f"embed {path.name}", disable=not progress, unit=" s"):
        if text not in text_to_row:
            text_to_row[text] = len(text_to_row)
            pending.append(text)
            if len(pending) == chunk:
                flush()
        id_to_row[sid] = text_to_row[text]
    if pending:
        flush()
    if not parts:
        raise DataError(f"{path}: no sentences")
    return id_to_row, np.concatenate(parts)


def evaluate_bucc(
    loaded: LoadedModel,
    data_dir: str | Path,
    pair: str = "zh-en",
    split: str = "dev",
    layer: int | None = None,
    pooling: str = "mean",
    chunk: int = 8192,
    batch_tokens: int = 16384,
    progress: bool = False,
    prefix: str = "",
) -> BuccResult:
    layer = check_sentence_options(loaded.model.config.num_layers, layer, pooling)
    src_file, tgt_file, gold_file = bucc_files(data_dir, pair, split)
    gold = read_bucc_gold(gold_file)
    src_lang, tgt_lang = pair.split("-")
    src_ids, x = embed_corpus(loaded, src_file, src_lang, layer, pooling, chunk, batch_tokens, progress, prefix)
    tgt_ids, y = embed_corpus(loaded, tgt_file, tgt_lang, layer, pooling, chunk, batch_tokens, progress, prefix)
    unknown = [p for p in gold if p[0] not in src_ids or p[1] not in tgt_ids]
    if unknown:
        raise DataError(f"{gold_file}: {len(unknown)} gold pairs name ids not in the text files, e.g. {unknown[0]}")
    threshold, mined, candidates = mine_ids(x, y, src_ids, tgt_ids, gold)
    precision, recall, f1 = precision_recall_f1(mined, gold)
    sentences = {src_lang: len(src_ids), tgt_lang: len(tgt_ids)}
    return BuccResult(
        pair, split, layer, pooling, threshold, 100 * precision, 100 * recall, 100 * f1, len(gold), len(mined),
        candidates, sentences, prefix,
    )  # fmt: skip
