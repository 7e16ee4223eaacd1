"""Sentence-pair classification: XNLI and PAWS-X.

PPA's code-switching of translate-train pairs (`code_switch.py`) is the task option `code_switch`.

Input `<s> a </s> b </s>` (`pair_layout`, style `ppa`: positions run on), a head on the first token or on the
mean of all tokens, cross-entropy, accuracy. Two hooks let methods change the task without touching it:
- `transform(examples) -> examples` rewrites the training pairs (PPA's code-switching, `code_switch.py`);
  every example carries `pair_id`, shared by translations of one pair, and the language of each side;
- `encoder_wrapper(encoder) -> module` replaces the representation the head reads; it receives the batch,
  including `segment`.
The option `plug_in` (CLI `--plug-in`) is VECO's plug-in fine-tuning (§3.1): every input is paired with its
translation, both are encoded as one stacked batch, and the head reads [H^L : S^L] (polyalign.model.veco).

The pack has no MultiNLI and no English PAWS-X training set, so both tasks train on English dev data; the
protocols below say exactly how (and the result carries the text).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from polyalign.checkpoint import LoadedModel
from polyalign.data.layout import pair_layout
from polyalign.finetune.base import (
    EncoderAdapter,
    Feature,
    Subsample,
    TaskData,
    language_id_for,
    seeded_subset,
    setting_defaults,
)
from polyalign.finetune.code_switch import code_switch_training_set
from polyalign.finetune.code_switch import describe as describe_code_switching
from polyalign.io import DataError, open_binary, where
from polyalign.languages import XNLI_LANGUAGES
from polyalign.tokenizer import SpecialTokens

POOLINGS = ("first", "mean")


@dataclass
class PairExample:
    first: str
    second: str
    label: int
    language: str
    """Language of the first side (and of the second unless `second_language` says otherwise)."""
    pair_id: str
    """Shared by the translations of one pair (its row in the line-aligned files)."""
    second_language: str | None = None
    group: str | None = None
    """Training pairs of one group share a batch (code-switching, PPA §2.3)."""
    partner: PairExample | None = None
    """Plug-in fine-tuning: the translation of this pair that its inputs cross-attend to (`pair_partners`)."""


@dataclass
class PairOptions:
    pooling: str = "first"
    """`first`: the `<s>` token's final state (XLM-R, PPA §2.3); `mean`: mean over all tokens."""
    select_share: float = 0.2
    """Share of the English dev pairs held out for model selection (the pack has no training set)."""
    dev_eval_share: float = 0.2
    """PAWS-X: share of the dev pairs held out, in every language, to score the languages without a test set."""
    code_switch: bool = False
    """translate-train-all: replace every translated training pair (a_xx, b_xx) by (a_xx, b_en) and (a_en, b_xx),
    trained in the same batch (PPA §2.3)."""
    plug_in: bool = False
    """VECO plug-in fine-tuning (§3.1): classify from [H^L : S^L] of each input and its translation; needs a
    model with cross-attention and the translate-train-all setting (§3.1, footnote 4)."""

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise DataError(f"pooling={self.pooling!r}: use one of {POOLINGS}")
        if not 0 < self.select_share < 1 or not 0 <= self.dev_eval_share < 1:
            raise DataError("select_share must be in (0, 1) and dev_eval_share in [0, 1)")
        if self.code_switch and self.plug_in:
            raise DataError("code_switch and plug_in: choose one (each rewrites the translate-train-all pairs)")


# ---------------------------------------------------------------------------------------------------------
# Reading


def read_pair_tsv(path: str | Path, header: tuple[str, str, str], labels: tuple[str, ...]) -> list[tuple]:
    """Rows (first, second, label index) of a 3-column TSV with a header line."""
    rows = []
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise DataError(f"{where(path, lineno)}: not valid UTF-8") from None
            cols = line.split("\t")
            if lineno == 1:
                if tuple(c.strip() for c in cols) != header:
                    raise DataError(f"{where(path, 1)}: expected the header {'<TAB>'.join(header)}, found {line!r}")
                continue
            if not line.strip():
                continue
            if len(cols) != 3:
                raise DataError(f"{where(path, lineno)}: expected 3 tab-separated columns {header}, found {len(cols)}")
            if cols[2].strip() not in labels:
                raise DataError(f"{where(path, lineno)}: label {cols[2]!r} is not one of {', '.join(labels)}")
            rows.append((cols[0], cols[1], labels.index(cols[2].strip())))
    if not rows:
        raise DataError(f"{path}: no data rows")
    return rows


