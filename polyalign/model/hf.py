"""Hugging Face interop: XLM-R / RoBERTa / BERT / ELECTRA configs and weights converted to ours, ours to XLM-R's.

The encoder's weight layout (encoder.py) maps onto BERT and XLM-R one-to-one, so both directions are a
renaming through one table, plus two reshapes:
- q/k/v: Hugging Face keeps `query`, `key`, `value` apart; we fuse them into one `qkv` projection;
- positions: the RoBERTa family numbers positions from padding_idx + 1 (XLM-R: 2), BERT and ELECTRA from 0;
  we keep the table as it is and record where position 0 sits (`position_offset`).
This module converts configs and tensors; hf_folders.py reads and writes the folders. Nothing is imported from
transformers here: it is needed only to use an exported folder, not to write or read one.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from polyalign.io import DataError
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.tokenizer import Tokenizer

HF_CONFIG = "config.json"


@dataclass(frozen=True)
class Family:
    """How one Hugging Face architecture names and numbers things."""

    prefix: str
    """Name of the base model inside task models (`roberta.`, `bert.`, `electra.`)."""
    positions_after_padding: bool
    """RoBERTa family: position ids start at pad_token_id + 1 (fairseq heritage)."""
    head: dict[str, str]
    """The MLM head's parameters (module names, Hugging Face -> ours)."""
    ignored: tuple[str, ...]
    """Name prefixes of weights we do not use (pooler, NSP, replaced-token-detection head, buffers)."""


ROBERTA = Family(
    "roberta",
    True,
    {"lm_head.dense": "lm_head.dense", "lm_head.layer_norm": "lm_head.norm", "lm_head.bias": "lm_head.decoder.bias"},
    ("pooler.", "embeddings.position_ids", "lm_head.decoder."),
)
BERT = Family(
    "bert",
    False,
    {
        "cls.predictions.transform.dense": "lm_head.dense",
        "cls.predictions.transform.LayerNorm": "lm_head.norm",
        "cls.predictions.bias": "lm_head.decoder.bias",
    },
    ("pooler.", "embeddings.position_ids", "cls.seq_relationship.", "cls.predictions.decoder."),
)
ELECTRA = Family(
    "electra",
    False,
    {  # ElectraForMaskedLM (generator); a discriminator has no MLM head and gets a fresh one
        "generator_predictions.dense": "lm_head.dense",
        "generator_predictions.LayerNorm": "lm_head.norm",
        "generator_lm_head.bias": "lm_head.decoder.bias",
    },
    ("embeddings.position_ids", "discriminator_predictions.", "generator_lm_head.weight"),
)
FAMILIES = {"xlm-roberta": ROBERTA, "roberta": ROBERTA, "bert": BERT, "electra": ELECTRA}

# Module names, Hugging Face (inside the base model) -> ours. Export uses the same tables backwards.
EMBEDDINGS = {
    "embeddings.word_embeddings": "encoder.embeddings.word",
    "embeddings.position_embeddings": "encoder.embeddings.position",
    "embeddings.token_type_embeddings": "encoder.embeddings.token_type",
    "embeddings.LayerNorm": "encoder.embeddings.norm",
    "embeddings_project": "encoder.embeddings.project",  # ELECTRA: embedding_size -> hidden_size
}
LAYER = {  # inside encoder.layer.{i} / encoder.layers.{i}
    "attention.output.dense": "attention.output",
    "attention.output.LayerNorm": "attention_norm",
    "intermediate.dense": "feed_forward.up",
    "output.dense": "feed_forward.down",
    "output.LayerNorm": "feed_forward_norm",
}
QKV = ("query", "key", "value")  # fused in this order: qkv.weight = cat(query, key, value) along rows
_HF_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
_OUR_LAYER = re.compile(r"^encoder\.layers\.(\d+)\.(.+)\.(weight|bias)$")
EXACT_GELU = ("gelu", "gelu_python")


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------------
# Import


def encoder_config_from_hf(hf: dict, where: Path) -> EncoderConfig:
    """Our EncoderConfig for a Hugging Face config.json, refusing what our encoder would compute differently."""
    family = hf_family(hf, where)
    act = hf.get("hidden_act", "gelu")
    if act not in EXACT_GELU:
        raise DataError(
            f"{where}: hidden_act={act!r} is not supported; polyalign's encoder uses exact GELU ('gelu'), "
            f"so this model's outputs would differ"
        )
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise DataError(f"{where}: position_embedding_type={hf['position_embedding_type']!r}; only 'absolute' maps")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise DataError(f"{where}: a decoder / cross-attention configuration; polyalign imports encoders only")
    pad = hf.get("pad_token_id")
    pad = 1 if pad is None and family is ROBERTA else (0 if pad is None else pad)
    offset = pad + 1 if family.positions_after_padding else 0
    hidden = hf["hidden_size"]
    embedding = hf.get("embedding_size", hidden)
    try:
        return EncoderConfig(
            vocab_size=hf["vocab_size"],
            hidden_size=hidden,
            num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"],
            ffn_size=hf["intermediate_size"],
            dropout=hf.get("hidden_dropout_prob", 0.1),
            attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
            max_positions=hf["max_position_embeddings"] - offset,
            position_offset=offset,
            type_vocab_size=hf.get("type_vocab_size", 2),
            embedding_size=0 if embedding == hidden else embedding,
            norm="post",
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            pad_token_id=pad,
            initializer_range=hf.get("initializer_range", 0.02),
        )
    except KeyError as err:
        raise DataError(f"{where}: config lacks {err.args[0]!r}") from None
    except ValueError as err:
        raise DataError(f"{where}: {err}") from None


