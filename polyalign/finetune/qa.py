"""Extractive question answering in SQuAD v1.1 format (XQuAD, MLQA).

Input `<s> question </s> context-window </s>`; long contexts are cut into windows of
`max_length - len(question) - 3` tokens whose starts are `doc_stride` tokens apart. A linear head gives start
and end logits; decoding takes the `n_best` starts and ends of each window, keeps spans with end >= start, at
most `max_answer_length` tokens, whose start token has its widest context in that window (BERT's rule), and
returns the best-scoring span over all windows as the exact characters of the context.

Characters <-> tokens, windows and span decoding are pure functions in qa_spans.py.
"""

from __future__ import annotations

import json
import re
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
    seeded_subset,
    setting_defaults,
)
from polyalign.finetune.code_switch import code_switch_training_set
from polyalign.finetune.code_switch import describe as describe_code_switching
from polyalign.finetune.pairs import split_indices
from polyalign.finetune.qa_metric import NORMALISATIONS, qa_scores
from polyalign.finetune.qa_spans import (
    answer_token_span,
    best_window_span,
    context_windows,
    context_words,
    max_context_flags,
    piece_offsets,
)
from polyalign.io import DataError, open_binary
from polyalign.tokenizer import SpecialTokens

XQUAD_LANGUAGES = ("en", "ar", "de", "el", "es", "hi", "ro", "ru", "th", "tr", "vi", "zh")
MLQA_LANGUAGES = ("en", "ar", "de", "es", "hi", "vi", "zh")


@dataclass
class QAExample:
    qid: str
    question: str
    context: str
    answers: list[str]
    answer_start: int
    """Character offset of the first answer in the context."""
    language: str
    benchmark: str = "squad"
    """The data set it comes from (`xquad`, `mlqa`, `squad`), whose official script scores it."""
    question_language: str | None = None
    """Language of the question when it differs from the context's (code-switching)."""
    group: str | None = None
    """Training questions of one group share a batch (code-switching, PPA §2.3)."""


@dataclass
class QAOptions:
    """Extractive QA's own options (`--set task.doc_stride=64`, as the loop's are `--set finetune.lr=...`), kept in
    the results."""

    doc_stride: int = 128
    """Tokens between the starts of consecutive context windows (BERT's doc_stride)."""
    max_query_length: int = 64
    """Question tokens kept."""
    max_answer_length: int = 30
    """Longest answer span, in tokens, that decoding considers."""
    n_best: int = 20
    """Start and end candidates per window."""
    normalisation: str = "official"
    """Headline EM/F1 normalisation: `official` (each benchmark's own script: SQuAD v1.1's for XQuAD, as XTREME
    scores it, MLQA's for MLQA), or one of `squad`, `mlqa`, `mlqa-thai-characters` for every set."""
    select_share: float = 0.2
    """Share of the training questions held out for model selection (by question id)."""
    code_switch: bool = False
    """translate-train-all: replace every translated question (q_xx, c_xx) by (q_xx, c_en) and (q_en, c_xx), the
    answer moving with its context, trained in the same batch (PPA §2.3)."""

    def __post_init__(self) -> None:
        if self.normalisation not in ("official", *NORMALISATIONS):
            raise DataError(f"normalisation={self.normalisation!r}: use official or one of {NORMALISATIONS}")

    def scheme(self, benchmark: str) -> str:
        """The normalisation that scores a question of `benchmark`."""
        if self.normalisation != "official":
            return self.normalisation
        return "mlqa" if benchmark == "mlqa" else "squad"
        if self.doc_stride < 1 or self.max_answer_length < 1 or self.n_best < 1:
            raise DataError("doc_stride, max_answer_length and n_best must be positive")


# ---------------------------------------------------------------------------------------------------------
# Reading


def _get(obj, key: str, kind: type, path, location: str):
    if not isinstance(obj, dict) or key not in obj:
        raise DataError(f"{path}: {location}: missing {key!r} (expected SQuAD v1.1 JSON)")
    value = obj[key]
    if not isinstance(value, kind):
        raise DataError(f"{path}: {location}.{key}: expected {kind.__name__}, found {type(value).__name__}")
    return value