def split_indices(n: int, groups: list[int], shares: tuple[float, ...], seed: int = 0) -> list[list[int]]:
    """Split rows 0..n-1 into len(shares)+1 parts by whole groups (seeded): the held-out parts first, the rest
    last. Rows of one group (XNLI: hypotheses of one premise) always land in the same part."""
    unique = np.unique(groups)
    order = np.random.default_rng(seed).permutation(len(unique))
    part_of_group, start = {}, 0
    for p, share in enumerate(shares):
        k = round(share * len(unique))
        for g in unique[order[start : start + k]]:
            part_of_group[int(g)] = p
        start += k
    parts = [[] for _ in range(len(shares) + 1)]
    for i in range(n):
        parts[part_of_group.get(int(groups[i]), len(shares))].append(i)
    return parts


def premise_groups(rows: list[tuple]) -> list[int]:
    """Consecutive rows with the same premise form one group (XNLI: three hypotheses per premise)."""
    groups, g = [], -1
    for i, row in enumerate(rows):
        if i == 0 or row[0] != rows[i - 1][0]:
            g += 1
        groups.append(g)
    return groups


def to_examples(rows: list[tuple], indices: list[int], language: str, prefix: str) -> list[PairExample]:
    return [PairExample(rows[i][0], rows[i][1], rows[i][2], language, f"{prefix}:{i}", language) for i in indices]


# What moves with each side of a pair when it is code-switched.
PAIR_SIDES = (("first", "language"), ("second", "second_language"))


def code_switched_pairs(data: TaskData, english: list[tuple]) -> TaskData:
    """PPA §2.3 on the training pairs; `english` holds the English dev rows that the pair ids point at."""
    originals = {e.pair_id: e for e in to_examples(english, range(len(english)), "en", "dev")}
    before = len(data.train)
    data.train, missing = code_switch_training_set(data.train, originals, "pair_id", *PAIR_SIDES)
    data.protocol += describe_code_switching(before, len(data.train), missing)
    return data


# ---------------------------------------------------------------------------------------------------------
# Protocols


XNLI_HEADER = ("premise", "hypothesis", "label")
XNLI_LABELS = ("entailment", "neutral", "contradiction")
PAWSX_HEADER = ("sentence1", "sentence2", "label")
PAWSX_LABELS = ("0", "1")
PAWSX_LANGUAGES = ("en", "de", "es", "fr", "ja", "ko", "zh")
PAWSX_TEST = ("de", "zh")


def read_aligned_dev(folder: Path, name: str, languages, header, labels) -> dict[str, list[tuple]]:
    """The dev files of every language, which must be translations of one another row by row."""
    dev = {lang: read_pair_tsv(folder / name.format(lang=lang), header, labels) for lang in languages}
    n = len(dev["en"])
    for lang, rows in dev.items():
        if len(rows) != n:
            path = folder / name.format(lang=lang)
            raise DataError(f"{path}: {len(rows)} rows but the English dev file has {n}; they must be line-aligned")
    return dev


def load_xnli(data_dir: Path, setting: str, options: PairOptions) -> TaskData:
    folder = Path(data_dir) / "xnli"
    dev = read_aligned_dev(folder, "dev-{lang}.tsv.gz", XNLI_LANGUAGES, XNLI_HEADER, XNLI_LABELS)
    n = len(dev["en"])
    select_idx, train_idx = split_indices(n, premise_groups(dev["en"]), (options.select_share,))
    train_langs = XNLI_LANGUAGES if setting == "translate-train-all" else ("en",)
    train = [e for lang in train_langs for e in to_examples(dev[lang], train_idx, lang, "dev")]
    select = {lang: to_examples(dev[lang], select_idx, lang, "dev") for lang in train_langs}
    test = {}
    for lang in XNLI_LANGUAGES:
        rows = read_pair_tsv(folder / f"test-{lang}.tsv.gz", XNLI_HEADER, XNLI_LABELS)
        test[lang] = to_examples(rows, range(len(rows)), lang, "test")
    trained_on = "the English dev set" if setting == "transfer" else f"the dev sets of all {len(train_langs)} languages"
    protocol = (
        f"XNLI, {setting}. The pack has no MultiNLI training set, so the model trains on {trained_on} "
        f"(xnli/dev-*.tsv.gz) minus a held-out {options.select_share:.0%} of premise groups "
        f"({len(select_idx)} pairs per language, the same rows in every language), which select the model; "
        f"it is scored on the 15 test sets (xnli/test-*.tsv.gz, labels reconstructed from XGLUE German, see "
        f"the data README)."
    )
    return TaskData(train, select, test, protocol, originals=dev["en"])


