"""Hugging Face interop for tokenizers: what AutoTokenizer loads, converted from ours (hf_folders.py writes the
files). Our SentencePiece model becomes a fast Unigram `tokenizer.json` that segments as it does."""

from __future__ import annotations

from pathlib import Path

from polyalign.tokenizer import SentencePieceTokenizer

_SPECIAL_ROLES = {
    "bos_token": "cls",
    "cls_token": "cls",
    "eos_token": "sep",
    "sep_token": "sep",
    "unk_token": "unk",
    "pad_token": "pad",
    "mask_token": "mask",
}


def hf_tokenizer_config(tokenizer: SentencePieceTokenizer, max_length: int) -> dict:
    """`tokenizer_config.json` for our SentencePiece tokenizer: XLM-R's class and our special pieces."""
    names = {k: tokenizer.id_to_piece(getattr(tokenizer.special, v)) for k, v in _SPECIAL_ROLES.items()}
    return {"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": max_length, **names}


def sentencepiece_to_fast_tokenizer(model_file: Path):
    """A `tokenizers` Unigram tokenizer that segments exactly as the SentencePiece model does (same
    normaliser charsmap, whitespace handling and scores), keeping the SentencePiece ids."""
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors
    from tokenizers import Tokenizer as FastTokenizer
    from tokenizers.models import Unigram

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(Path(model_file).read_bytes())
    vocab = [(p.piece, p.score) for p in proto.pieces]
    tok = FastTokenizer(Unigram(vocab, unk_id=proto.trainer_spec.unk_id, byte_fallback=False))
    steps = [normalizers.Strip(left=False, right=True), normalizers.Replace(Regex(" {2,}"), "▁")]
    if proto.normalizer_spec.precompiled_charsmap:
        steps.insert(0, normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap))
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    # Control (<s>, <pad>, </s>), unknown and user-defined (<mask>) pieces are special tokens.
    specials = [p.piece for p in proto.pieces if p.type in (2, 3, 4)]
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True, lstrip=s == "<mask>") for s in specials])
    bos, eos = proto.pieces[proto.trainer_spec.bos_id].piece, proto.pieces[proto.trainer_spec.eos_id].piece
    tok.post_processor = processors.TemplateProcessing(  # XLM-R: <s> A </s> and <s> A </s></s> B </s>
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, proto.trainer_spec.bos_id), (eos, proto.trainer_spec.eos_id)],
    )
    return tok
