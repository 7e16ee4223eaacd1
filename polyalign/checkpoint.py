"""Model folders and training checkpoints: safetensors and JSON only, written atomically.

A *model folder* is what evaluation, fine-tuning and export read:
    config.json          {"polyalign": {...}, "encoder": EncoderConfig, "languages": [...]}
    model.safetensors    MaskedLanguageModel weights (encoder.* and lm_head.*)
    tokenizer/           the tokenizer
A *checkpoint* (runs/NAME/checkpoints/step-0000500/) is a model folder plus what resuming needs:
    objectives.safetensors      the objectives' own parameters and buffers (generators, queues, ...)
    trainer_state.safetensors   optimizer moments and RNG states
    trainer_state.json          step, counters, optimizer hyperparameters, data-stream positions
Loading never unpickles anything: safetensors holds raw tensors, JSON holds the rest.
"""

from __future__ import annotations

import errno
import math
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file, save_model
from safetensors.torch import load_model as load_safetensors_into
from torch import nn

from polyalign import __version__
from polyalign.io import DataError, atomic_dir, read_json, recover_atomic_leftovers, write_json
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.tokenizer import Tokenizer, load_tokenizer

CONFIG_FILE = "config.json"
MODEL_FILE = "model.safetensors"
TOKENIZER_DIR = "tokenizer"
OBJECTIVES_FILE = "objectives.safetensors"
STATE_TENSORS = "trainer_state.safetensors"
STATE_JSON = "trainer_state.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass
class LoadedModel:
    model: MaskedLanguageModel
    tokenizer: Tokenizer
    languages: list[str]
    """Language codes in language-embedding order (empty when the model has none)."""
    folder: Path
    step: int | None = None
    """The training step of a checkpoint (from its config.json); None for other models."""

    def language_id(self, code: str) -> int | None:
        """Index of a language's embedding, accepting ISO 639-1 or Tatoeba codes; None if it has none."""
        from polyalign.languages import TATOEBA_TO_ISO1

        code = TATOEBA_TO_ISO1.get(code, code)
        if not self.model.config.num_languages or code not in self.languages:
            return None
        return self.languages.index(code)


def tied_names(module: nn.Module) -> dict[str, str]:
    """State-dict names of tied tensors (the MLM head's decoder is the word embeddings), each to the name that
    holds the tensor in a file: the first in sorted order, as safetensors' save_model chooses."""
    groups: dict[int, list[str]] = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    return {name: min(names) for names in groups.values() for name in names if name != min(names)}


def save_weights(module: nn.Module, file: Path, weights: dict[str, torch.Tensor] | None = None) -> None:
    """A module's state dict as safetensors, or `weights`: the same names as full tensors (gathered from sharded
    processes, which share no storage); a tied tensor is stored once either way."""
    if weights is None:
        save_model(module, str(file))
        return
    tied = tied_names(module)
    kept = {k: v.contiguous() for k, v in weights.items() if k not in tied}
    save_file(kept, str(file), metadata={"format": "pt", **tied})


def write_model_files(
    folder: Path,
    model: MaskedLanguageModel,
    tokenizer: Tokenizer,
    languages: list[str],
    extra: dict | None = None,
    weights: dict[str, torch.Tensor] | None = None,
) -> None:
    """Write a model folder's files into an existing (temporary) folder (`weights`: see `save_weights`)."""
    config = {
        "polyalign": {"version": __version__, **(extra or {})},
        "encoder": model.config.to_dict(),
        "languages": list(languages),
    }
    write_json(folder / CONFIG_FILE, config)
    save_weights(model, folder / MODEL_FILE, weights)
    tokenizer.save(folder / TOKENIZER_DIR)


def save_model_folder(
    folder: str | Path,
    model: MaskedLanguageModel,
    tokenizer: Tokenizer,
    languages: list[str],
    extra: dict | None = None,
    overwrite: bool = False,
) -> Path:
    with atomic_dir(folder, overwrite=overwrite) as tmp:
        write_model_files(tmp, model, tokenizer, languages, extra)
    return Path(folder)


