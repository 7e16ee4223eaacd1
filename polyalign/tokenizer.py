"""Tokenizers: our own SentencePiece unigram model, or the tokenizer of a local Hugging Face folder.

Both expose the same small interface (`Tokenizer`), so nothing downstream cares which one it has.
Our SentencePiece vocabulary puts the special tokens where XLM-R has them: <s>=0 <pad>=1 </s>=2 <unk>=3,
then <mask>=4.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from polyalign.io import DataError, read_json, write_json

TOKENIZER_META = "polyalign_tokenizer.json"
SPM_FILE = "sentencepiece.model"


@dataclass(frozen=True)
class SpecialTokens:
    pad: int
    cls: int  # sentence start (<s> / [CLS])
    sep: int  # sentence end and separator (</s> / [SEP])
    mask: int
    unk: int
    vocab_size: int
    first_normal: int = 0
    """Lowest id of an ordinary piece; random replacement tokens are drawn from [first_normal, vocab_size)."""

    @property
    def all(self) -> frozenset[int]:
        return frozenset({self.pad, self.cls, self.sep, self.mask, self.unk})


class Tokenizer(Protocol):
    special: SpecialTokens

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def encode_words(self, sentences: list[list[str]]) -> list[tuple[list[int], list[int]]]:
        """Tokenize pre-split words; returns (ids, word index of each id) per sentence, no specials."""
        ...

    def id_to_piece(self, token_id: int) -> str: ...

    def decode(self, ids: list[int]) -> str: ...

    def save(self, folder: str | Path) -> None: ...


# ---------------------------------------------------------------------------------------------------------


class SentencePieceTokenizer:
    def __init__(self, model_file: str | Path):
        import sentencepiece as spm

        self.model_file = Path(model_file)
        if not self.model_file.is_file():
            raise DataError(f"{self.model_file}: tokenizer model not found")
        try:
            self.sp = spm.SentencePieceProcessor(model_file=str(self.model_file))
        except (RuntimeError, OSError) as err:
            raise DataError(f"{self.model_file}: not a SentencePiece model ({str(err).splitlines()[0]})") from None
        if self.sp.get_piece_size() == 0 or not 0 <= self.sp.pad_id() < self.sp.get_piece_size():
            raise DataError(f"{self.model_file}: a SentencePiece model without pieces or a padding piece")
        self.special = SpecialTokens(
            pad=self.sp.pad_id(),
            cls=self.sp.bos_id(),
            sep=self.sp.eos_id(),
            mask=self.sp.piece_to_id("<mask>"),
            unk=self.sp.unk_id(),
            vocab_size=self.sp.get_piece_size(),
            first_normal=self._first_normal(),
        )

    def _first_normal(self) -> int:
        """Ids before the first ordinary piece are special: ours put <mask> at 4, XLM-R's vocabulary puts it last."""
        i, size = 0, self.sp.get_piece_size()
        while i < size and (self.sp.is_control(i) or self.sp.is_unknown(i) or self.sp.id_to_piece(i) == "<mask>"):
            i += 1
        if i == size:
            raise DataError(f"{self.model_file}: a SentencePiece model of special pieces only")
        return i

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts, out_type=int, num_threads=2)

    def encode_words(self, sentences: list[list[str]]) -> list[tuple[list[int], list[int]]]:
        # Encoding each word on its own gives exactly the pieces it has inside the sentence (SentencePiece
        # marks a word start with "▁", so a standalone "▁" piece belongs to the word after it). One batched
        # call over the distinct words keeps this fast (a corpus repeats most of its words).
        flat = [w for words in sentences for w in words]
        distinct = list(dict.fromkeys(flat))
        pieces_of = self.sp.encode(distinct, out_type=int, num_threads=2) if distinct else []
        encoded = dict(zip(distinct, pieces_of, strict=True))
        pieces = [encoded[w] for w in flat]
        out, k = [], 0
        for words in sentences:
            ids, word_ids = [], []
            for w in range(len(words)):
                word_pieces = pieces[k] or [self.special.unk]  # a word that normalises to nothing
                k += 1
                ids.extend(word_pieces)
                word_ids.extend([w] * len(word_pieces))
            out.append((ids, word_ids))
        return out

    def id_to_piece(self, token_id: int) -> str:
        return self.sp.id_to_piece(token_id)

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode(ids)

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.model_file, folder / SPM_FILE)
        write_json(folder / TOKENIZER_META, {"kind": "sentencepiece", "file": SPM_FILE})