def read_squad(path: str | Path, language: str, benchmark: str = "squad") -> list[QAExample]:
    """Every question of a SQuAD v1.1 JSON file (gzip allowed); errors name the file and the JSON location."""
    try:
        with open_binary(path) as f:
            raw = f.read()
    except OSError as err:  # e.g. a .gz name on a file that is not gzip
        raise DataError(f"{path}: cannot read ({err})") from None
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise DataError(f"{path}: not valid UTF-8") from None
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{err.lineno}: invalid JSON ({err.msg})") from None
    out = []
    for a, article in enumerate(_get(obj, "data", list, path, "top level")):
        for p, para in enumerate(_get(article, "paragraphs", list, path, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            context = _get(para, "context", str, path, where)
            for q, qa in enumerate(_get(para, "qas", list, path, where)):
                at = f"{where}.qas[{q}]"
                answers = _get(qa, "answers", list, path, at)
                if not answers:
                    raise DataError(f"{path}: {at}: no answers (SQuAD v1.1 questions have at least one)")
                texts = [_get(ans, "text", str, path, f"{at}.answers[{k}]") for k, ans in enumerate(answers)]
                start = _get(answers[0], "answer_start", int, path, f"{at}.answers[0]")
                if not 0 <= start <= len(context):
                    raise DataError(f"{path}: {at}: answer_start {start} is outside the context ({len(context)} chars)")
                qid = str(_get(qa, "id", (str, int), path, at))
                question = _get(qa, "question", str, path, at)
                out.append(QAExample(qid, question, context, texts, start, language, benchmark, language))
    if not out:
        raise DataError(f"{path}: no questions")
    return out


def locate_answer(example: QAExample) -> int | None:
    """Character start of the first answer: `answer_start` if the text is there, else its nearest occurrence."""
    text, start = example.answers[0], example.answer_start
    if example.context[start : start + len(text)] == text:
        return start
    found = [m.start() for m in re.finditer(re.escape(text), example.context)]
    return min(found, key=lambda s: abs(s - start)) if found else None


# ---------------------------------------------------------------------------------------------------------
# Protocol


def load_qa(data_dir: Path, setting: str, options: QAOptions, sample: Subsample) -> TaskData:
    qa = Path(data_dir) / "qa"
    train_langs = MLQA_LANGUAGES if setting == "translate-train-all" else ("en",)
    mlqa = {
        lang: read_squad(qa / "mlqa" / "dev" / f"dev-context-{lang}-question-{lang}.json.gz", lang, "mlqa")
        for lang in train_langs
    }
    # MLQA's parallel questions share ids across languages: hold the same ids out everywhere.
    ids = sorted({e.qid for examples in mlqa.values() for e in examples})
    select_idx, _ = split_indices(len(ids), list(range(len(ids))), (options.select_share,))
    held_out = {ids[i] for i in select_idx}
    train, select, unlocated = [], {}, 0
    for lang, examples in mlqa.items():
        for e in examples:
            if e.qid in held_out:
                continue
            start = locate_answer(e)
            if start is None:
                unlocated += 1
                continue
            e.answer_start = start
            train.append(e)
        select[lang] = seeded_subset([e for e in examples if e.qid in held_out], sample.max_select)
    train = seeded_subset(train, sample.max_train)
    switched = ""
    if options.code_switch:  # MLQA's translations share their English question's id
        originals = {e.qid: e for e in mlqa["en"] if e.qid not in held_out and locate_answer(e) is not None}
        before = len(train)
        train, missing = code_switch_training_set(train, originals, "qid", *QA_SIDES)
        switched = describe_code_switching(before, len(train), missing)
    test = {
        lang: seeded_subset(read_squad(qa / "xquad" / f"xquad.{lang}.json.gz", lang, "xquad"), sample.max_eval)
        for lang in XQUAD_LANGUAGES
    }
    what = "MLQA's English dev set" if setting == "transfer" else f"MLQA's dev sets in {', '.join(train_langs)}"
    protocol = (
        f"QA, {setting}. The pack has no SQuAD training set, so the model trains on {what} "
        f"(qa/mlqa/dev/dev-context-xx-question-xx, same-language pairs) minus a held-out "
        f"{options.select_share:.0%} of question ids that selects the model (by F1), and is scored on XQuAD "
        f"(12 languages, 1,190 questions each). EM/F1: {describe_normalisation(options.normalisation)}; "
        f"windows of max_length tokens, doc_stride {options.doc_stride}, "
        f"max answer {options.max_answer_length} tokens, n-best {options.n_best}."
        + (f" {unlocated} training answers not found in their context were dropped." if unlocated else "")
        + switched
    )
    return TaskData(train, select, test, protocol)


# What moves with each side of a question when it is code-switched: the answer goes with the context.
QA_SIDES = (("question", "question_language"), ("context", "answers", "answer_start", "language"))


def describe_normalisation(normalisation: str) -> str:
    if normalisation == "official":
        return (
            "XQuAD with the official SQuAD v1.1 normalisation (as XTREME), MLQA (selection) with MLQA's own; "
            "the other one is in the JSON"
        )
    return f"the {normalisation} normalisation on every set (not the official protocol)"


# ---------------------------------------------------------------------------------------------------------
# Features, head, task


@dataclass
class EncodedContext:
    ids: list[int]
    spans: list[tuple[int, int]] = field(default_factory=list)
    """Character span in the context of each token."""


def encode_contexts(contexts: list[str], tokenizer) -> dict[str, EncodedContext]:
    unique = list(dict.fromkeys(contexts))
    words = [context_words(c) for c in unique]
    encoded = tokenizer.encode_words([[w for w, _ in ws] for ws in words])
    piece_cache: dict[int, str] = {}
    unknown = tokenizer.id_to_piece(tokenizer.special.unk)
    out = {}
    for context, ws, (ids, word_ids) in zip(unique, words, encoded, strict=True):
        spans = []
        t = 0
        while t < len(ids):
            w = word_ids[t]
            u = t
            while u < len(ids) and word_ids[u] == w:
                u += 1
            pieces = [piece_cache.setdefault(i, tokenizer.id_to_piece(i)) for i in ids[t:u]]
            word, offset = ws[w]
            spans += [(offset + a, offset + b) for a, b in piece_offsets(word, pieces, unknown)]
            t = u
        out[context] = EncodedContext(ids, spans)
    return out


class SpanHead(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.out = nn.Linear(hidden_size, 2)

    def forward(self, hidden: torch.Tensor, batch: dict) -> torch.Tensor:
        logits = self.out(hidden).float()  # (B, T, 2): start, end
        return logits.masked_fill(~batch["attention_mask"][..., None], -1e4)


class ExtractiveQA:
    name = "qa"
    metric = "f1"
    # ERNIE-M Table 11 (MLQA column): batch 32, lr 3e-4, layer decay 0.8, weight decay 0, 2 epochs; XTREME's
    # max length 384 with doc_stride 128.
    defaults = setting_defaults(
        dict(batch_size=32, lr=3e-4, layer_decay=0.8, weight_decay=0.0, epochs=2, max_length=384)
    )

    def __init__(self, options: QAOptions | None = None):
        self.options = options or QAOptions()

    def load(self, data_dir, setting: str, sample: Subsample) -> TaskData:
        return load_qa(Path(data_dir), setting, self.options, sample)

    def features(self, examples: list[QAExample], loaded: LoadedModel, max_length: int, train: bool) -> list:
        o, tok = self.options, loaded.tokenizer
        sp = tok.special
        contexts = encode_contexts([e.context for e in examples], tok)
        questions = tok.encode_batch([e.question for e in examples])
        out = []
        for i, (e, q) in enumerate(zip(examples, questions, strict=True)):
            q = q[: o.max_query_length]
            ctx = contexts[e.context]
            size = max_length - len(q) - 3
            if size < 1:
                raise DataError(f"max_length={max_length} leaves no room for the context; raise it")
            offset = len(q) + 2  # <s> q </s> then the context
            answer = None
            if train:
                answer = answer_token_span(ctx.spans, e.answer_start, e.answer_start + len(e.answers[0]))
                if answer is None:
                    continue
            lid = language_id_for(loaded, e.language)
            q_lid = language_id_for(loaded, e.question_language or e.language)
            windows = context_windows(len(ctx.ids), size, min(o.doc_stride, size))
            for (s, end), flags in zip(windows, max_context_flags(windows), strict=True):
                target = (0, 0)  # no answer in this window: point at <s> (BERT, SQuAD v1.1)
                if answer is not None and s <= answer[0] and answer[1] < end:
                    target = (offset + answer[0] - s, offset + answer[1] - s)
                row = [sp.cls, *q, sp.sep, *ctx.ids[s:end], sp.sep]
                extra = {
                    "example": i,
                    "offset": offset,
                    "window": (s, end),
                    "max_context": flags,
                    "target": target,
                    "spans": ctx.spans,  # shared by the context's windows, not copied
                }
                languages = None if lid is None else [q_lid] * offset + [lid] * (len(row) - offset)
                out.append(Feature(row, languages, extra=extra, group=e.group))
        return out

    def head(self, hidden_size: int) -> nn.Module:
        return SpanHead(hidden_size)

    def collate(self, features: list[Feature], special: SpecialTokens) -> dict[str, torch.Tensor]:
        batch = collate_inputs(features, special.pad)
        batch["start_positions"] = torch.tensor([f.extra["target"][0] for f in features])
        batch["end_positions"] = torch.tensor([f.extra["target"][1] for f in features])
        return batch

    def loss(self, logits: torch.Tensor, batch: dict) -> torch.Tensor:
        start = F.cross_entropy(logits[..., 0], batch["start_positions"])
        end = F.cross_entropy(logits[..., 1], batch["end_positions"])
        return (start + end) / 2

    def outputs(self, logits: torch.Tensor, batch: dict) -> list[np.ndarray]:
        lengths = batch["attention_mask"].sum(1)
        return [logits[b, : lengths[b]].T.numpy() for b in range(len(logits))]  # each (2, T_b)

    def predictions(self, examples: list[QAExample], features: list[Feature], outputs: list) -> list[str]:
        """The best span's text for every example (empty when no window offers a valid span)."""
        o = self.options
        best: dict[int, tuple[float, int, int, list]] = {}
        for f, logits in zip(features, outputs, strict=True):
            s, end = f.extra["window"]
            k = f.extra["offset"]
            found = best_window_span(
                logits[0, k : k + end - s],
                logits[1, k : k + end - s],
                f.extra["max_context"],
                o.n_best,
                o.max_answer_length,
            )
            i = f.extra["example"]
            if found is not None and (i not in best or found[0] > best[i][0]):
                best[i] = (found[0], s + found[1], s + found[2], f.extra["spans"])
        texts = []
        for i, e in enumerate(examples):
            if i not in best:
                texts.append("")
                continue
            _, a, b, spans = best[i]
            texts.append(e.context[spans[a][0] : spans[b][1]].strip())
        return texts

    def score(self, examples: list[QAExample], features: list[Feature], outputs: list, language: str) -> dict:
        predicted = self.predictions(examples, features, outputs)
        answers = [e.answers for e in examples]
        scheme = self.options.scheme(examples[0].benchmark)
        main = qa_scores(predicted, answers, language, scheme)
        other = "mlqa" if scheme == "squad" else "squad"
        alt = qa_scores(predicted, answers, language, other)
        return {**main, f"f1_{other}": alt["f1"], f"exact_match_{other}": alt["exact_match"]}
