"""Where a run starts: a fresh model from the recipe, or one continued from a checkpoint (`init_from`), whose
architecture and weights it keeps."""

from __future__ import annotations

from torch import nn

from polyalign.checkpoint import load_model
from polyalign.config import Recipe, check_positions
from polyalign.io import DataError
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.objectives import objective_config
from polyalign.tokenizer import Tokenizer

ARCHITECTURE = (
    "vocab_size",
    "hidden_size",
    "num_layers",
    "num_heads",
    "ffn_size",
    "max_positions",
    "absolute_positions",
    "position_offset",
    "embedding_size",
    "type_vocab_size",
    "norm",
    "layer_norm_eps",
    "pad_token_id",
)
"""EncoderConfig fields a checkpoint fixes when a recipe continues from it (`init_from`)."""


def build_model(recipe: Recipe, tokenizer: Tokenizer, languages: list[str]) -> tuple[MaskedLanguageModel, list[str]]:
    """A fresh model from the recipe, or one continued from `init_from` (recipe.model entries override all but
    the checkpoint's ARCHITECTURE)."""
    overrides = dict(recipe.model)
    if overrides.get("num_languages") == "auto":
        overrides["num_languages"] = len(languages)
    sp = tokenizer.special
    if recipe.init_from:
        loaded = load_model(recipe.init_from)
        if loaded.tokenizer.special.vocab_size != sp.vocab_size:
            raise DataError(
                f"{recipe.init_from}: its vocabulary ({loaded.tokenizer.special.vocab_size}) differs from the prepared "
                f"data's ({sp.vocab_size}); prepare the data with --tokenizer-from {recipe.init_from}"
            )
        base = loaded.model.config.to_dict()
        # A checkpoint with language embeddings numbers them by its own codes: `auto` keeps its row count.
        with_rows = bool(loaded.model.config.num_languages)
        if recipe.model.get("num_languages") == "auto" and with_rows:
            overrides["num_languages"] = loaded.model.config.num_languages
        # The checkpoint fixes the architecture (a recipe sized for training from scratch may say otherwise);
        # the recipe still sets the rest: dropout, language embeddings, position bias, cross-attention.
        ignored = {k: v for k, v in overrides.items() if k in ARCHITECTURE and v != base[k]}
        if ignored:
            print(f"note: {recipe.init_from} fixes the architecture; recipe values not applied: {ignored}")
        config = EncoderConfig.from_dict({**base, **{k: v for k, v in overrides.items() if k not in ignored}})
        try:
            check_positions(recipe, config)
        except DataError as err:
            raise DataError(f"{recipe.init_from}: {err}") from None
        model = MaskedLanguageModel(config)
        missing, unexpected = _copy_weights(loaded.model, model)
        if unexpected:
            raise DataError(f"{recipe.init_from}: weights the new config has no place for: {unexpected[:5]}")
        if missing:
            print(f"note: newly initialised parameters not in {recipe.init_from}: {_summarise(missing)}")
        if "encoder.embeddings.language.weight" in missing:
            # Language embeddings added to a model trained without them start at zero, so the continued model
            # computes exactly what the checkpoint did (ERNIE-M §3.2 starts from XLM-R, which has none).
            nn.init.zeros_(model.encoder.embeddings.language.weight)
        # Language embeddings are looked up by code, so keep the checkpoint's order when it has them; a checkpoint
        # without them (num_languages 0) may still name every language it saw, which must not number new rows
        # sized for this run's data (`auto` with data.languages a subset: index out of range).
        return model, (loaded.languages if with_rows and loaded.languages else languages)
    config = EncoderConfig.from_dict({**overrides, "vocab_size": sp.vocab_size, "pad_token_id": sp.pad})
    return MaskedLanguageModel(config), languages


def check_warm_start(recipe: Recipe) -> None:
    """A recipe needs `init_from` when `trainer.train_only` holds parameters of a pretrained start, or when an
    objective says it needs one (`Objective.needs_pretrained_start`) and its config does not allow a cold
    start (`allow_cold_start`, the user's override)."""
    if recipe.init_from is not None:
        return
    if recipe.trainer.train_only:
        raise DataError(
            f"trainer.train_only={recipe.trainer.train_only} trains only those parameters of a pretrained start at "
            "first (VECO §4), but there is none: pass --init-from MODEL, or --set 'trainer.train_only=[]'"
        )
    for i, spec in enumerate(recipe.objectives):
        cls, config = objective_config(spec.name, spec.config, f"objectives.{i}")
        if cls.needs_pretrained_start and not getattr(config, "allow_cold_start", False):
            raise DataError(
                f"objectives.{i} ({spec.name}) needs a pretrained start ({cls.needs_pretrained_start}): "
                f"pass --init-from MODEL, or set objectives.{i}.config.allow_cold_start=true"
            )


def _copy_weights(source: nn.Module, target: nn.Module) -> tuple[list[str], list[str]]:
    result = target.load_state_dict(source.state_dict(), strict=False)
    return list(result.missing_keys), list(result.unexpected_keys)


def _summarise(names: list[str]) -> str:
    groups = sorted({".".join(n.split(".")[:4]) if ".layers." in n else n for n in names})
    return ", ".join(groups[:8]) + (" ..." if len(groups) > 8 else "")
