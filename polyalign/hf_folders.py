"""Hugging Face model folders: one read into a polyalign model and tokenizer, ours written as an XLM-RoBERTa folder.

model/hf.py converts the configs and tensors; this module reads and writes the files. Weights are read from
safetensors; a pickled `pytorch_model.bin` only when the caller trusts it, and then with
`torch.load(weights_only=True)`. An export is written whole or not at all (`atomic_dir`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from polyalign import __version__
from polyalign.io import DataError, atomic_dir, read_json, write_json
from polyalign.model import MaskedLanguageModel
from polyalign.model.hf import (
    HF_CONFIG,
    encoder_config_from_hf,
    export_problems,
    hf_family,
    hf_model,
    hf_to_polyalign_state,
    polyalign_to_hf_state,
    xlmr_config,
)
from polyalign.model.hf_tokenizer import hf_tokenizer_config, sentencepiece_to_fast_tokenizer
from polyalign.tokenizer import HuggingFaceTokenizer, SentencePieceTokenizer, Tokenizer, load_tokenizer

SAFETENSORS = "model.safetensors"
PICKLE = "pytorch_model.bin"


# ---------------------------------------------------------------------------------------------------------
# Read


def read_hf_weights(folder: Path, trust_pickle: bool = False) -> dict[str, torch.Tensor]:
    """All tensors of a Hugging Face folder: model.safetensors (or its sharded index), else, only when
    trusted, pytorch_model.bin (or its index) through torch.load(weights_only=True)."""
    from safetensors.torch import load_file

    for name, load in ((SAFETENSORS, load_file), (PICKLE, None)):
        index = folder / f"{name}.index.json"
        files = sorted(set(read_json(index)["weight_map"].values())) if index.is_file() else [name]
        paths = [folder / f for f in files]
        if not all(p.is_file() for p in paths):
            continue
        if load is None and not trust_pickle:
            raise DataError(
                f"{paths[0]}: PyTorch pickle weights, and unpickling can run code; convert them to "
                f"safetensors, or pass --trust-pickle (trust_pickle=True) to load them with weights_only=True"
            )
        state: dict[str, torch.Tensor] = {}
        for p in paths:
            try:
                state.update(load(str(p)) if load else torch.load(p, map_location="cpu", weights_only=True))
            except Exception as err:  # corrupt files, or pickles holding more than tensors
                raise DataError(f"{p}: cannot read weights ({str(err).splitlines()[0]})") from None
        return state
    raise DataError(f"{folder}: no {SAFETENSORS} or {PICKLE} here (TensorFlow/Flax-only folders are not read)")


def load_hf_model(folder: str | Path, trust_pickle: bool = False) -> tuple[MaskedLanguageModel, Tokenizer]:
    """A local Hugging Face folder (XLM-R, RoBERTa, BERT/mBERT, ELECTRA) as a polyalign model and tokenizer;
    polyalign.checkpoint wraps the result."""
    folder = Path(folder)
    where = folder / HF_CONFIG
    hf = read_json(where)
    family, config = hf_family(hf, where), encoder_config_from_hf(hf, where)  # refused before a weight is read
    state, decoders = hf_to_polyalign_state(read_hf_weights(folder, trust_pickle), family, folder)
    model = hf_model(config, state, decoders, folder)
    tokenizer = load_tokenizer(folder)
    if tokenizer.special.vocab_size > config.vocab_size:
        raise DataError(
            f"{folder}: the tokenizer has {tokenizer.special.vocab_size} tokens but the model only "
            f"{config.vocab_size} embeddings"
        )
    return model, tokenizer


# ---------------------------------------------------------------------------------------------------------
# Write


def export_hf(
    loaded,
    out: str | Path,
    drop_cross_attention: bool = False,
    languages_as_token_types: bool = False,
) -> list[str]:
    """Write `loaded` (a LoadedModel) as an XLM-RoBERTa folder; returns notes on what was changed."""
    from safetensors.torch import save_file

    model, c = loaded.model, loaded.model.config
    problems = export_problems(c, drop_cross_attention, languages_as_token_types)
    if problems:
        raise DataError(f"{loaded.folder}: XLM-RoBERTa cannot express {'; '.join(problems)}")
    notes = []
    if c.cross_attention:
        notes.append("cross-attention dropped: the export is the plain encoder (VECO's plug-out for NLU)")
    if c.num_languages and languages_as_token_types:
        notes.append(f"language embeddings folded into token types: pass token_type_ids = index in {loaded.languages}")
    state = polyalign_to_hf_state(model, languages_as_token_types)
    type_vocab = state["roberta.embeddings.token_type_embeddings.weight"].shape[0]
    with atomic_dir(out) as tmp:
        save_file(state, str(tmp / SAFETENSORS), metadata={"format": "pt"})
        config = xlmr_config(model, loaded.tokenizer, type_vocab)
        config["polyalign_export"] = {"version": __version__, "source": str(loaded.folder), "notes": notes}
        if loaded.languages:
            config["polyalign_export"]["languages"] = list(loaded.languages)
        write_json(tmp / HF_CONFIG, config)
        write_hf_tokenizer(loaded.tokenizer, tmp, c.max_positions)
        languages = list(loaded.languages) if c.num_languages and languages_as_token_types else []
        (tmp / "README.md").write_text(export_readme(str(loaded.folder), notes, languages), encoding="utf-8")
    return notes


def write_hf_tokenizer(tokenizer: Tokenizer, folder: Path, max_length: int) -> None:
    """Write tokenizer files AutoTokenizer loads. Our SentencePiece model becomes a `tokenizer.json` (fast
    Unigram tokenizer) with exactly our ids: <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4, then the pieces."""
    if isinstance(tokenizer, HuggingFaceTokenizer):
        tokenizer.tok.save_pretrained(str(folder))
        return
    if not isinstance(tokenizer, SentencePieceTokenizer):
        raise DataError(f"cannot write a Hugging Face tokenizer for {type(tokenizer).__name__}")
    sentencepiece_to_fast_tokenizer(tokenizer.model_file).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(hf_tokenizer_config(tokenizer, max_length), indent=2))


def export_readme(source: str, notes: list[str], language_token_types: list[str]) -> str:
    """The exported folder's README: how to load it and, when languages became token types, the
    `token_type_ids` value of each language (without it transformers computes another model's outputs)."""
    lines = [
        f"# XLM-RoBERTa export of `{source}` (polyalign {__version__})",
        "",
        "```python",
        "from transformers import AutoModelForMaskedLM, AutoTokenizer",
        "model = AutoModelForMaskedLM.from_pretrained(FOLDER)",
        "tokenizer = AutoTokenizer.from_pretrained(FOLDER)",
        "```",
    ]
    if language_token_types:
        lines += [
            "",
            "## Language ids are token types",
            "",
            "This model was trained with language embeddings; they are folded into the token-type embeddings.",
            "To get polyalign's outputs, pass the language index of every token as `token_type_ids`, e.g.",
            "`model(**tokenizer(text, return_tensors='pt'), token_type_ids=torch.full_like(ids, INDEX))`.",
            "The tokenizer's own `token_type_ids` (all 0) mean the first language below, not 'no language'.",
            "",
            "| language | token_type_ids |",
            "|---|---|",
            *(f"| {lang} | {i} |" for i, lang in enumerate(language_token_types)),
        ]
    if notes:
        lines += ["", "Notes:", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"