class HuggingFaceTokenizer:
    """The tokenizer of a local Hugging Face folder (XLM-R, mBERT, ...), through transformers."""

    def __init__(self, folder: str | Path):
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise DataError(
                f"{folder}: reading a Hugging Face tokenizer needs transformers: pip install 'polyalign[hf]'"
            ) from None

        self.folder = Path(folder)
        try:
            self.tok = AutoTokenizer.from_pretrained(str(self.folder), local_files_only=True)
        except Exception as err:  # transformers and tokenizers raise many types for a damaged folder
            raise DataError(f"{self.folder}: no usable Hugging Face tokenizer ({' '.join(str(err).split())})") from None
        t = self.tok
        self.special = SpecialTokens(
            pad=t.pad_token_id,
            cls=t.cls_token_id if t.cls_token_id is not None else t.bos_token_id,
            sep=t.sep_token_id if t.sep_token_id is not None else t.eos_token_id,
            mask=t.mask_token_id,
            unk=t.unk_token_id,
            vocab_size=len(t),
            first_normal=0,
        )
        if None in (self.special.pad, self.special.cls, self.special.sep, self.special.mask):
            raise DataError(f"{self.folder}: tokenizer lacks a pad, cls, sep or mask token")

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.tok(texts, add_special_tokens=False)["input_ids"]

    def encode_words(self, sentences: list[list[str]]) -> list[tuple[list[int], list[int]]]:
        enc = self.tok(sentences, is_split_into_words=True, add_special_tokens=False)
        out = []
        for b in range(len(sentences)):
            ids, word_ids = enc["input_ids"][b], enc.word_ids(b)
            out.append((ids, [w if w is not None else 0 for w in word_ids]))
        return out

    def id_to_piece(self, token_id: int) -> str:
        return self.tok.convert_ids_to_tokens(token_id)

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids)

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        self.tok.save_pretrained(str(folder))
        write_json(folder / TOKENIZER_META, {"kind": "huggingface"})


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """Load the tokenizer stored in a polyalign folder, or the tokenizer of a Hugging Face folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: tokenizer folder not found")
    meta_file = folder / TOKENIZER_META
    if meta_file.is_file():
        meta = read_json(meta_file)
        kind = meta.get("kind") if isinstance(meta, dict) else None
        if kind == "sentencepiece":
            if not isinstance(meta.get("file"), str) or not meta["file"] or "/" in meta["file"]:
                raise DataError(f"{meta_file}: file {meta.get('file')!r}: expected the model file's name in the folder")
            return SentencePieceTokenizer(folder / meta["file"])
        if kind != "huggingface":
            raise DataError(f"{meta_file}: kind {kind!r}: expected sentencepiece or huggingface")
        return HuggingFaceTokenizer(folder)
    if any((folder / f).is_file() for f in ("tokenizer.json", "sentencepiece.bpe.model", "vocab.txt")):
        return HuggingFaceTokenizer(folder)
    raise DataError(f"{folder}: no tokenizer here (expected {TOKENIZER_META}, tokenizer.json or vocab.txt)")


def train_sentencepiece(
    text_file: str | Path, out_folder: str | Path, vocab_size: int, num_threads: int = 2
) -> SentencePieceTokenizer:
    """Train a unigram SentencePiece model on a (language-sampled) text file."""
    import sentencepiece as spm

    out_folder = Path(out_folder)
    out_folder.mkdir(parents=True, exist_ok=True)
    prefix = out_folder / "sentencepiece"
    try:
        _train(spm, text_file, prefix, vocab_size, num_threads)
    except RuntimeError as err:
        detail = str(err).split("]")[-1].strip()
        raise DataError(f"{text_file}: tokenizer training failed: {detail}") from None
    (out_folder / "sentencepiece.vocab").unlink(missing_ok=True)
    Path(f"{prefix}.model").rename(out_folder / SPM_FILE)
    (out_folder / TOKENIZER_META).write_text(json.dumps({"kind": "sentencepiece", "file": SPM_FILE}))
    return SentencePieceTokenizer(out_folder / SPM_FILE)


def _train(spm, text_file, prefix, vocab_size, num_threads) -> None:
    spm.SentencePieceTrainer.train(
        input=str(text_file),
        model_prefix=str(prefix),
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,  # a small corpus may not support the requested size; take what it does
        character_coverage=0.9995,  # as XLM-R: rare characters of CJK scripts become <unk>
        bos_id=0,
        pad_id=1,
        eos_id=2,
        unk_id=3,
        user_defined_symbols=["<mask>"],
        input_sentence_size=2_000_000,
        shuffle_input_sentence=True,
        num_threads=num_threads,
        minloglevel=2,
    )


def special_piece_ids(model_bytes: bytes) -> list[int]:
    """Ids of a SentencePiece model's pieces that are not ordinary text (control, unknown, user-defined such as
    <mask>) and those its trainer spec names (bos, eos, pad, unk)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto.FromString(model_bytes)
    t = proto.trainer_spec
    named = {i for i in (t.bos_id, t.eos_id, t.pad_id, t.unk_id) if 0 <= i < len(proto.pieces)}
    kinds = {i for i, p in enumerate(proto.pieces) if p.type != pb.ModelProto.SentencePiece.NORMAL}
    return sorted(named | kinds)


def trim_sentencepiece(model_bytes: bytes, keep: list[int]) -> bytes:
    """The model with only the pieces `keep` (increasing old ids), renumbered from 0 in their old order.

    A unigram model segments by Viterbi over its pieces: a text whose best path uses only kept pieces keeps that
    path (it is still there, and no new path appeared), so it is segmented as before; text the kept pieces cannot
    cover becomes <unk> (one per run of uncovered characters)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    full = pb.ModelProto.FromString(model_bytes)
    if full.trainer_spec.model_type != pb.TrainerSpec.UNIGRAM:
        raise DataError("trimming needs a unigram SentencePiece model (BPE merges would need their pieces kept)")
    position = {old: new for new, old in enumerate(keep)}
    proto = pb.ModelProto()
    proto.CopyFrom(full)
    del proto.pieces[:]
    for old in keep:
        proto.pieces.add().CopyFrom(full.pieces[old])
    t = proto.trainer_spec
    t.vocab_size = len(keep)
    for field in ("bos_id", "eos_id", "pad_id", "unk_id"):
        old = getattr(t, field)
        if old >= 0:  # -1: the model has no such piece
            setattr(t, field, position[old])
    return proto.SerializeToString()
