"""Command-line options that several commands share: their types and help texts, the choices as enumerations,
and the helpers that read them."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from polyalign.io import DataError, refuse_existing


def comma_list(value: str | None) -> list[str] | None:
    """`a, b,c` as [a, b, c]; None for no value."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


# Options that several commands share.
TrustPickle = Annotated[bool, typer.Option(help="Allow pickled Hugging Face weights (pytorch_model.bin).")]
Overwrite = Annotated[bool, typer.Option(help="Replace an existing output folder.")]


def check_new_folder(out: Path, overwrite: bool) -> None:
    """Refuse an existing output folder before any work, naming `--overwrite` (for the commands that have it)."""
    refuse_existing(out, overwrite, "pass --overwrite to replace it, or choose another path")


ModelFolder = Annotated[Path, typer.Option(help="Model folder, checkpoint, run folder, or local Hugging Face folder.")]
Progress = Annotated[bool, typer.Option(help="Show progress bars.")]
BatchTokens = Annotated[int, typer.Option(help="Padded tokens per encoding batch.")]
Device = Annotated[
    str | None, typer.Option(help="Torch device, e.g. cpu, cuda, cuda:1 (default: CUDA when available); bf16 there.")
]
SentenceLayer = Annotated[
    int | None, typer.Option(help="Layer to report (0 = embeddings; default: XTREME's 7 of 12, scaled to the depth).")
]


def wants_sweep(layers: str | None, out: Path | None, num_layers: int) -> bool:
    """Whether `--layers all` asks for a layer sweep (written to --out); any other value is a one-line error that
    names the model's layers."""
    if layers not in (None, "all"):
        raise DataError(
            f"--layers {layers}: the only value is `all` (a sweep over layers 0..{num_layers}); "
            f"for one layer use --layer L with L in 0..{num_layers}"
        )
    if layers == "all" and out is None:
        raise DataError("--layers all writes a CSV and a plot: give --out FOLDER")
    return layers == "all"


def torch_device(name: str | None) -> str:
    """The device to run on: CUDA when available unless one is named; a one-line error for a bad name."""
    import torch

    if name is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DataError(f"--device {name}: not a torch device; use cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DataError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
    return name


def model_label(model: Path, loaded) -> str:
    """How tables and plot titles name a model: its path, and its training step when it is a checkpoint."""
    return str(model) if loaded.step is None else f"{model}, step {loaded.step}"


def provenance(model: Path, loaded) -> dict:
    """What every results file records of how it was made: the model as given, its step (or None), the command."""
    from polyalign.finetune.results import invoked_command

    return {"model": str(model), "step": loaded.step, "command": invoked_command()}


def load_on_device(model: Path, device: str | None, trust_pickle: bool):
    """The model of --model on --device (see `torch_device`); `--trust-pickle` allows pickled weights."""
    from polyalign.checkpoint import load_model

    return load_model(model, trust_pickle=trust_pickle, device=torch_device(device))


# Choice options are enumerations, so that --help lists the choices and a typo is a one-line usage error.
# (StrEnum's functional form: each member's value is its name.)
BadLines = StrEnum("BadLines", ["skip", "error"])
AlignmentMethod = StrEnum("AlignmentMethod", ["ot", "argmax", "itermax", "softmax"])
Encoding = StrEnum("Encoding", ["separate", "pair"])
Precision = StrEnum("Precision", ["bf16", "fp32"])
Pooling = StrEnum("Pooling", ["mean", "first"])
Score = StrEnum("Score", ["cosine", "margin"])

TextPrefix = Annotated[
    str, typer.Option(help="Text put before every sentence (E5 models expect 'query: ' for bitext mining).")
]
PoolingOption = Annotated[
    Pooling, typer.Option(help="Sentence vector: `mean` over real tokens (XTREME) or the `first` token.")
]


# Word alignment (align, evaluate alignment)
AlignMethod = Annotated[
    AlignmentMethod,
    typer.Option(
        help="`argmax` (SimAlign; the recommended, `align`'s default), `itermax` (SimAlign), `ot` (XLM-Align) or "
        "`softmax` (awesome-align's thresholded softmaxes)."
    ),
]
AlignEncoding = Annotated[
    Encoding | None,
    typer.Option(
        help="`separate` (each sentence alone; default for argmax, itermax, softmax, as SimAlign and awesome-align) "
        "or `pair` (concatenated; default for ot, as XLM-Align)."
    ),
]
AlignPrecision = Annotated[
    Precision,
    typer.Option(
        help="Encoder precision: `bf16` (weights and activations in bf16; about twice as fast on CPUs with bf16 "
        "instructions, a few links differ from fp32's) or `fp32`."
    ),
]