def hf_family(hf: dict, where: Path) -> Family:
    model_type = hf.get("model_type")
    if model_type not in FAMILIES:
        raise DataError(
            f"{where}: model_type={model_type!r} is not supported; polyalign imports {', '.join(sorted(FAMILIES))}"
        )
    return FAMILIES[model_type]


def hf_to_polyalign_state(
    hf_state: dict[str, torch.Tensor], family: Family, where: Path
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Rename (and fuse q/k/v of) Hugging Face weights into ours. Returns (our state, MLM decoder weights
    found in the file, to check the tie)."""
    ours: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    decoders, unknown = {}, []
    for name, tensor in hf_state.items():
        name = name.removeprefix(f"{family.prefix}.")
        name = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", name))  # old TF-converted BERTs
        tensor = tensor.float()
        if name.endswith("decoder.weight") or name == "generator_lm_head.weight":
            decoders[name] = tensor
        if name.startswith(family.ignored):
            continue
        if m := _HF_LAYER.match(name):
            i, module, kind = m.groups()
            if module.startswith("attention.self.") and module.split(".")[-1] in QKV:
                qkv.setdefault((int(i), kind), {})[module.split(".")[-1]] = tensor
                continue
            if module in LAYER:
                ours[f"encoder.layers.{i}.{LAYER[module]}.{kind}"] = tensor
                continue
        module, _, kind = name.rpartition(".")
        target = EMBEDDINGS.get(module) or family.head.get(module) or family.head.get(name)
        if target is None:
            unknown.append(name)
        else:
            ours[target if name in family.head else f"{target}.{kind}"] = tensor
    if unknown:
        raise DataError(f"{where}: weights polyalign's encoder has no place for: {sorted(unknown)[:6]}")
    for (i, kind), parts in qkv.items():
        if set(parts) != set(QKV):
            raise DataError(f"{where}: layer {i} lacks attention {sorted(set(QKV) - set(parts))} {kind}")
        ours[f"encoder.layers.{i}.attention.qkv.{kind}"] = torch.cat([parts[p] for p in QKV])  # (3C, ...)
    return ours, decoders


def hf_model(
    config: EncoderConfig, state: dict[str, torch.Tensor], decoders: dict[str, torch.Tensor], where: Path
) -> MaskedLanguageModel:
    """Our model holding the converted weights (`hf_to_polyalign_state`'s two dicts); `where` names the folder
    in messages. An absent MLM head is initialised afresh; untied decoder weights give way to the embeddings."""
    model = MaskedLanguageModel(config)
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # shape mismatches between config.json and the weights
        raise DataError(
            f"{where}: weights do not match {where / HF_CONFIG} ({str(err).splitlines()[-1].strip()})"
        ) from None
    missing = [k for k in result.missing_keys if k != "lm_head.decoder.weight"]  # tied to the word embeddings
    if [k for k in missing if not k.startswith("lm_head.")]:
        raise DataError(f"{where}: encoder weights missing from the checkpoint: {sorted(missing)[:6]}")
    if missing:
        _note(f"{where} has no MLM head (e.g. an ELECTRA discriminator); it is initialised afresh")
    embeddings = model.encoder.embeddings.word.weight[: config.vocab_size]  # without the padding rows
    for name, weight in decoders.items():
        if weight.shape != embeddings.shape or not torch.equal(weight, embeddings.detach()):
            _note(f"{where}: {name} is not tied to the word embeddings; polyalign ties them and uses the embeddings")
    return model


# ---------------------------------------------------------------------------------------------------------
# Export


def export_problems(config: EncoderConfig, drop_cross_attention: bool, languages_as_token_types: bool) -> list[str]:
    """What an XLM-RoBERTa model cannot express about this encoder (empty: it exports exactly)."""
    problems = []
    if config.norm != "post":
        problems.append("pre-LN layers (XLM-R is post-LN)")
    if not config.absolute_positions:
        problems.append("no absolute position embeddings (absolute_positions: false; XLM-R always adds them)")
    if config.position_bias != "none":
        problems.append(f"a {config.position_bias} position bias in attention (XLM-R has none)")
    if config.embedding_size and config.embedding_size != config.hidden_size:
        problems.append(f"factorised embeddings (embedding_size={config.embedding_size}; XLM-R has none)")
    if config.cross_attention and not drop_cross_attention:
        problems.append("cross-attention sublayers (pass --drop-cross-attention to export the encoder without them)")
    if config.num_languages and not languages_as_token_types:
        problems.append("language embeddings (pass --languages-as-token-types to fold them into token-type embeddings)")
    if config.num_languages and languages_as_token_types and config.type_vocab_size > 1:
        problems.append("both language and token-type embeddings (only one of them can become token types)")
    return problems


def polyalign_to_hf_state(
    model: MaskedLanguageModel, languages_as_token_types: bool = False
) -> dict[str, torch.Tensor]:
    """Our weights under XLMRobertaForMaskedLM's names (the tied decoder weight is left to transformers)."""
    c = model.config
    inverse_embeddings = {v: k for k, v in EMBEDDINGS.items()}
    inverse_layer = {v: k for k, v in LAYER.items()}
    inverse_head = {v: k for k, v in ROBERTA.head.items()}
    hf: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().float().contiguous()
        module, _, kind = name.rpartition(".")
        if m := _OUR_LAYER.match(name):
            i, sub, kind = m.groups()
            if sub == "attention.qkv":
                for part, piece in zip(QKV, tensor.chunk(3), strict=True):  # (3C, ...) -> 3 x (C, ...)
                    hf[f"roberta.encoder.layer.{i}.attention.self.{part}.{kind}"] = piece.contiguous()
            elif sub.startswith(("cross_attention", "attention.position_bias")):
                continue  # dropped by choice (checked in export_problems)
            else:
                hf[f"roberta.encoder.layer.{i}.{inverse_layer[sub]}.{kind}"] = tensor
        elif name in inverse_head:
            hf[inverse_head[name]] = tensor
        elif module in inverse_head:
            hf[f"{inverse_head[module]}.{kind}"] = tensor
        elif module in inverse_embeddings:
            hf[f"roberta.{inverse_embeddings[module]}.{kind}"] = tensor
        elif name not in ("lm_head.decoder.weight", "encoder.embeddings.language.weight"):
            raise ValueError(f"no XLM-R name for {name}")
    hf["roberta.embeddings.position_embeddings.weight"] = _xlmr_position_table(
        model.encoder.embeddings.position.weight.detach().float(), c
    )
    hf["roberta.embeddings.token_type_embeddings.weight"] = _token_type_table(model, languages_as_token_types)
    return hf


def _xlmr_position_table(table: torch.Tensor, c: EncoderConfig) -> torch.Tensor:
    """XLM-R reads position p (0-based among real tokens) from row pad + 1 + p; we read it from row
    position_offset + p. Rows before pad + 1 are only ever read for padding tokens; they stay zero."""
    start = c.pad_token_id + 1
    out = torch.zeros(c.max_positions + start, table.shape[1])
    out[start:] = table[c.position_offset : c.position_offset + c.max_positions]
    keep = min(start, c.position_offset)
    out[start - keep : start] = table[c.position_offset - keep : c.position_offset]
    return out


def _token_type_table(model: MaskedLanguageModel, languages_as_token_types: bool) -> torch.Tensor:
    """Token-type rows; with languages folded in, row l = (our token type 0) + (language l), so passing
    token_type_ids = language index reproduces our language_ids exactly."""
    e = model.encoder.embeddings
    base = e.token_type.weight.detach().float() if e.token_type is not None else torch.zeros(1, e.word.weight.shape[1])
    if languages_as_token_types and e.language is not None:
        return (base[:1] + e.language.weight.detach().float()).contiguous()  # (num_languages, E)
    return base.contiguous()


def hf_sizes(c: EncoderConfig) -> dict:
    """The encoder's sizes under the names of transformers' configs (BERT, XLM-R, ELECTRA)."""
    return {
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "intermediate_size": c.ffn_size,
    }


def xlmr_config(model: MaskedLanguageModel, tokenizer: Tokenizer, type_vocab_size: int) -> dict:
    c, sp = model.config, tokenizer.special
    return {
        "architectures": ["XLMRobertaForMaskedLM"],
        "model_type": "xlm-roberta",
        **hf_sizes(c),
        "hidden_act": "gelu",
        "hidden_dropout_prob": c.dropout,
        "attention_probs_dropout_prob": c.attention_dropout,
        "max_position_embeddings": c.max_positions + c.pad_token_id + 1,
        "type_vocab_size": type_vocab_size,
        "initializer_range": c.initializer_range,
        "layer_norm_eps": c.layer_norm_eps,
        "pad_token_id": c.pad_token_id,
        "bos_token_id": sp.cls,
        "eos_token_id": sp.sep,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
