"""A prepared folder (what `prepare` writes) opened for reading: tokenizer, languages and token shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from polyalign.data.shards import TokenShard
from polyalign.io import DataError, read_json
from polyalign.tokenizer import Tokenizer, load_tokenizer

META = "meta.json"
"""The folder's description: languages, per-stream line and token counts, dtype, tokenizer subfolder."""


class PreparedData:
    """A prepared folder opened for reading: tokenizer, languages and shards."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        if self.folder.is_dir() and not (self.folder / META).is_file():
            raise DataError(
                f"{self.folder}: not a prepared corpus (no {META}): run `polyalign prepare --out {self.folder} ...` "
                "on your text first"
            )
        self.meta = read_json(self.folder / META)
        self.dtype = np.dtype(self.meta["dtype"])
        self.languages: list[str] = self.meta["languages"]

    def tokenizer(self) -> Tokenizer:
        return load_tokenizer(self.folder / self.meta["tokenizer"])

    def mono_shards(self, languages: list[str] | None = None) -> dict[str, TokenShard]:
        return {
            lang: TokenShard(self.folder / "mono" / lang, self.dtype)
            for lang in self.meta["mono"]
            if (languages is None or lang in languages) and self.meta["mono"][lang]["lines"] > 0
        }

    def parallel_shards(self, languages: list[str] | None = None) -> dict[str, tuple[str, str, TokenShard, TokenShard]]:
        out = {}
        for name, info in self.meta["parallel"].items():
            a, b = info["src"], info["tgt"]
            if info["lines"] == 0 or (languages is not None and not (a in languages and b in languages)):
                continue
            out[name] = (
                a,
                b,
                TokenShard(self.folder / "parallel" / f"{name}.{a}", self.dtype),
                TokenShard(self.folder / "parallel" / f"{name}.{b}", self.dtype),
            )
        return out
