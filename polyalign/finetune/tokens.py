"""Token classification: WikiANN NER (entity-level F1, seqeval) and UD part-of-speech tagging (accuracy).

Words are tokenized one by one (`tokenizer.encode_words`); a word's label sits on its first subword and the
other subwords are ignored (-100), as in XTREME. A sentence longer than `max_length` is cut at word
boundaries into several rows, and the rows' predictions are joined again before scoring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from polyalign.checkpoint import LoadedModel
from polyalign.finetune.base import (
    Feature,
    Subsample,
    TaskData,
    collate_inputs,
    language_id_for,
    pad_batch,
    seeded_subset,
    setting_defaults,
)
from polyalign.io import DataError, open_binary, where
from polyalign.tokenizer import SpecialTokens

IGNORE = -100
NER_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
UPOS_TAGS = (
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
    "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X",
)  # fmt: skip
WIKIANN_LANGUAGES = ("en", "ar", "bg", "de", "el", "es", "fr", "hi", "ru", "sw", "tr", "ur", "vi", "zh")
PUD_LANGUAGES = (
    "en", "ar", "cs", "de", "es", "fi", "fr", "gl", "hi", "id", "is",
    "it", "ja", "ko", "pl", "pt", "ru", "sv", "th", "tr", "zh",
)  # fmt: skip


@dataclass
class TaggedSentence:
    words: list[str]
    tags: list[int]
    language: str


@dataclass
class TokenOptions:
    pass


# ---------------------------------------------------------------------------------------------------------
# Reading


def _lines(path: str | Path):
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                yield lineno, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise DataError(f"{where(path, lineno)}: not valid UTF-8") from None


def read_sentences(path: str | Path, language: str, parse_line) -> list[TaggedSentence]:
    """Sentences separated by blank lines; `parse_line(where, line)` gives (word, tag index) or None to skip."""
    sentences, words, labels = [], [], []
    for lineno, line in _lines(path):
        if not line.strip():
            if words:
                sentences.append(TaggedSentence(words, labels, language))
                words, labels = [], []
            continue
        parsed = parse_line(where(path, lineno), line)
        if parsed is not None:
            words.append(parsed[0])
            labels.append(parsed[1])
    if words:
        sentences.append(TaggedSentence(words, labels, language))
    if not sentences:
        raise DataError(f"{path}: no sentences")
    return sentences


def read_conll(path: str | Path, tags: tuple[str, ...], language: str) -> list[TaggedSentence]:
    """`token<TAB>tag` lines, a blank line between sentences (WikiANN as prepared by XTREME)."""

    def parse(at: str, line: str):
        cols = line.split("\t")
        if len(cols) != 2:
            raise DataError(f"{at}: expected `token<TAB>tag`, found {len(cols)} column(s)")
        if cols[1] not in tags:
            raise DataError(f"{at}: tag {cols[1]!r} is not one of {', '.join(tags)}")
        return cols[0], tags.index(cols[1])

    return read_sentences(path, language, parse)


def read_conllu(path: str | Path, language: str) -> list[TaggedSentence]:
    """Syntactic words and their UPOS tags from a CoNLL-U file (multiword-token ranges and empty nodes skipped)."""

    def parse(at: str, line: str):
        if line.startswith("#"):
            return None
        cols = line.split("\t")
        if len(cols) != 10:
            raise DataError(f"{at}: a CoNLL-U word line has 10 tab-separated columns, found {len(cols)}")
        if "-" in cols[0] or "." in cols[0]:
            return None
        if cols[3] not in UPOS_TAGS:
            raise DataError(f"{at}: UPOS {cols[3]!r} is not a Universal POS tag")
        return cols[1], UPOS_TAGS.index(cols[3])

    return read_sentences(path, language, parse)


# ---------------------------------------------------------------------------------------------------------
# Protocols


def load_ner(data_dir: Path, setting: str, sample: Subsample) -> TaskData:
    folder = Path(data_dir) / "wikiann"
    langs = [lang for lang in WIKIANN_LANGUAGES if (folder / lang).is_dir()]
    if "en" not in langs:
        raise DataError(f"{folder}/en: WikiANN English not found")
    train_langs = langs if setting == "translate-train-all" else ["en"]

    def read(lang, split):
        return read_conll(folder / lang / f"{split}.conll.gz", NER_TAGS, lang)

    train = [s for lang in train_langs for s in seeded_subset(read(lang, "train"), sample.max_train)]
    select = {lang: seeded_subset(read(lang, "dev"), sample.max_select) for lang in train_langs}
    test = {lang: seeded_subset(read(lang, "test"), sample.max_eval) for lang in langs}
    what = "English train" if setting == "transfer" else f"the train sets of all {len(langs)} languages"
    protocol = (
        f"WikiANN NER (Rahimi et al. split, XTREME panx), {setting}: train on {what} (wikiann/*/train.conll.gz), "
        f"select on the dev set(s) of the training language(s), score entity-level F1 (seqeval, BIO over "
        f"PER/ORG/LOC) on the test sets of {len(langs)} languages (th is not in the pack)."
    )
    return TaskData(train, select, test, protocol)


def load_pos(data_dir: Path, setting: str, sample: Subsample) -> TaskData:
    if setting != "transfer":
        raise DataError(
            "pos: the pack has training data only for English (UD EWT), so translate-train-all is not possible"
        )
    ud = Path(data_dir) / "ud"
    train = seeded_subset(read_conllu(ud / "en_ewt" / "en_ewt-ud-train.conllu.gz", "en"), sample.max_train)
    select = {"en": seeded_subset(read_conllu(ud / "en_ewt" / "en_ewt-ud-dev.conllu.gz", "en"), sample.max_select)}
    langs = [lang for lang in PUD_LANGUAGES if (ud / "pud" / f"{lang}_pud-ud-test.conllu.gz").is_file()]
    test = {
        lang: seeded_subset(read_conllu(ud / "pud" / f"{lang}_pud-ud-test.conllu.gz", lang), sample.max_eval)
        for lang in langs
    }
    protocol = (
        "UD POS, transfer: train on English EWT train (ud/en_ewt, 12,544 sentences), select on EWT dev, score "
        f"UPOS accuracy over syntactic words on the PUD test sets of {len(langs)} languages (ud/pud)."
    )
    return TaskData(train, select, test, protocol)


# ---------------------------------------------------------------------------------------------------------
# Metrics


def entity_f1(gold: list[list[str]], predicted: list[list[str]]) -> float:
    """Entity-level F1 in percent (seqeval, CoNLL-style chunking: an I- after O starts an entity)."""
    from seqeval.metrics import f1_score

    return 100.0 * float(f1_score(gold, predicted))


def tag_accuracy(gold: list[list[int]], predicted: list[list[int]]) -> float:
    g, p = np.concatenate([np.asarray(x) for x in gold]), np.concatenate([np.asarray(x) for x in predicted])
    return 100.0 * float((g == p).mean())


# ---------------------------------------------------------------------------------------------------------
# Features, head, task


def word_chunks(word_ids: list[int], budget: int) -> list[tuple[int, int]]:
    """Cut a sentence's subword sequence into [start, end) token ranges of at most `budget` tokens, at word
    boundaries (a single word longer than the budget is cut inside)."""
    chunks, start = [], 0
    n = len(word_ids)
    while start < n:
        end = min(n, start + budget)
        if end < n:
            boundary = end
            while boundary > start and word_ids[boundary] == word_ids[boundary - 1]:
                boundary -= 1
            end = boundary if boundary > start else end
        chunks.append((start, end))
        start = end
    return chunks


class TokenHead(nn.Module):
    def __init__(self, hidden_size: int, num_tags: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, num_tags)

    def forward(self, hidden: torch.Tensor, batch: dict) -> torch.Tensor:
        return self.out(self.dropout(hidden))  # (B, T, tags)


@dataclass(frozen=True)
class TokenSpec:
    name: str
    metric: str
    tags: tuple[str, ...]
    load: Callable[[Path, str, Subsample], TaskData]
    defaults: dict = field(default_factory=dict)


class TokenClassification:
    def __init__(self, spec: TokenSpec, options: TokenOptions | None = None):
        self.spec, self.name, self.metric, self.defaults = spec, spec.name, spec.metric, spec.defaults
        self.options = options or TokenOptions()
        self.classes = spec.tags

    def load(self, data_dir, setting: str, sample: Subsample) -> TaskData:
        return self.spec.load(Path(data_dir), setting, sample)

    def class_labels(self, examples: list[TaggedSentence]) -> list[int]:
        """The tag of every word: what POS accuracy counts."""
        return [t for e in examples for t in e.tags]

    def features(self, examples: list[TaggedSentence], loaded: LoadedModel, max_length: int, train: bool) -> list:
        sp = loaded.tokenizer.special
        encoded = loaded.tokenizer.encode_words([e.words for e in examples])
        out = []
        for i, (e, (ids, word_ids)) in enumerate(zip(examples, encoded, strict=True)):
            lid = language_id_for(loaded, e.language)
            for start, end in word_chunks(word_ids, max_length - 2):
                labels, words = [IGNORE], []
                for t in range(start, end):
                    first = t == 0 or word_ids[t] != word_ids[t - 1]  # the word's first subword
                    labels.append(e.tags[word_ids[t]] if first else IGNORE)
                    if first:
                        words.append(word_ids[t])
                labels.append(IGNORE)
                row = [sp.cls, *ids[start:end], sp.sep]
                out.append(
                    Feature(
                        row,
                        None if lid is None else [lid] * len(row),
                        extra={"labels": labels, "example": i, "words": words},
                    )
                )
        return out

    def head(self, hidden_size: int) -> nn.Module:
        return TokenHead(hidden_size, len(self.spec.tags))

    def collate(self, features: list[Feature], special: SpecialTokens) -> dict[str, torch.Tensor]:
        batch = collate_inputs(features, special.pad)
        batch["labels"] = pad_batch([f.extra["labels"] for f in features], IGNORE)
        return batch

    def loss(self, logits: torch.Tensor, batch: dict) -> torch.Tensor:
        return F.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE)

    def outputs(self, logits: torch.Tensor, batch: dict) -> list[np.ndarray]:
        predicted = logits.argmax(-1)  # (B, T)
        return [predicted[b][batch["labels"][b] != IGNORE].numpy() for b in range(len(predicted))]

    def score(self, examples: list[TaggedSentence], features: list[Feature], outputs: list, language: str) -> dict:
        predicted = [np.zeros(len(e.words), dtype=np.int64) for e in examples]
        for f, o in zip(features, outputs, strict=True):
            predicted[f.extra["example"]][f.extra["words"]] = o
        if self.metric == "f1":
            names = self.spec.tags
            gold = [[names[t] for t in e.tags] for e in examples]
            return {"f1": entity_f1(gold, [[names[t] for t in p] for p in predicted])}
        return {"accuracy": tag_accuracy([e.tags for e in examples], predicted)}


# Paper defaults. NER: ERNIE-M Table 11 (CoNLL column): batch 8, lr 4e-4 (translate-train-all 3e-4), layer decay
# 0.8, weight decay 0.01, 10 epochs. POS: XLM-Align Table 12 / XLM-E Table 7: batch {8,16,32} -> 32, lr
# {1,2,3}e-5 -> 2e-5, no layer decay, weight decay 0, 10 epochs.
NER = TokenSpec(
    "ner",
    "f1",
    NER_TAGS,
    load_ner,
    setting_defaults(dict(batch_size=8, lr=4e-4, layer_decay=0.8, weight_decay=0.01, epochs=10), lr=3e-4),
)
POS = TokenSpec(
    "pos",
    "accuracy",
    UPOS_TAGS,
    load_pos,
    {"transfer": dict(batch_size=32, lr=2e-5, layer_decay=1.0, weight_decay=0.0, epochs=10)},
)
