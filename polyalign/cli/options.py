"""Every option that more than one command takes, defined once with its one help text (typer's Annotated aliases),
the choices as enumerations, where the evaluation data is found, and the helpers that read the options."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from polyalign.io import DataError, refuse_existing

# ---------------------------------------------------------------------------------------------------------
# Where evaluation data is found when --data is not given: never a path relative to the working directory.

EVAL_DATA_ENV = "POLYALIGN_DATA"
"""The environment variable naming the evaluation data pack (the folder of tatoeba/, bucc2018/, xnli/, ...)."""
CHECKOUT_EVAL_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "eval"
"""Without it: shared/data/eval beside the polyalign checkout, where the project keeps its data."""
EVAL_DATA_HELP = f"${EVAL_DATA_ENV}, else shared/data/eval beside the polyalign checkout"


def eval_data(data: Path | None, part: str = "") -> Path:
    """`--data` when given; else `part` of the evaluation pack ($POLYALIGN_DATA, else CHECKOUT_EVAL_DATA)."""
    if data is not None:
        return data
    pack = Path(os.environ[EVAL_DATA_ENV]) if os.environ.get(EVAL_DATA_ENV) else CHECKOUT_EVAL_DATA
    if not pack.is_dir():
        raise DataError(f"{pack}: no evaluation data pack there; pass --data, or set {EVAL_DATA_ENV} to the pack")
    return pack / part


def comma_list(value: str | None) -> list[str] | None:
    """`a, b,c` as [a, b, c]; None for no value."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def check_new_folder(out: Path, overwrite: bool) -> None:
    """Refuse an existing output folder before any work, naming `--overwrite` (for the commands that have it)."""
    refuse_existing(out, overwrite, "pass --overwrite to replace it, or choose another path")


# ---------------------------------------------------------------------------------------------------------
# Choice options are enumerations, so that --help lists the choices and a typo is a one-line usage error.
# (StrEnum's functional form: each member's value is its name.)

BadLines = StrEnum("BadLines", ["skip", "error"])
AlignmentMethod = StrEnum("AlignmentMethod", ["ot", "argmax", "itermax", "softmax"])
Encoding = StrEnum("Encoding", ["separate", "pair"])
Precision = StrEnum("Precision", ["bf16", "fp32"])
Pooling = StrEnum("Pooling", ["mean", "first"])
Score = StrEnum("Score", ["cosine", "margin"])


class Setting(StrEnum):
    transfer = "transfer"
    translate_train_all = "translate-train-all"


# ---------------------------------------------------------------------------------------------------------
# The shared options. A name means one thing wherever it appears; where one word means two things (a model to
# read, a model folder to write), each meaning has its own alias.

ModelFolder = Annotated[
    Path, typer.Option("--model", help="Model folder, checkpoint, run folder, or local Hugging Face folder.")
]
NewModelFolder = Annotated[Path, typer.Option("--out", help="Model folder to create.")]
ResultsFolder = Annotated[
    Path | None,
    typer.Option("--out", help="Folder for the results: JSON, and the Markdown table or the layer sweep (CSV + plot)."),
]


def eval_data_option(part: str, what: str):
    """A `--data` option for `what` whose default is `part` of the evaluation pack: the command receives the folder,
    resolved by `eval_data` as the option is read."""
    default = f"{part}/ of {EVAL_DATA_HELP}" if part else EVAL_DATA_HELP
    option = typer.Option("--data", help=f"{what} (default: {default}).", callback=lambda data: eval_data(data, part))
    return Annotated[Path | None, option]


EvalPack = eval_data_option("", "The evaluation data pack")
Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a setting: a dotted key into the command's typed config, the value read as YAML "
        "(repeatable): pretrain `trainer.lr=1e-4`; finetune `finetune.lr=1e-4`, `task.pooling=mean`; xtreme the "
        "same for every task, or `xnli.finetune.lr=1e-4` for one.",
    ),
]
Layer = Annotated[
    int | None,
    typer.Option(
        help="Layer to read (0 = embeddings; default, scaled to the depth: XTREME's 7 of 12 for sentences, "
        "SimAlign's 8 of 12 for words unless the model folder's alignment.json names one)."
    ),
]
Layers = Annotated[str | None, typer.Option(help="`all`: also sweep every layer (CSV + PNG written to --out).")]
TrustPickle = Annotated[bool, typer.Option(help="Allow pickled Hugging Face weights (pytorch_model.bin).")]
Overwrite = Annotated[bool, typer.Option(help="Replace an existing output folder.")]
Progress = Annotated[bool, typer.Option(help="Show progress bars.")]
BatchTokens = Annotated[int, typer.Option(min=1, help="Padded tokens per encoding batch.")]
Device = Annotated[
    str | None, typer.Option(help="Torch device, e.g. cpu, cuda, cuda:1 (default: CUDA when available); bf16 there.")
]
TextPrefix = Annotated[
    str, typer.Option(help="Text put before every sentence (E5 models expect 'query: ' for bitext mining).")
]
PoolingOption = Annotated[
    Pooling, typer.Option("--pooling", help="Sentence vector: `mean` over real tokens (XTREME) or the `first` token.")
]
SettingOption = Annotated[
    Setting,
    typer.Option("--setting", help="`transfer` (train on English) or `translate-train-all` (tasks without it fail)."),
]
MaxTrain = Annotated[int, typer.Option(help="Subsample training examples (0 = all).")]
MaxSelect = Annotated[int, typer.Option(help="Subsample selection examples per language (0 = all).")]
MaxEval = Annotated[int, typer.Option(help="Subsample test examples per language (0 = all).")]

