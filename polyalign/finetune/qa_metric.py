"""Extractive QA metrics: exact match and token F1 (best over the gold answers), in named normalisations.

- `squad`: the official SQuAD v1.1 script (evaluate-v1.1.py), which XTREME uses for XQuAD in every language:
  lower-case, drop ASCII punctuation, drop English articles, split on whitespace.
- `mlqa`: the MLQA v1 script (Lewis et al. 2020), MLQA's own: lower-case, drop every Unicode punctuation
  character, drop the articles of the languages it lists (en es de vi ar; hi and zh have none), split on
  whitespace, except Chinese, where each CJK character and punctuation mark is a token ("mixed
  segmentation"). For languages the script does not list (it raises there): no articles, whitespace.
- `mlqa-thai-characters`: `mlqa`, plus Thai (written without spaces between words) segmented like Chinese,
  one Thai character per token. Neither official script does this; it is an option, never a default.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from collections import Counter
from functools import cache

NORMALISATIONS = ("squad", "mlqa", "mlqa-thai-characters")

MLQA_ARTICLES = {
    "en": r"\b(a|an|the)\b",
    "es": r"\b(un|una|unos|unas|el|la|los|las)\b",
    "vi": r"\b(của|là|cái|chiếc|những)\b",
    "de": r"\b(ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b",
    "ar": r"\sال^|ال",
}
# MLQA segments Chinese by character; `mlqa-thai-characters` also Thai.
CHINESE_CHARACTER, THAI_CHARACTER = r"[\u4e00-\u9fa5]", r"[\u0e00-\u0e7f]"


@cache
def unicode_punctuation() -> frozenset[str]:
    """Every character whose Unicode category is P*, plus ASCII punctuation (as MLQA's PUNCT)."""
    chars = (chr(i) for i in range(sys.maxunicode + 1))
    return frozenset(c for c in chars if unicodedata.category(c).startswith("P")) | frozenset(string.punctuation)


def mixed_segmentation(text: str, character_pattern: str) -> list[str]:
    """MLQA's segmentation: characters matching the pattern and punctuation are tokens; other runs split on
    whitespace."""
    punctuation, tokens, run = unicode_punctuation(), [], ""
    for char in text:
        if re.match(character_pattern, char) or char in punctuation:
            tokens.extend(run.split())
            run = ""
            tokens.append(char)
        else:
            run += char
    tokens.extend(run.split())
    return tokens


def normalise_answer(text: str, language: str = "en", scheme: str = "mlqa") -> str:
    if scheme == "squad":  # evaluate-v1.1.py: lower, remove_punc, remove_articles, white_space_fix
        text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
        text = re.sub(r"\b(a|an|the)\b", " ", text)
        return " ".join(text.split())
    if scheme not in NORMALISATIONS:
        raise ValueError(f"normalisation={scheme!r}: use one of {NORMALISATIONS}")
    punctuation = unicode_punctuation()
    text = "".join(ch for ch in text.lower() if ch not in punctuation)
    if language in MLQA_ARTICLES:
        text = re.sub(MLQA_ARTICLES[language], " ", text)
    if language == "zh":
        tokens = mixed_segmentation(text, CHINESE_CHARACTER)
    elif language == "th" and scheme == "mlqa-thai-characters":
        tokens = mixed_segmentation(text, THAI_CHARACTER)
    else:
        tokens = text.split()
    return " ".join(t for t in tokens if t.strip())


def exact_match(prediction: str, gold: str, language: str = "en", scheme: str = "mlqa") -> float:
    return float(normalise_answer(prediction, language, scheme) == normalise_answer(gold, language, scheme))


def token_f1(prediction: str, gold: str, language: str = "en", scheme: str = "mlqa") -> float:
    p = normalise_answer(prediction, language, scheme).split()
    g = normalise_answer(gold, language, scheme).split()
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def qa_scores(predictions: list[str], answers: list[list[str]], language: str, scheme: str) -> dict[str, float]:
    """Mean over questions of the best EM and F1 against any gold answer, in percent."""
    em = [max(exact_match(p, g, language, scheme) for g in gold) for p, gold in zip(predictions, answers, strict=True)]
    f1 = [max(token_f1(p, g, language, scheme) for g in gold) for p, gold in zip(predictions, answers, strict=True)]
    return {"exact_match": 100.0 * sum(em) / len(em), "f1": 100.0 * sum(f1) / len(f1)}
