"""What a fine-tuning task is: its data (train / model selection / per-language test), features, head and metric.

The loop (loop.py) knows tasks only through `Task`. A task file holds the reader for its data format (errors
name file:line), the protocol that says which files train, select and test, a head, and a metric. The model
a task trains is `TaskModel`: an encoder wrapper (by default `EncoderAdapter`, the plain encoder; a method can
put another in, e.g. one that concatenates two representations) plus the task's head.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from torch import nn

from polyalign.checkpoint import LoadedModel
from polyalign.model.encoder import Encoder
from polyalign.tokenizer import SpecialTokens

SETTINGS = ("transfer", "translate-train-all")


@dataclass
class Subsample:
    """Caps for quick runs (0 = all). The same seeded subset is drawn for every run and model."""

    max_train: int = 0
    max_select: int = 0
    max_eval: int = 0
    """Per test language."""

    def describe(self, data: TaskData) -> str:
        """What the caps left of `data`, counted (the protocol's text describes the full sets); "" without caps."""
        parts = [
            f"trained on {len(data.train):,} examples" if self.max_train else "",
            f"selected on {per_language(data.select, 'examples')}" if self.max_select else "",
            f"scored on {per_language(data.test, 'test examples')}, not the full test sets" if self.max_eval else "",
        ]
        parts = [p for p in parts if p]
        return "Subsampled (seeded, the same examples for every model): " + "; ".join(parts) + "." if parts else ""


def per_language(sets: dict[str, list], noun: str) -> str:
    """`100 NOUN per language`, or `NOUN per language: en 100, de 98` when the languages differ."""
    sizes = {lang: len(examples) for lang, examples in sets.items()}
    if len(set(sizes.values())) == 1:
        return f"{next(iter(sizes.values())):,} {noun} per language"
    return f"{noun} per language: " + ", ".join(f"{lang} {n:,}" for lang, n in sizes.items())


@dataclass
class TaskData:
    """What one protocol trains on, selects the model on, and reports."""

    train: list
    select: dict[str, list]
    """Language -> examples for model selection; the selection score is the mean over languages."""
    test: dict[str, list]
    """Language -> examples; every language is scored separately."""
    protocol: str
    """One paragraph: which files play which role, and any replacement for data the pack lacks."""
    originals: list | None = None
    """The English rows that translated training pairs point at by `pair_id` (code-switching, PPA §2.3)."""


@dataclass
class Feature:
    """One model input row: token ids plus what the task needs to build targets and read predictions."""

    input_ids: list[int]
    language_ids: list[int] | None = None
    extra: dict = field(default_factory=dict)
    group: str | None = None
    """Training features with the same group are trained in the same batch (PPA §2.3: the two code-switched
    versions of one example); None: a group of its own."""

    partner_length: int = 0
    """VECO plug-in (§3.1): the length of the translation whose row is stacked with this one in every batch
    (0: none)."""

    @property
    def length(self) -> int:
        return len(self.input_ids)

    @property
    def padded_length(self) -> int:
        """The tokens this feature's rows occupy per padded position of a batch, for length-sorted batching: with
        a partner, two rows padded to the longer one (sorting on its own length alone padded every batch to its
        longest partner)."""
        return 2 * max(self.length, self.partner_length) if self.partner_length else self.length


class Task(Protocol):
    """A fine-tuning task. One scored by accuracy over classes also has `classes` (their names) and
    `class_labels(examples) -> list[int]` (the gold class of every scored unit), from which the loop reports the
    chance and majority-class baselines beside the score."""

    name: str
    metric: str
    """Headline metric (a key of `score`'s result), in percent."""
    defaults: dict
    """Fine-tuning hyperparameters from the papers' tables, per setting: {"transfer": {...}, ...}."""
    options: object
    """The task's own settings (a dataclass), overridable like the loop's."""

    def load(self, data_dir, setting: str, sample: Subsample) -> TaskData: ...

    def features(self, examples: list, loaded: LoadedModel, max_length: int, train: bool) -> list[Feature]: ...

    def wrap_encoder(self, encoder: Encoder) -> nn.Module:
        """The representation the head reads: a module batch -> (B, T, C') with an `output_size` attribute.
        Optional: a task without it reads the plain encoder (`EncoderAdapter`)."""
        ...

    def head(self, hidden_size: int) -> nn.Module: ...

    def collate(self, features: list[Feature], special: SpecialTokens) -> dict[str, torch.Tensor]: ...

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def outputs(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[np.ndarray]: ...

    def score(self, examples: list, features: list[Feature], outputs: list[np.ndarray], language: str) -> dict: ...


# ---------------------------------------------------------------------------------------------------------
# The model a task trains


class EncoderAdapter(nn.Module):
    """The plain encoder as a task's representation: batch -> last hidden states (B, T, C)."""

    def __init__(self, encoder: Encoder):
        super().__init__()
        self.encoder = encoder
        self.output_size = encoder.config.hidden_size

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.encoder(
            batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch.get("position_ids"),
            language_ids=batch.get("language_ids"),
        ).last_hidden_state


class TaskModel(nn.Module):
    """Encoder wrapper + head: batch -> task logits."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.encoder(batch), batch)


# ---------------------------------------------------------------------------------------------------------
# Small shared helpers for tasks


def pad_batch(rows: list[list[int]], pad: int, dtype=torch.long) -> torch.Tensor:
    """Right-pad integer rows into a (B, T) tensor."""
    T = max(len(r) for r in rows)
    out = torch.full((len(rows), T), pad, dtype=dtype)
    for b, r in enumerate(rows):
        out[b, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def collate_inputs(features: list[Feature], pad: int) -> dict[str, torch.Tensor]:
    """input_ids, attention_mask and (when features carry them) language_ids for a list of features."""
    ids = pad_batch([f.input_ids for f in features], pad)
    lengths = torch.tensor([f.length for f in features])
    batch = {"input_ids": ids, "attention_mask": torch.arange(ids.shape[1])[None, :] < lengths[:, None]}
    if features[0].language_ids is not None:
        batch["language_ids"] = pad_batch([f.language_ids for f in features], 0)
    return batch


def setting_defaults(transfer: dict, **translate_train_all) -> dict:
    """A task's `defaults` for both settings: translate-train-all's are transfer's but for what the paper changes."""
    return {"transfer": transfer, "translate-train-all": {**transfer, **translate_train_all}}


def seeded_subset(items: list, n: int, seed: int = 0) -> list:
    """`n` items drawn without replacement by a fixed seed, in their original order (all of them if n is 0)."""
    if not n or n >= len(items):
        return items
    keep = np.sort(np.random.default_rng(seed).choice(len(items), size=n, replace=False))
    return [items[i] for i in keep]


def language_id_for(loaded: LoadedModel, language: str) -> int | None:
    """The language-embedding index for inputs in `language`, or None when the model has no language
    embeddings. A language the model has no embedding for gets English's (XLM gives every input one)."""
    if not loaded.model.config.num_languages:
        return None
    lid = loaded.language_id(language)
    return (loaded.language_id("en") or 0) if lid is None else lid
