"""Hugging Face interop for tokenizers: the files AutoTokenizer loads, written from ours (model/hf.py's export
calls it). Our SentencePiece model becomes a fast Unigram `tokenizer.json` that segments as it does."""

from __future__ import annotations

import json
from pathlib import Path

from polyalign.io import DataError
from polyalign.tokenizer import HuggingFaceTokenizer, SentencePieceTokenizer, Tokenizer


def write_hf_tokenizer(tokenizer: Tokenizer, folder: Path, max_length: int) -> None:
    """Write tokenizer files AutoTokenizer loads. Our SentencePiece model becomes a `tokenizer.json` (fast
    Unigram tokenizer) with exactly our ids: <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4, then the pieces."""
    if isinstance(tokenizer, HuggingFaceTokenizer):
        tokenizer.tok.save_pretrained(str(folder))
        return
    if not isinstance(tokenizer, SentencePieceTokenizer):
        raise DataError(f"cannot write a Hugging Face tokenizer for {type(tokenizer).__name__}")
    sentencepiece_to_fast_tokenizer(tokenizer.model_file).save(str(folder / "tokenizer.json"))
    sp = tokenizer.special
    names = {k: tokenizer.id_to_piece(getattr(sp, v)) for k, v in _SPECIAL_ROLES.items()}
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": max_length, **names}, indent=2)
    )


_SPECIAL_ROLES = {
    "bos_token": "cls",
    "cls_token": "cls",
    "eos_token": "sep",
    "sep_token": "sep",
    "unk_token": "unk",
    "pad_token": "pad",
    "mask_token": "mask",
}


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
