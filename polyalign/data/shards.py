"""Token shards: a corpus as one flat memory-mapped array of token ids plus an offsets array.

`<prefix>.ids` holds the ids of every line back to back; `<prefix>.idx` holds n+1 int64 offsets, so line i
is ids[idx[i]:idx[i+1]]. Both are written by appending, so building a shard needs memory for one chunk of
lines only, and reading one maps the files instead of loading them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from polyalign.io import DataError


def ids_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.uint32)


class ShardWriter:
    """Append tokenised lines to `<prefix>.ids` / `<prefix>.idx`."""

    def __init__(self, prefix: str | Path, dtype: np.dtype):
        self.prefix = Path(prefix)
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self.dtype = np.dtype(dtype)
        self._ids = open(f"{self.prefix}.ids", "wb")
        self._idx = open(f"{self.prefix}.idx", "wb")
        self.lines = 0
        self.tokens = 0
        np.zeros(1, dtype=np.int64).tofile(self._idx)

    def add(self, batch: list[list[int]]) -> None:
        if not batch:
            return
        lengths = np.fromiter((len(x) for x in batch), dtype=np.int64, count=len(batch))
        flat = np.fromiter((t for x in batch for t in x), dtype=self.dtype, count=int(lengths.sum()))
        flat.tofile(self._ids)
        (self.tokens + np.cumsum(lengths)).tofile(self._idx)
        self.lines += len(batch)
        self.tokens += int(lengths.sum())

    def close(self) -> dict:
        self._ids.close()
        self._idx.close()
        return {"lines": self.lines, "tokens": self.tokens}


class TokenShard:
    """Read-only view of a shard; `shard[i]` is a numpy array of line i's ids (a view into the map)."""

    def __init__(self, prefix: str | Path, dtype: np.dtype):
        self.prefix = Path(prefix)
        ids_file, idx_file = Path(f"{self.prefix}.ids"), Path(f"{self.prefix}.idx")
        for f in (ids_file, idx_file):
            if not f.is_file():
                raise DataError(f"{f}: shard file not found; run `polyalign prepare` first")
        # A shard cut short (a full disk, a partial copy) is named here, not met as a numpy error mid-training.
        fix = "prepare the corpus again (`polyalign prepare`) or copy the prepared folder whole"
        idx_bytes, ids_bytes = idx_file.stat().st_size, ids_file.stat().st_size
        if idx_bytes < 8 or idx_bytes % 8:
            raise DataError(f"{idx_file}: damaged ({idx_bytes} bytes, not a whole number of offsets); {fix}")
        self.offsets = np.memmap(idx_file, dtype=np.int64, mode="r")
        size = int(self.offsets[-1])
        if size < 0 or ids_bytes != size * np.dtype(dtype).itemsize:
            raise DataError(
                f"{ids_file}: damaged ({ids_bytes} bytes where its index {idx_file.name} says "
                f"{size * np.dtype(dtype).itemsize}); {fix}"
            )
        # np.memmap refuses empty files; an empty shard has nothing to map.
        self.ids = np.memmap(ids_file, dtype=dtype, mode="r") if size else np.zeros(0, dtype=dtype)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    def length(self, i: int) -> int:
        return int(self.offsets[i + 1] - self.offsets[i])