# Word alignment (align, fit-aligner, evaluate alignment). The reading options (--method, --layer,
# --softmax-threshold, --encoding) are resolved by align/reading.py's `resolve_reading`: each one given wins over
# the model folder's alignment.json, which wins over the fallback.
SourceFile = Annotated[
    Path | None,
    typer.Option(
        "--src",
        help="Source sentences, one per line, words separated by spaces, or raw text with --tokenize (alone: "
        "`source ||| target` lines).",
    ),
]
TargetFile = Annotated[Path | None, typer.Option("--tgt", help="Target sentences, line-aligned with --src.")]
PairsFile = Annotated[
    Path | None,
    typer.Option(
        "--pairs", help="One file of `source ||| target` lines (fast_align's, eflomal's, awesome-align's format)."
    ),
]
Tokenize = Annotated[
    bool,
    typer.Option(
        help="Split raw text into words first: at whitespace and around every punctuation character (BERT's "
        "pre-tokenizer from the `tokenizers` package: `Cherie,` -> `Cherie` `,`). The links then index those "
        "words (the ones `align --output-words` prints); without it, the input's whitespace-separated tokens."
    ),
]
AlignMethod = Annotated[
    AlignmentMethod | None,
    typer.Option(
        "--method",
        help="`argmax` (SimAlign), `itermax` (SimAlign), `ot` (XLM-Align) or `softmax` (awesome-align's thresholded "
        "softmaxes). Default: the model folder's alignment.json (e5-small: softmax at 0.1), else argmax.",
    ),
]
AlignLayer = Annotated[
    int | None,
    typer.Option(
        "--layer",
        help="Layer to read links from (0 = embeddings). Default: the model folder's alignment.json (e5-small: 7), "
        "else two thirds of the depth (SimAlign's 8 of 12).",
    ),
]
SoftmaxThreshold = Annotated[
    float | None,
    typer.Option(
        help="`softmax` only: both directional probabilities must exceed this. Default: the model folder's "
        "alignment.json (e5-small: 0.1), else awesome-align's 0.001."
    ),
]
AlignEncoding = Annotated[
    Encoding | None,
    typer.Option(
        "--encoding",
        help="`separate` (each sentence alone, as SimAlign and awesome-align) or `pair` (concatenated, as "
        "XLM-Align). Default: the model folder's alignment.json with its method, else the method's own: pair "
        "for ot, separate for the others.",
    ),
]
AlignPrecision = Annotated[
    Precision,
    typer.Option(
        "--precision",
        help="Encoder precision: `bf16` (weights and activations in bf16; about twice as fast on CPUs with bf16 "
        "instructions, a few links differ from fp32's) or `fp32`.",
    ),
]


# ---------------------------------------------------------------------------------------------------------
# Reading the options


def reading_flags(method, layer: int | None, softmax_threshold: float | None, encoding):
    """The reading options as align/reading.py's `ReadingFlags`, checked (the layer against the model later)."""
    from polyalign.align.reading import ReadingFlags, check_flags

    flags = ReadingFlags(
        method.value if method else None, layer, softmax_threshold, encoding.value if encoding else None
    )
    check_flags(flags)
    return flags


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


def model_reading(model: Path, flags):
    """How the model of --model is read with these flags (align/reading.py's `resolve_reading`), from its folder's
    files alone: a bad alignment.json or --layer is one line before the model loads."""
    from polyalign.align.reading import model_depth, resolve_reading
    from polyalign.checkpoint import resolve_model_folder

    folder = resolve_model_folder(model)
    return resolve_reading(folder, model_depth(folder), flags)


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