def is_polyalign_folder(folder: Path) -> bool:
    cfg = folder / CONFIG_FILE
    if not cfg.is_file():
        return False
    meta = read_json(cfg)
    return isinstance(meta, dict) and "polyalign" in meta


def resolve_model_folder(path: str | Path) -> Path:
    """Accept a model folder, a checkpoint, or a run folder (its latest checkpoint)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: model folder not found")
    if (path / CONFIG_FILE).is_file():
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        steps = checkpoint_dirs(path.parent) if path.name == "checkpoints" else []
        if steps:
            raise DataError(
                f"{path}: a checkpoints folder: pass one of its step folders, e.g. {steps[-1]}, or the run folder "
                f"{path.parent} (its latest checkpoint)"
            )
        raise DataError(f"{path}: neither a model folder (no {CONFIG_FILE}) nor a run folder with checkpoints")
    return latest


def load_model(path: str | Path, trust_pickle: bool = False, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a polyalign model folder (or run folder), or a local Hugging Face folder (XLM-R, BERT, ELECTRA).

    `trust_pickle` allows Hugging Face `pytorch_model.bin` weights, which are pickles; off by default.
    """
    folder = resolve_model_folder(path)
    if not is_polyalign_folder(folder):
        try:
            from polyalign.hf_folders import load_hf_model
        except ImportError as err:
            raise DataError(
                f"{folder}: not a polyalign model folder, and Hugging Face import is unavailable ({err})"
            ) from None
        model, tokenizer = load_hf_model(folder, trust_pickle=trust_pickle)
        return LoadedModel(model.to(device).eval(), tokenizer, [], folder)
    meta = read_json(folder / CONFIG_FILE)
    weights = folder / MODEL_FILE
    if not weights.is_file():
        raise DataError(f"{weights}: weights file missing from the model folder")
    config, languages, step = read_model_config(folder / CONFIG_FILE, meta)
    check_weight_shapes(config, weights)  # before any memory is taken: a size in config.json may be huge
    try:
        with without_random_init():  # the strict load below overwrites every parameter
            model = MaskedLanguageModel(config)
    except RuntimeError as err:  # a size the checks above let through, larger than this machine's memory
        raise DataError(f"{folder / CONFIG_FILE}: encoder: {str(err).splitlines()[0]}") from None
    load_model_weights(model, weights, strict=True)
    return LoadedModel(model.to(device).eval(), load_tokenizer(folder / TOKENIZER_DIR), languages, folder, step)


def read_model_config(path: Path, meta: dict) -> tuple[EncoderConfig, list[str], int | None]:
    """(encoder config, languages, step) of a model folder's config.json, checked: a wrong type is one line."""
    encoder, about = meta.get("encoder"), meta.get("polyalign")
    languages, step = meta.get("languages", []), about.get("step") if isinstance(about, dict) else None
    if not isinstance(encoder, dict) or not isinstance(about, dict):
        raise DataError(f"{path}: expected `encoder` and `polyalign` objects; the folder is not a whole model folder")
    if not isinstance(languages, list) or not all(isinstance(lang, str) for lang in languages):
        raise DataError(f"{path}: languages {languages!r}: expected a list of language codes")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise DataError(f"{path}: polyalign.step {step!r}: expected a step number or null")
    try:
        return EncoderConfig.from_dict(encoder), languages, step
    except (TypeError, ValueError) as err:
        raise DataError(f"{path}: encoder: {err}") from None