def load_pawsx(data_dir: Path, setting: str, options: PairOptions) -> TaskData:
    folder = Path(data_dir) / "pawsx"
    dev = read_aligned_dev(folder, "dev-{lang}.tsv", PAWSX_LANGUAGES, PAWSX_HEADER, PAWSX_LABELS)
    n = len(dev["en"])
    # The dev files are translations of one another, row by row: hold the same rows out in every language so
    # that no language is scored on a translation of a training pair.
    select_idx, eval_idx, train_idx = split_indices(n, list(range(n)), (options.select_share, options.dev_eval_share))
    train_langs = PAWSX_LANGUAGES if setting == "translate-train-all" else ("en",)
    train = [e for lang in train_langs for e in to_examples(dev[lang], train_idx, lang, "dev")]
    select = {lang: to_examples(dev[lang], select_idx, lang, "dev") for lang in train_langs}
    test = {}
    for lang in PAWSX_LANGUAGES:
        if lang in PAWSX_TEST:
            rows = read_pair_tsv(folder / f"test-{lang}.tsv", PAWSX_HEADER, PAWSX_LABELS)
            test[lang] = to_examples(rows, range(len(rows)), lang, "test")
        else:
            test[lang] = to_examples(dev[lang], eval_idx, lang, "dev")
    trained_on = "the English dev set" if setting == "transfer" else f"the dev sets of all {len(train_langs)} languages"
    protocol = (
        f"PAWS-X, {setting}. The pack has no English training set and test sets only for de and zh, so the dev "
        f"rows (translations of one another, row by row) are split by a fixed seed into train "
        f"{len(train_idx)} / selection {len(select_idx)} / held-out {len(eval_idx)}, the same rows in every "
        f"language. The model trains on {trained_on} (training rows), is selected on the selection rows, and "
        f"is scored on pawsx/test-de.tsv and test-zh.tsv ({len(test['de']):,} and {len(test['zh']):,} pairs) and, "
        f"for en, es, fr, ja, ko, on the "
        f"held-out dev rows. 'NS' (untranslated) rows are kept, as in XTREME."
    )
    return TaskData(train, select, test, protocol, originals=dev["en"])


def pair_partners(data: TaskData) -> TaskData:
    """Give every example its translation, for plug-in fine-tuning (VECO §3.1): a "bilingual instance" is "an
    English instance with its translated one" (§5, footnote 6).

    Training: every translated pair with its English original (both sides are predicted), so English pairs
    appear only as partners. Selection and test: every input with the same row, in the same split, of the first
    language of (en, then the task's order) other than its own; English inputs thus pair with the next language
    that has the row (PAWS-X: de and zh test sets pair with each other).
    """
    train = _with_partners(_by_language(data.train))
    train = [e for exs in train.values() for e in exs if e.language != "en"]
    return TaskData(train, _with_partners(data.select), _with_partners(data.test), data.protocol)


def _by_language(examples: list[PairExample]) -> dict[str, list[PairExample]]:
    out: dict[str, list[PairExample]] = {}
    for e in examples:
        out.setdefault(e.language, []).append(e)
    return out


def _with_partners(by_language: dict[str, list[PairExample]]) -> dict[str, list[PairExample]]:
    rows = {(e.language, e.pair_id): e for examples in by_language.values() for e in examples}
    order = ["en", *(lang for lang in by_language if lang != "en")]
    out = {}
    for lang, examples in by_language.items():
        out[lang] = []
        for e in examples:
            partner = next((p for p in order if p != e.language and (p, e.pair_id) in rows), None)
            if partner is None:
                raise DataError(f"plug-in fine-tuning: the {lang} pair {e.pair_id} has no translation to pair with")
            out[lang].append(replace(e, partner=rows[(partner, e.pair_id)]))
    return out


