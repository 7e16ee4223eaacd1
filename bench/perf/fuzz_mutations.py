"""Mutations of a valid file, drawn by hypothesis: bytes, encodings, numbers and structure (bench/perf/fuzz.py)."""

from __future__ import annotations

import gzip
import json
import re

import yaml
from hypothesis import strategies as st

# ---------------------------------------------------------------------------------------------------------
# Mutations of a valid file

WRONG_VALUES = [None, [], {}, "", "x", -1, 0, 10**30, -(10**30), 1.5, 1e309, True, [1, [2, [3]]], {"a": {"b": 1}},
                "9" * 400, "\x00", "ü" * 3, [None]]  # fmt: skip
HUGE_NUMBERS = ["9" * 40, "-1", "0", "-0", "1e309", "-1e309", "nan", ".inf", "1e-400", "4294967296", "2.5", "0x10"]
INSERTS = [b"\x00", b"\xff\xfe", b"\n", b"\r\n", b"\t", b" ||| ", b"|||", b"-", b"?", b"\xc3", b"\xe2\x80\xa8",
           b"\n\n\n", b"{", b"}", b"[", b":", b"- ", b"\x1b[31m", "ü".encode(), b"99999999999999999999"]  # fmt: skip
ENCODINGS = ["utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252", "utf-8-sig", "gzip"]


def byte_edit(data: st.DataObject, raw: bytes) -> bytes:
    """One byte-level edit: flip, insert, delete, repeat or truncate."""
    kind = data.draw(st.sampled_from(["flip", "insert", "delete", "repeat", "truncate"]))
    n = len(raw)
    at = data.draw(st.integers(0, max(n - 1, 0)))
    if kind == "flip" and n:
        return raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
    if kind == "insert":
        chunk = data.draw(st.sampled_from(INSERTS) | st.binary(min_size=1, max_size=8))
        return raw[:at] + chunk + raw[at:]
    if kind == "delete" and n:
        return raw[:at] + raw[at + data.draw(st.integers(1, max(1, min(64, n - at)))) :]
    if kind == "repeat" and n:
        end = min(n, at + data.draw(st.integers(1, 200)))
        return raw[:end] + raw[at:end] * data.draw(st.integers(1, 50)) + raw[end:]
    return raw[: data.draw(st.integers(0, n))]


def reencode(data: st.DataObject, raw: bytes) -> bytes:
    """The text saved in another encoding (or gzipped under a plain name)."""
    encoding = data.draw(st.sampled_from(ENCODINGS))
    if encoding == "gzip":
        return gzip.compress(raw, mtime=0)
    return raw.decode("utf-8", "replace").encode(encoding, "replace")


def number_edit(data: st.DataObject, raw: bytes) -> bytes:
    """A number in the file made huge, negative, fractional or not a number."""
    text = raw.decode("utf-8", "replace")
    numbers = list(re.finditer(r"-?\d+(\.\d+)?(e-?\d+)?", text))
    if not numbers:
        return raw
    m = numbers[data.draw(st.integers(0, len(numbers) - 1))]
    return (text[: m.start()] + data.draw(st.sampled_from(HUGE_NUMBERS)) + text[m.end() :]).encode()


def _paths(tree, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, (*prefix, i))
    return out


def structure_edit(data: st.DataObject, raw: bytes, kind: str) -> bytes:
    """A JSON or YAML value replaced by one of the wrong type, a key dropped, or an unknown key added."""
    try:
        tree = json.loads(raw) if kind == "json" else yaml.safe_load(raw)
    except Exception:
        return raw
    paths = _paths(tree)
    path = paths[data.draw(st.integers(0, len(paths) - 1))]
    action = data.draw(st.sampled_from(["replace", "drop", "add"]))
    value = data.draw(st.sampled_from(WRONG_VALUES))
    if not path:
        tree = value
    else:
        parent = tree
        for key in path[:-1]:
            parent = parent[key]
        if action == "drop":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[data.draw(st.sampled_from(["extra", "layer", "encoder", "kind", "name", "1"]))] = value
        else:
            parent[path[-1]] = value
    try:
        return (json.dumps(tree) if kind == "json" else yaml.safe_dump(tree, allow_unicode=True)).encode()
    except (ValueError, TypeError):
        return raw


def mutate(data: st.DataObject, raw: bytes, kind: str) -> bytes:
    """One to three mutations of a valid file's bytes; `kind` (text, json, yaml, binary) adds structural edits."""
    families = ["bytes", "bytes", "truncate", "encoding", "number"] + (
        ["structure"] * 3 if kind in ("json", "yaml") else []
    )
    for _ in range(data.draw(st.integers(1, 3))):
        family = data.draw(st.sampled_from(families))
        if family == "bytes":
            raw = byte_edit(data, raw)
        elif family == "truncate":
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        elif family == "encoding" and kind != "binary":
            raw = reencode(data, raw)
        elif family == "number" and kind != "binary":
            raw = number_edit(data, raw)
        elif family == "structure":
            raw = structure_edit(data, raw, kind)
    return raw