def check_weight_shapes(config: EncoderConfig, weights: Path) -> None:
    """The model `config` describes, built on the meta device (no memory), against the weights file's shapes and
    size: a config whose sizes differ from the weights' (a huge number among them) is one line, before allocating."""
    config_file = weights.parent / CONFIG_FILE
    try:
        with safe_open(weights, framework="pt") as f:
            stored = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    except Exception as err:  # safetensors raises several types for a damaged header
        raise DataError(f"{weights}: cannot load weights ({str(err).splitlines()[0]})") from None
    # The layers first: building a billion of them, even on the meta device, takes minutes.
    layers = {int(name.split(".")[2]) for name in stored if name.startswith("encoder.layers.")}
    if config.num_layers != len(layers):
        raise DataError(
            f"{config_file}: the encoder config makes {config.num_layers} layers, the weights file holds "
            f"{len(layers)}; the config and the weights are not of one model"
        )
    try:
        with torch.device("meta"):
            model = MaskedLanguageModel(config)
    except (TypeError, ValueError, IndexError, AssertionError, RuntimeError, OverflowError) as err:
        raise DataError(f"{config_file}: encoder: {str(err).splitlines()[0]}") from None
    shapes = {name: tuple(p.shape) for name, p in model.state_dict().items()}
    for name, shape in stored.items():
        if name in shapes and shapes[name] != shape:
            raise DataError(
                f"{config_file}: the encoder config makes {name} {list(shapes[name])}, the weights file holds "
                f"{list(shape)}; the config and the weights are not of one model"
            )
    # What the file lacks or pads (a size that adds a table; `vocab_row_multiple`, whose padding rows no file
    # holds): a model much larger than the whole file is not the file's model, and building it could take all memory.
    built = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    if built > 2 * (held := sum(math.prod(s) for s in stored.values())) + (1 << 24):
        raise DataError(
            f"{config_file}: the encoder config makes a model of {built:,} values, the weights file holds "
            f"{held:,}; the config and the weights are not of one model"
        )


_INIT_FUNCTIONS = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "xavier_uniform_", "zeros_", "ones_")


@contextmanager
def without_random_init() -> Iterator[None]:
    """Build modules without drawing their initial weights (torch.nn.init's fills do nothing inside), for a
    model whose every parameter a strict load overwrites next: small-base's 32k x 256 embedding and the
    decoder it is tied to are drawn three times otherwise, ~0.1 s of every command's start-up. Parameters
    hold uninitialised memory until loaded. (Building on the meta device instead costs ~1 s of imports.)"""
    saved = {name: getattr(nn.init, name) for name in _INIT_FUNCTIONS}
    try:
        for name in _INIT_FUNCTIONS:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def load_model_weights(module: nn.Module, file: Path, strict: bool) -> tuple[list[str], list[str]]:
    try:
        missing, unexpected = load_safetensors_into(module, str(file), strict=False, device="cpu")
    except Exception as err:  # safetensors raises several types for corrupt or mismatched files
        raise DataError(f"{file}: cannot load weights ({str(err).splitlines()[0]})") from None
    if strict and (missing or unexpected):
        raise DataError(
            f"{file}: weights do not match the config (missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]})"
        )
    return list(missing), list(unexpected)


# ---------------------------------------------------------------------------------------------------------
# Training checkpoints


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    ckpt = Path(run_dir) / "checkpoints"
    if not ckpt.is_dir():
        return []
    found = [p for p in ckpt.iterdir() if _STEP_DIR.match(p.name) and p.is_dir()]
    return sorted(found, key=checkpoint_step)


def checkpoint_step(folder: Path) -> int:
    """The training step a checkpoint folder holds, read from the `step-N` name this module gives it."""
    if not (m := _STEP_DIR.match(Path(folder).name)):
        raise ValueError(f"{folder}: not a checkpoint folder (step-N)")
    return int(m[1])


def latest_checkpoint(run_dir: Path) -> Path | None:
    dirs = checkpoint_dirs(run_dir)
    return dirs[-1] if dirs else None