def _subsampled(data: TaskData, sample: Subsample) -> TaskData:
    """The same seeded subset in every language (XNLI/PAWS-X test sets are parallel, so the rows correspond)."""
    data.train = seeded_subset(data.train, sample.max_train)
    data.select = {k: seeded_subset(v, sample.max_select) for k, v in data.select.items()}
    data.test = {k: seeded_subset(v, sample.max_eval) for k, v in data.test.items()}
    return data


@dataclass(frozen=True)
class PairSpec:
    name: str
    labels: tuple[str, ...]
    load: Callable[[Path, str, PairOptions], TaskData]
    """The full protocol's data; PairClassification pairs (plug-in) and subsamples it."""
    defaults: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------
# Head and task


class PairClassificationHead(nn.Module):
    """pool -> dropout -> dense -> tanh -> dropout -> labels (the RoBERTa/XLM-R classification head)."""

    def __init__(self, hidden_size: int, num_labels: int, pooling: str, dropout: float = 0.1):
        super().__init__()
        self.pooling = pooling
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, num_labels)
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden: torch.Tensor, batch: dict) -> torch.Tensor:
        if self.pooling == "first":
            x = hidden[:, 0]  # (B, C): the <s> token
        else:
            m = batch["attention_mask"][..., None].to(hidden.dtype)  # (B, T, 1)
            x = (hidden * m).sum(1) / m.sum(1)  # (B, C)
        x = torch.tanh(self.dense(self.dropout(x)))
        return self.out(self.dropout(x))  # (B, num_labels)


