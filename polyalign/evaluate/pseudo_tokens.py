"""Does BTMLM's stage 1 write the translation? Pseudo-token precision on held-out translation pairs.

For each held-out pair (x, y) (a Tatoeba-layout folder, e.g. the dev split of `polyalign prepare --dev-pairs`),
BTMLM's stage 1 (model/ernie_m.py) generates round(ratio·|x|) pseudo-tokens for x in y's language, in
CAMLM's target-side layout, greedily. The measure is the share of those pseudo-tokens that occur in y's tokens
(clipped unigram precision, pooled over pairs; pseudo-tokens are never special tokens and y is encoded without
any). Both directions of each en-xx pair are scored, xx→en and en→xx: the directions CAMLM learns from en-xx
data (ERNIE-M §3.1). Two baselines score the same number of tokens per sentence as if they were generated:
`copy`, x's own first tokens (what shared pieces, names, numbers and punctuation, give without any translation),
and `frequent`, the target language's most frequent tokens (in the most other references of the direction:
what a model that ignores x entirely can reach). `mismatched` scores the model's own pseudo-tokens against the
next pair's translation: what of their precision does not depend on x.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import torch

from polyalign.checkpoint import LoadedModel
from polyalign.evaluate.tatoeba import read_tatoeba
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.model.ernie_m import generate_pseudo_tokens, placeholder_counts, placeholder_layout, placeholders
from polyalign.tokenizer import SpecialTokens

PROTOCOL = (
    "BTMLM stage-1 pseudo-tokens (greedy, round({ratio}·|x|) per sentence, at least one) for held-out pairs; "
    "precision = share of pseudo-tokens found in the true translation's tokens (clipped counts), pooled"
)


@torch.no_grad()
def translate_into_pseudo_tokens(
    model: MaskedLanguageModel,
    sp: SpecialTokens,
    sentences: list[np.ndarray],
    source_language: int | None,
    target_language: int | None,
    ratio: float,
    batch_size: int = 64,
) -> list[np.ndarray]:
    """Stage 1 of BTMLM for each sentence: its pseudo-tokens (round(ratio·|x|), at least one) in the target
    language. Language ids None: the model has no language embeddings."""
    counts = placeholder_counts(np.array([len(s) for s in sentences]), ratio)
    out: list[np.ndarray] = []
    for start in range(0, len(sentences), batch_size):
        rows, n = sentences[start : start + batch_size], counts[start : start + batch_size]
        languages = None if source_language is None else np.full(len(rows), source_language)
        targets = None if target_language is None else np.full(len(rows), target_language)
        layout = placeholder_layout(rows, languages, targets, n, sp)
        batch = {**layout.tensors(), "placeholder": torch.from_numpy(placeholders(layout))}
        pseudo = generate_pseudo_tokens(model, batch, sp).numpy()  # (sum n,), row-major
        out += np.split(pseudo, np.cumsum(n)[:-1])
    return out


def pseudo_token_hits(pseudo: np.ndarray, reference: np.ndarray) -> int:
    """Pseudo-tokens found in the true translation, each reference token matched at most as often as it occurs
    there (BLEU's clipped unigram count), so repeating one frequent piece does not score."""
    tokens, counts = np.unique(pseudo, return_counts=True)
    return int(sum(min(int(c), int((reference == t).sum())) for t, c in zip(tokens, counts, strict=True)))


def pseudo_token_precision(pseudo: list[np.ndarray], references: list[np.ndarray]) -> float:
    """Share of generated pseudo-tokens that occur in their sentence's true translation (clipped, pooled over
    rows)."""
    hits = sum(pseudo_token_hits(p, r) for p, r in zip(pseudo, references, strict=True))
    total = sum(len(p) for p in pseudo)
    return hits / total if total else float("nan")


def direction_row(name: str, pseudo: list[np.ndarray], references: list[np.ndarray]) -> dict:
    hits = sum(pseudo_token_hits(p, r) for p, r in zip(pseudo, references, strict=True))
    total = sum(len(p) for p in pseudo)
    return {"direction": name, "pairs": len(pseudo), "pseudo_tokens": total, "hits": hits, "precision": hits / total}


def frequent_tokens(references: list[np.ndarray], counts: list[int]) -> list[np.ndarray]:
    """For each reference, the `counts[i]` tokens found in the most *other* references (leave-one-out, so a
    sentence's own tokens give it no head start), ties in order of overall frequency: the guess of a model that
    knows the target language's frequencies and nothing of the source."""
    sentences = Counter(t for r in references for t in set(r.tolist()))
    ranked = [t for t, _ in sentences.most_common()]
    out = []
    for reference, n in zip(references, counts, strict=True):
        own = set(reference.tolist())
        # Leaving one sentence out lowers a count by at most one, so the top n lie in the top n + |own|.
        candidates = ranked[: n + len(own)]
        out.append(np.array(sorted(candidates, key=lambda t: -(sentences[t] - (t in own)))[:n], dtype=np.int64))
    return out


def pseudo_token_precision_on_pairs(
    loaded: LoadedModel,
    data_dir: str | Path,
    languages: list[str],
    ratio: float = 0.15,
    max_pairs: int = 200,
    max_length: int = 62,
) -> dict:
    """Per direction (`xxx->eng`, `eng->xxx`) and pooled: precision of the model's pseudo-tokens and of the
    copy, frequency and mismatched baselines, on the first `max_pairs` pairs of each language (sentences cut to
    `max_length` tokens)."""
    model, sp = loaded.model.eval(), loaded.tokenizer.special
    with_languages = bool(model.config.num_languages)
    rows, copy_rows, frequent_rows, mismatched_rows = [], [], [], []
    generated: list[np.ndarray] = []
    for lang in languages:
        xx, en = read_tatoeba(data_dir, lang)
        encoded = loaded.tokenizer.encode_batch(xx[:max_pairs] + en[:max_pairs])
        ids = [np.array(s[:max_length], dtype=np.int64) for s in encoded]
        kept = [i for i in range(len(ids) // 2) if len(ids[i]) and len(ids[len(ids) // 2 + i])]  # no empty side
        xx_ids, en_ids = [ids[i] for i in kept], [ids[len(ids) // 2 + i] for i in kept]
        for src, tgt, src_lang, tgt_lang in ((xx_ids, en_ids, lang, "eng"), (en_ids, xx_ids, "eng", lang)):
            ids_of = [loaded.language_id(src_lang), loaded.language_id(tgt_lang)]
            if with_languages and None in ids_of:
                raise DataError(
                    f"{loaded.folder}: no language embedding for {lang!r}; its languages: {loaded.languages}"
                )
            pseudo = translate_into_pseudo_tokens(model, sp, src, *ids_of, ratio)
            copied = [s[: len(p)] for s, p in zip(src, pseudo, strict=True)]
            frequent = frequent_tokens(tgt, [len(p) for p in pseudo])
            name = f"{src_lang}->{tgt_lang}"
            rows.append(direction_row(name, pseudo, tgt))
            generated += pseudo
            copy_rows.append(direction_row(name, copied, tgt))
            frequent_rows.append(direction_row(name, frequent, tgt))
            mismatched_rows.append(direction_row(name, pseudo, tgt[1:] + tgt[:1]))
    values, counts = np.unique(np.concatenate(generated) if generated else np.array([], np.int64), return_counts=True)
    pooled = {
        name: {"hits": sum(r["hits"] for r in part), "pseudo_tokens": sum(r["pseudo_tokens"] for r in part)}
        for name, part in (
            ("model", rows),
            ("copy", copy_rows),
            ("frequent", frequent_rows),
            ("mismatched", mismatched_rows),
        )
    }
    for v in pooled.values():
        v["precision"] = v["hits"] / v["pseudo_tokens"] if v["pseudo_tokens"] else float("nan")
    return {
        "protocol": PROTOCOL.format(ratio=ratio),
        "ratio": ratio,
        "max_pairs": max_pairs,
        "languages": languages,
        "precision": pooled["model"]["precision"],
        "copy_precision": pooled["copy"]["precision"],
        "frequent_precision": pooled["frequent"]["precision"],
        "mismatched_precision": pooled["mismatched"]["precision"],
        # A generator that writes one piece everywhere (a head still at its unigram stage) scores that piece's
        # frequency in the references, whatever x says: how much of the output is its most common piece.
        "most_common_piece": int(values[counts.argmax()]) if len(values) else None,
        "most_common_share": float(counts.max() / counts.sum()) if len(values) else float("nan"),
        "distinct_pieces": len(values),
        "pooled": pooled,
        "directions": rows,
        "copy_directions": copy_rows,
        "frequent_directions": frequent_rows,
        "mismatched_directions": mismatched_rows,
    }