def optimizer_to_files(sd: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """An optimizer state dict (torch's layout: parameters by index) as tensors and JSON."""
    tensors, scalars = {}, {}
    for idx, state in sd["state"].items():
        for k, v in state.items():
            if torch.is_tensor(v):
                tensors[f"optimizer.{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{k}"] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_state_from_files(tensors: dict[str, torch.Tensor], info: dict) -> dict:
    state: dict[int, dict] = {}
    for key, v in tensors.items():
        if key.startswith("optimizer."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = v
    for key, v in info["scalars"].items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = v
    return {"state": state, "param_groups": info["param_groups"]}


def save_checkpoint(
    run_dir: Path,
    step: int,
    *,
    model: MaskedLanguageModel,
    objectives: nn.Module,
    tokenizer: Tokenizer,
    languages: list[str],
    optimizer_state: dict,
    state: dict,
    state_tensors: dict[str, torch.Tensor],
    keep: int,
    weights: dict[str, torch.Tensor] | None = None,
) -> Path:
    """The checkpoint of `step` in `run_dir`: model folder files, objectives' weights, the optimizer state and the
    trainer's `state` (JSON) and `state_tensors`; only the last `keep` checkpoints stay (0: all). `weights`: full
    tensors of model and objectives under `model.` and `objectives.` (gathered from sharded processes); by
    default the modules' own."""
    final = Path(run_dir) / "checkpoints" / f"step-{step:07d}"
    part = {p: None if weights is None else _prefixed(weights, p) for p in ("model.", "objectives.")}
    try:
        with atomic_dir(final, overwrite=True) as tmp:
            write_model_files(tmp, model, tokenizer, languages, {"step": step}, part["model."])
            save_weights(objectives, tmp / OBJECTIVES_FILE, part["objectives."])
            opt_tensors, opt_info = optimizer_to_files(optimizer_state)
            save_file({**opt_tensors, **state_tensors}, str(tmp / STATE_TENSORS))
            write_json(tmp / STATE_JSON, {**state, "optimizer": opt_info})
    except SafetensorError as err:  # safetensors' own type for a failed write (a full disk, a file-size limit)
        raise OSError(errno.EIO, str(err).splitlines()[0], str(final)) from None
    if keep > 0:
        for old in checkpoint_dirs(run_dir)[:-keep]:
            _remove_checkpoint(old)
    return final


def _prefixed(weights: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}


def load_weights(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(file))
    except Exception as err:  # safetensors raises several types for a damaged file
        raise DataError(f"{file}: cannot load weights ({str(err).splitlines()[0]})") from None


def _remove_checkpoint(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def load_checkpoint_state(folder: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    check_checkpoint(folder)
    try:
        return read_json(folder / STATE_JSON), load_file(str(folder / STATE_TENSORS))
    except Exception as err:  # safetensors raises several types for a damaged file
        raise DataError(f"{folder / STATE_TENSORS}: cannot load ({str(err).splitlines()[0]})") from None


def check_checkpoint(folder: Path) -> None:
    """Raise a one-line DataError unless every file a resume reads is present and structurally whole."""
    for f in (CONFIG_FILE, STATE_JSON, STATE_TENSORS, MODEL_FILE, OBJECTIVES_FILE):
        if not (folder / f).is_file():
            raise DataError(f"{folder / f}: checkpoint file missing; the checkpoint is incomplete")
    for f in (CONFIG_FILE, STATE_JSON):
        read_json(folder / f)
    for f in (STATE_TENSORS, MODEL_FILE, OBJECTIVES_FILE):
        try:  # reads the header and checks it against the file's size: a truncated file fails here
            with safe_open(str(folder / f), framework="pt") as handle:
                handle.keys()
        except Exception as err:
            raise DataError(f"{folder / f}: damaged ({str(err).splitlines()[0]})") from None


def resume_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint to resume from: the newest one whose files load, skipping (and naming) damaged newer ones.

    None when the run has no checkpoint yet (stopped before its first save): it then starts again at step 0.
    Leftovers of a save that was killed midway are cleaned up first."""
    folder = Path(run_dir) / "checkpoints"
    if folder.is_dir() and os.environ.get("RANK", "0") == "0":
        for note in recover_atomic_leftovers(folder):
            print(f"note: {note}", file=sys.stderr)
    damaged = []
    for candidate in reversed(checkpoint_dirs(run_dir)):
        try:
            check_checkpoint(candidate)
        except DataError as err:
            damaged.append(str(err))
            continue
        for problem in damaged:
            print(f"note: skipping a damaged checkpoint: {problem}", file=sys.stderr)
        if damaged:
            print(f"note: resuming from the previous kept checkpoint, {candidate.name}", file=sys.stderr)
        return candidate
    if damaged:
        raise DataError(f"no loadable checkpoint left; newest problem: {damaged[0]}")
    print(f"note: {run_dir} has no checkpoint yet; starting it again from step 0", file=sys.stderr)
    return None