class PairClassification:
    metric = "accuracy"

    def class_labels(self, examples: list[PairExample]) -> list[int]:
        return [e.label for e in examples]

    def __init__(
        self,
        spec: PairSpec,
        options: PairOptions | None = None,
        transform: Callable[[list[PairExample]], list[PairExample]] | None = None,
        encoder_wrapper: Callable[[nn.Module], nn.Module] | None = None,
    ):
        self.spec, self.name, self.defaults, self.classes = spec, spec.name, spec.defaults, spec.labels
        self.options = options or PairOptions()
        self.transform, self.encoder_wrapper = transform, encoder_wrapper

    def load(self, data_dir, setting: str, sample: Subsample) -> TaskData:
        data = self.spec.load(Path(data_dir), setting, self.options)
        if self.options.plug_in:
            if setting != "translate-train-all":
                raise DataError(
                    f"{self.name}: plug-in fine-tuning pairs every input with its translation, so it needs "
                    "--setting translate-train-all (VECO §3.1, footnote 4)"
                )
            data = pair_partners(data)
            data.protocol += (
                " Plug-in fine-tuning (VECO §3.1): each training pair is read with its English original and both "
                "are classified from [H^L : S^L] (own stream : cross-attention to the partner's last layer); at "
                "selection and test time each input is paired with the same row in English (English: the next "
                "language that has the row)."
            )
        data = _subsampled(data, sample)
        if self.options.code_switch:
            data = code_switched_pairs(data, data.originals)
        if self.transform is not None:
            before = len(data.train)
            data.train = self.transform(data.train)
            data.protocol += f" Training pairs transformed by {_name(self.transform)}: {before} -> {len(data.train)}."
        if self.encoder_wrapper is not None:
            data.protocol += f" Representation: {_name(self.encoder_wrapper)}."
        return data

    def features(self, examples: list[PairExample], loaded: LoadedModel, max_length: int, train: bool) -> list:
        out = self._features(examples, loaded, max_length)
        if self.options.plug_in:
            partners = self._features([e.partner for e in examples], loaded, max_length)
            for f, partner in zip(out, partners, strict=True):
                f.extra["partner"] = partner.extra
                f.partner_length = partner.length
        return out

    def _features(self, examples: list[PairExample], loaded: LoadedModel, max_length: int) -> list[Feature]:
        tok = loaded.tokenizer
        firsts = tok.encode_batch([e.first for e in examples])
        seconds = tok.encode_batch([e.second for e in examples])
        sp = tok.special
        out = []
        for e, a, b in zip(examples, firsts, seconds, strict=True):
            a, b = truncate_pair(a, b, max_length - 3)
            languages = None
            if loaded.model.config.num_languages:
                languages = (
                    language_id_for(loaded, e.language),
                    language_id_for(loaded, e.second_language or e.language),
                )
            ids = [sp.cls, *a, sp.sep, *b, sp.sep]  # what pair_layout(style="ppa") builds in collate
            out.append(Feature(ids, extra={"a": a, "b": b, "label": e.label, "lang": languages}, group=e.group))
        return out

    def wrap_encoder(self, encoder: nn.Module) -> nn.Module:
        if self.options.plug_in:
            from polyalign.model.veco import PlugInEncoder

            return PlugInEncoder(encoder)
        return self.encoder_wrapper(encoder) if self.encoder_wrapper is not None else EncoderAdapter(encoder)

    def head(self, hidden_size: int) -> nn.Module:
        return PairClassificationHead(hidden_size, len(self.spec.labels), self.options.pooling)

    def collate(self, features: list[Feature], special: SpecialTokens) -> dict[str, torch.Tensor]:
        rows = [f.extra for f in features]
        if self.options.plug_in:  # a stacked pair batch (veco.two_streams): rows [B, 2B) are the translations
            rows += [f.extra["partner"] for f in features]
        layout = pair_layout(
            [np.asarray(r["a"], dtype=np.int64) for r in rows],
            [np.asarray(r["b"], dtype=np.int64) for r in rows],
            None,
            None,
            special,
            style="ppa",
        )
        batch = layout.tensors()
        if rows[0]["lang"] is not None:
            first = torch.tensor([r["lang"][0] for r in rows])[:, None]
            second = torch.tensor([r["lang"][1] for r in rows])[:, None]
            batch["language_ids"] = torch.where(batch["segment"] == 1, second, first)  # (B, T)
        batch["labels"] = torch.tensor([r["label"] for r in rows])
        return batch

    def loss(self, logits: torch.Tensor, batch: dict) -> torch.Tensor:
        """Cross-entropy over every row; with plug-in, both sides of each pair (VECO §3.1)."""
        return F.cross_entropy(logits.float(), batch["labels"])

    def outputs(self, logits: torch.Tensor, batch: dict) -> list[np.ndarray]:
        if self.options.plug_in:
            logits = logits[: logits.shape[0] // 2]  # the inputs; the rest are their partners
        return list(logits.numpy())

    def score(self, examples: list[PairExample], features: list, outputs: list, language: str) -> dict:
        predicted = np.array([int(np.argmax(o)) for o in outputs])
        gold = np.array([e.label for e in examples])
        return {"accuracy": 100.0 * float((predicted == gold).mean())}


def truncate_pair(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer side until both fit in `budget` (longest-first truncation)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) >= len(b) else b).pop()
    return a, b


def _name(obj) -> str:
    return getattr(obj, "__name__", type(obj).__name__)


# Paper defaults. XNLI: ERNIE-M Table 11 (base): batch 32, lr 5e-5, layer decay 0.8, warmup 10%, weight decay 0,
# 5 epochs; translate-train-all: batch 128, 2 epochs. PAWS-X: ERNIE-M Table 12 (its only PAWS-X column):
# batch 64, lr 5e-5 (translate-train-all 7e-5), layer decay 0.9, weight decay 0.01, 10 epochs (2).
XNLI_DEFAULTS = dict(batch_size=32, lr=5e-5, layer_decay=0.8, weight_decay=0.0, epochs=5)
XNLI = PairSpec("xnli", XNLI_LABELS, load_xnli, setting_defaults(XNLI_DEFAULTS, batch_size=128, epochs=2))
PAWSX_DEFAULTS = dict(batch_size=64, lr=5e-5, layer_decay=0.9, weight_decay=0.01, epochs=10)
PAWSX = PairSpec("pawsx", PAWSX_LABELS, load_pawsx, setting_defaults(PAWSX_DEFAULTS, lr=7e-5, epochs=2))
