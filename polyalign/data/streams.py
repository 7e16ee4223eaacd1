"""Endless streams of training examples, sampled across languages, batched by a token budget.

Examples are drawn at random (with replacement) from memory-mapped shards, so memory stays flat however
large the corpus is, and the whole position in the stream is the state of one random generator: that is
what a checkpoint saves and `--resume` restores.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from polyalign.data.packing import Packing, RowFiller, row_length
from polyalign.data.sampling import language_probabilities
from polyalign.data.shards import TokenShard
from polyalign.io import DataError


@dataclass
class StreamConfig:
    """How one stream (a recipe's `data.mono` or `data.parallel`) cuts, samples and batches its examples."""

    max_tokens: int = 8192
    """Token budget of one batch: examples x longest example (padding included); with packed rows (`data.pack`),
    rows x row length, the rows holding real tokens only up to their last example."""
    max_length: int = 254
    """Most tokens of one sentence (parallel: of each side), before special tokens are added."""
    min_length: int = 1
    """Examples (either side of a pair) shorter than this are skipped."""
    alpha: float = 0.7
    """Language sampling exponent, p_j ∝ m_j^alpha with m_j the tokens of language (pair) j (XLM-E Eq. 9
    uses 0.7; XLM and VECO 0.5). Tokens, not lines, because corpus lines range from captions to paragraphs."""
    pack: bool = True
    """Monolingual only: fill an example with consecutive lines up to max_length (RoBERTa's FULL-SENTENCES). Not
    `data.pack`, which lays several examples side by side in one row."""
    max_examples: int = 0
    """Cap on examples per batch (0 = only the token budget limits it)."""
    max_pair_length: int = 0
    """Parallel only: skip pairs whose two sides together exceed this many tokens (PPA §3.1); 0 = no cap."""
    one_pair_per_batch: bool = False
    """Parallel only: every batch holds pairs of one language pair (chosen by alpha), so in-batch negatives
    share the positive's languages and cannot be told apart by script (hard negatives for `contrast`)."""

    def __post_init__(self) -> None:
        if self.max_length < 1 or self.max_tokens < self.max_length:
            raise ValueError(
                f"max_tokens={self.max_tokens}, max_length={self.max_length}: need 1 <= max_length <= max_tokens"
            )


@dataclass
class MonoBatch:
    sentences: list[np.ndarray]
    languages: np.ndarray  # (B,) language index
    packing: Packing | None = None
    """Where each example goes in packed rows, when the stream packs (see polyalign/data/packing.py)."""


@dataclass
class ParallelBatch:
    source: list[np.ndarray]
    target: list[np.ndarray]
    source_languages: np.ndarray
    target_languages: np.ndarray
    packing: Packing | None = None
    """Where each pair, read as one sequence, goes in packed rows, when the stream packs."""


class _Stream:
    """Shared machinery: a seeded generator, language choice by alpha, and token-budget batching."""

    overhead = 2
    kind: int
    """Appended to the seed: each kind of stream draws from its own generator at the same seed."""

    def __init__(self, sizes: list[int], config: StreamConfig, seed: list[int] | int, packed: bool = False):
        self.config = config
        self.packed = packed
        """Lay the examples in packed rows (`data.pack`): the budget then counts rows, not padded examples."""
        self.probs = language_probabilities(sizes, config.alpha)
        self.rng = np.random.default_rng([*np.atleast_1d(seed).tolist(), self.kind])
        self._pending = None  # an example drawn but not fitting the last batch: first in the next

    def _draw(self):
        raise NotImplementedError

    @staticmethod
    def _size(example) -> int:
        raise NotImplementedError

    def longest_example(self) -> int:
        """Most tokens one example can have, special tokens included."""
        return self.config.max_length + self.overhead

    def _collect(self) -> tuple[list, Packing | None]:
        cfg, batch, longest = self.config, [], 0
        rows = None
        if self.packed:
            length = row_length(self.longest_example())
            rows = RowFiller(max(1, cfg.max_tokens // length), length)
        while True:
            example, self._pending = (self._pending or self._draw()), None
            n = self._size(example) + self.overhead
            longest_if_added = max(longest, n)
            full = cfg.max_examples and len(batch) >= cfg.max_examples
            over = not rows.place(n) if rows else batch and longest_if_added * (len(batch) + 1) > cfg.max_tokens
            if batch and (full or over):
                if rows and not over:
                    rows.packing.placement.pop()  # placed, but the batch was already full
                self._pending = example
                return batch, rows.rows_used() if rows else None
            batch.append(example)
            longest = longest_if_added

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "pending": _to_list(self._pending)}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._pending = _from_list(state["pending"])


def _to_list(example):
    return None if example is None else [e.tolist() if isinstance(e, np.ndarray) else e for e in example]


def _from_list(example):
    if example is None:
        return None
    return tuple(np.asarray(e, dtype=np.int64) if isinstance(e, list) else e for e in example)


def segment_at(shard: TokenShard, i: int, cfg: StreamConfig) -> tuple[np.ndarray, int]:
    """Line i (cut to max_length), followed when `pack` by whole next lines while they fit; returns the ids
    and the index of the first line not used."""
    ids = np.asarray(shard[i][: cfg.max_length], dtype=np.int64)
    parts, total, j = [ids], len(ids), i + 1
    while cfg.pack and j < len(shard) and total + shard.length(j) <= cfg.max_length:
        parts.append(np.asarray(shard[j], dtype=np.int64))
        total += shard.length(j)
        j += 1
    return (np.concatenate(parts) if len(parts) > 1 else ids), j


class _ShardStream(_Stream):
    """A stream over monolingual shards, one language each, chosen by their token counts."""

    def __init__(
        self,
        shards: list[TokenShard],
        languages: list[int],
        config: StreamConfig,
        seed: list[int] | int = 0,
        packed: bool = False,
    ):
        self.shards, self.languages = shards, languages
        super().__init__([s.num_tokens for s in shards], config, seed, packed)


class MonoStream(_ShardStream):
    kind = 1

    def _draw(self):
        cfg = self.config
        while True:
            k = int(self.rng.choice(len(self.shards), p=self.probs))
            shard = self.shards[k]
            i = int(self.rng.integers(len(shard)))
            ids, _ = segment_at(shard, i, cfg)
            if len(ids) >= cfg.min_length:
                return (ids, self.languages[k])

    @staticmethod
    def _size(example) -> int:
        return len(example[0])

    def next_batch(self) -> MonoBatch:
        batch, packing = self._collect()
        return MonoBatch([e[0] for e in batch], np.array([e[1] for e in batch], dtype=np.int64), packing)


MAX_REJECTED_DRAWS = 100_000  # a filter that rejects this many pairs in a row rejects (nearly) all of them


class ParallelStream(_Stream):
    overhead = 4
    kind = 2

    def __init__(
        self,
        pairs: list[tuple[TokenShard, TokenShard]],
        languages: list[tuple[int, int]],
        config: StreamConfig,
        seed: list[int] | int = 0,
        packed: bool = False,
    ):
        self.pairs, self.languages = pairs, languages
        super().__init__([s.num_tokens + t.num_tokens for s, t in pairs], config, seed, packed)

    _batch_pair: int | None = None  # with one_pair_per_batch: the language pair of the batch being collected

    def _draw(self):
        cfg = self.config
        for _ in range(MAX_REJECTED_DRAWS):
            k = (
                self._batch_pair
                if self._batch_pair is not None
                else int(self.rng.choice(len(self.pairs), p=self.probs))
            )
            src, tgt = self.pairs[k]
            i = int(self.rng.integers(len(src)))
            if cfg.max_pair_length and src.length(i) + tgt.length(i) > cfg.max_pair_length:
                continue
            x = np.asarray(src[i][: cfg.max_length], dtype=np.int64)
            y = np.asarray(tgt[i][: cfg.max_length], dtype=np.int64)
            if min(len(x), len(y)) >= cfg.min_length:
                return (x, y, self.languages[k][0], self.languages[k][1])
        raise DataError(
            f"{MAX_REJECTED_DRAWS} parallel pairs drawn in a row were all filtered out (min_length={cfg.min_length}, "
            f"max_pair_length={cfg.max_pair_length}); relax data.parallel.min_length or max_pair_length"
        )

    @staticmethod
    def _size(example) -> int:
        return len(example[0]) + len(example[1])

    def longest_example(self) -> int:
        cfg = self.config
        both = min(2 * cfg.max_length, cfg.max_pair_length or 2 * cfg.max_length)
        return both + self.overhead

    def next_batch(self) -> ParallelBatch:
        if self.config.one_pair_per_batch:
            # One language pair per batch: draw it, and drop the example left over from the last batch (it
            # may be of another pair); the stream's state stays its generator alone.
            self._batch_pair = int(self.rng.choice(len(self.pairs), p=self.probs))
            self._pending = None
        batch, packing = self._collect()
        return ParallelBatch(
            [e[0] for e in batch],
            [e[1] for e in batch],
            np.array([e[2] for e in batch], dtype=np.int64),
            np.array([e[3] for e in batch], dtype=np.int64),
            packing,
        )


class AdjacentStream(_ShardStream):
    """Pairs of adjacent monolingual segments (x, y) as a ParallelBatch of one language (VECO §4, footnote 9):
    x is a segment from a random line, y the segment that starts where x ends."""

    overhead = 4
    kind = 3
    _size = staticmethod(ParallelStream._size)
    next_batch = ParallelStream.next_batch

    def longest_example(self) -> int:
        return 2 * self.config.max_length + self.overhead

    def _draw(self):
        cfg = self.config
        while True:
            k = int(self.rng.choice(len(self.shards), p=self.probs))
            shard = self.shards[k]
            if len(shard) < 2:
                continue
            x, j = segment_at(shard, int(self.rng.integers(len(shard) - 1)), cfg)
            if j == len(shard):  # x ran to the end of the shard: nothing follows it
                continue
            y, _ = segment_at(shard, j, cfg)
            if min(len(x), len(y)) >= cfg.min_length:
                return (x, y, self.languages[k], self.languages[k])


# ---------------------------------------------------------------------------------------------------------
# Building a stream of a kind from a prepared folder. Objectives name the kind they consume.


def shard_stream(
    stream: type[_ShardStream],
    prepared,
    languages: list[str],
    lang_index: dict[str, int],
    data_config,
    seed: list[int],
    packed: bool = False,
) -> _ShardStream:
    """A stream of `stream`'s kind over the monolingual shards of `languages`; a corpus without any reads both
    sides of its parallel pairs as monolingual text instead (the trainer says so once)."""
    shards = [(lang_index[lang], shard) for lang, shard in prepared.mono_shards(languages).items()]
    shards = shards or parallel_sides(prepared, languages, lang_index)
    if not shards:
        raise DataError(
            f"{prepared.folder}: no monolingual or parallel text for languages {languages}; prepare it with --mono"
        )
    return stream([s for _, s in shards], [i for i, _ in shards], data_config.mono, seed, packed)


def parallel_sides(prepared, languages: list[str], lang_index: dict[str, int]) -> list[tuple[int, TokenShard]]:
    """(language index, shard) for each side of each parallel pair of `languages`."""
    return [
        (lang_index[lang], shard)
        for a, b, source, target in prepared.parallel_shards(languages).values()
        for lang, shard in ((a, source), (b, target))
    ]


def parallel_stream(
    prepared, languages: list[str], lang_index: dict[str, int], data_config, seed: list[int], packed: bool = False
) -> ParallelStream:
    pairs = prepared.parallel_shards(languages)
    if not pairs:
        raise DataError(f"{prepared.folder}: no parallel data for languages {languages}")
    return ParallelStream(
        [(s, t) for _, _, s, t in pairs.values()],
        [(lang_index[a], lang_index[b]) for a, b, _, _ in pairs.values()],
        data_config.parallel,
        seed,
        packed,
    )


STREAMS = {
    "mono": partial(shard_stream, MonoStream),
    "parallel": parallel_stream,
    "adjacent": partial(shard_stream, AdjacentStream),
}


def build_stream(
    kind: str, prepared, languages, lang_index, data_config, seed: int, slot: int, salt: int, packed: bool = False
):
    """A stream of `kind` for one micro-batch slot; (seed, slot, salt) make each stream independent. `packed`: its
    batches come with their place in packed rows."""
    if kind not in STREAMS:
        raise ValueError(f"unknown stream kind {kind!r}; known: {sorted(STREAMS)}")
    return STREAMS[kind](prepared, languages, lang_index, data_config, [seed, slot, salt], packed)
