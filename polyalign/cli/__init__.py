"""The `polyalign` command: prepare, pretrain, evaluate, quickstart (and more as methods land)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from typer._click import exceptions as click_errors  # typer (pinned) vendors its own click

from polyalign.cli_align import align
from polyalign.cli_finetune import TaskHelp, finetune, xtreme
from polyalign.cli_models import export, import_e5, interpolate, plug_out_command
from polyalign.cli_options import (
    AlignEncoding,
    AlignmentMethod,
    AlignMethod,
    AlignPrecision,
    BadLines,
    BatchTokens,
    Device,
    ModelFolder,
    Overwrite,
    Pooling,
    PoolingOption,
    Precision,
    Progress,
    Score,
    SentenceLayer,
    TextPrefix,
    TrustPickle,
    check_new_folder,
    comma_list,
    load_on_device,
    model_label,
    provenance,
    wants_sweep,
)
from polyalign.io import DataError, write_json
from polyalign.tables import console, print_prepared, print_tatoeba

# Plain (click) help rather than rich's tables: at 80 columns rich cut option names and help texts short
# (`--tokenizer-sampl…`), where click wraps them whole.
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Cross-lingual pre-training with alignment objectives, and alignment measurement.",
)
evaluate_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="Measure a model: retrieval, word alignment."
)
app.add_typer(evaluate_app, name="evaluate")


# ---------------------------------------------------------------------------------------------------------


@app.command()
def prepare(
    out: Annotated[Path, typer.Option(help="Folder to create for tokenizer and token shards.")],
    mono: Annotated[Path | None, typer.Option(help="Folder of monolingual files {lang}.txt[.gz].")] = None,
    parallel: Annotated[
        Path | None, typer.Option(help="Folder of {a}-{b}.{a} + {a}-{b}.{b} files, or {a}-{b}.tsv.")
    ] = None,
    langs: Annotated[str | None, typer.Option(help="Comma list of languages to keep (default: all found).")] = None,
    vocab_size: Annotated[int, typer.Option(help="SentencePiece unigram vocabulary size.")] = 32000,
    alpha: Annotated[float, typer.Option(help="Language sampling exponent for tokenizer text, p ∝ m^alpha.")] = 0.7,
    tokenizer_sample_lines: Annotated[
        int, typer.Option(help="Lines of sampled text to train the tokenizer on.")
    ] = 2_000_000,
    tokenizer_from: Annotated[
        Path | None, typer.Option(help="Use this tokenizer: a model or tokenizer folder (polyalign or Hugging Face).")
    ] = None,
    exclude: Annotated[
        list[Path] | None,
        typer.Option(help="Evaluation file/folder whose sentences are dropped from training (repeatable)."),
    ] = None,
    bad_lines: Annotated[
        BadLines, typer.Option(help="`skip` (count and warn) or `error` for empty, over-long or invalid UTF-8 lines.")
    ] = BadLines.skip,
    max_chars: Annotated[int, typer.Option(help="Lines longer than this many characters are bad.")] = 2000,
    dev_pairs: Annotated[
        int, typer.Option(help="Hold out this many pairs of every en-xx file as a dev split (dev/, Tatoeba layout).")
    ] = 0,
    overwrite: Overwrite = False,
    workers: Annotated[
        int, typer.Option(help="Processes that count and tokenize lines (0 = every core); same output for any.")
    ] = 0,
    progress: Progress = True,
) -> None:
    """Train or load a tokenizer and tokenize a corpus into memory-mapped shards."""
    from polyalign.data.prepare import PrepareConfig, discover_corpus
    from polyalign.data.prepare import prepare as run_prepare
    from polyalign.io import LinePolicy

    check_new_folder(out, overwrite)
    corpus = discover_corpus(mono, parallel, comma_list(langs))
    config = PrepareConfig(
        out=out,
        vocab_size=vocab_size,
        alpha=alpha,
        tokenizer_sample_lines=tokenizer_sample_lines,
        tokenizer_from=tokenizer_from,
        exclude=list(exclude or []),
        policy=LinePolicy(max_chars=max_chars, on_bad=bad_lines.value),
        dev_pairs=dev_pairs,
        overwrite=overwrite,
        workers=workers,
        progress=progress,
    )
    meta = run_prepare(corpus, config)
    print_prepared(meta, out)


@app.command()
def pretrain(
    recipe: Annotated[
        str | None, typer.Argument(help="Built-in recipe name (mlm, xlm, quickstart, ...) or a YAML path.")
    ] = None,
    run_dir: Annotated[Path, typer.Option(help="Run folder: recipe, metrics, TensorBoard logs, checkpoints.")] = Path(
        "runs/run"
    ),
    data: Annotated[Path | None, typer.Option(help="Prepared data folder (sets data.prepared).")] = None,
    init_from: Annotated[
        Path | None, typer.Option(help="Continue from this model folder (polyalign or Hugging Face).")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a recipe value, e.g. trainer.max_steps=100.")
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(help="Model size, batch and lr settings from polyalign/recipes/presets/NAME.yaml (--set wins)."),
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in --run-dir from its latest checkpoint.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Pre-train an encoder with the objectives a recipe names. Works under torchrun (DDP)."""
    from polyalign.config import load_recipe
    from polyalign.train import load_run_recipe
    from polyalign.train import pretrain as run_pretrain

    overrides = list(set_ or [])
    if data is not None:
        overrides.append(f"data.prepared={data}")
    if init_from is not None:
        overrides.append(f"init_from={init_from}")
    if resume:
        spec = load_run_recipe(run_dir, overrides, preset, named=recipe)
    elif recipe is None:
        raise DataError("name a recipe (e.g. `polyalign pretrain xlm --data prepared/ --run-dir runs/xlm`)")
    else:
        spec = load_recipe(recipe, overrides, preset)
    summary = run_pretrain(spec, run_dir, resume=resume, progress=progress)
    console.print(
        f"done: {summary['new_steps']} steps in {summary['command_seconds'] / 60:.1f} min (the run: {summary['step']} "
        f"steps, {summary['tokens']:,} tokens, {summary['seconds'] / 60:.1f} training min) -> {run_dir}"
    )


def write_result(out: Path | None, name: str, result, about: dict, sweep_title: str | None = None) -> None:
    """An evaluation's result as --out/NAME.json, led by `about` (model, step, command: `provenance`), and, with a
    layer sweep (`sweep_title`), its CSV and plot."""
    if out is None:
        return
    write_json(out / f"{name}.json", about | result.to_dict())
    if sweep_title is not None:
        csv_path, png = result.write_sweep(out, title=sweep_title)
        console.print(f"sweep: {csv_path}, {png}")


@evaluate_app.command("tatoeba")
def evaluate_tatoeba_command(
    model: ModelFolder,
    data: Annotated[Path, typer.Option(help="Folder of tatoeba.xxx-eng.{xxx,eng} files.")] = Path(
        "../shared/data/eval/tatoeba"
    ),
    langs: Annotated[str, typer.Option(help="`tatoeba14`, `all`, or a comma list of codes.")] = "tatoeba14",
    layer: SentenceLayer = None,
    layers: Annotated[str | None, typer.Option(help="`all`: also write the layer sweep (CSV + PNG) to --out.")] = None,
    out: Annotated[Path | None, typer.Option(help="Folder for results JSON, sweep CSV and plot.")] = None,
    score: Annotated[
        Score, typer.Option(help="`cosine` or `margin` (ratio margin, k = 4: discounts hub sentences).")
    ] = Score.cosine,
    pooling: PoolingOption = Pooling.mean,
    prefix: TextPrefix = "",
    batch_tokens: BatchTokens = 16384,
    device: Device = None,
    trust_pickle: TrustPickle = False,
    progress: Progress = True,
) -> None:
    """Tatoeba retrieval acc@1 (xx->en, en->xx) per language and averaged, at a layer or across layers."""
    from polyalign.evaluate.tatoeba import evaluate_tatoeba, resolve_languages

    loaded = load_on_device(model, device, trust_pickle)
    sweep = wants_sweep(layers, out, loaded.model.config.num_layers)
    languages = resolve_languages(langs, data)
    result = evaluate_tatoeba(
        loaded, data, languages, layer, batch_tokens, progress, pooling.value, score.value, prefix
    )
    label = model_label(model, loaded)
    print_tatoeba(result, label)
    write_result(out, "tatoeba", result, provenance(model, loaded), f"Tatoeba, {label}" if sweep else None)


@evaluate_app.command("bucc")
def evaluate_bucc_command(
    model: ModelFolder,
    data: Annotated[
        Path, typer.Option(help="Folder of {pair}.{split}.{xx,en,gold}[.gz] files (XTREME format).")
    ] = Path("../shared/data/eval/bucc2018"),
    pair: Annotated[str, typer.Option(help="Language pair, xx-en.")] = "zh-en",
    split: Annotated[str, typer.Option(help="`dev` (gold known) or `test`.")] = "dev",
    layer: SentenceLayer = None,
    pooling: PoolingOption = Pooling.mean,
    prefix: TextPrefix = "",
    out: Annotated[Path | None, typer.Option(help="Folder for bucc.json.")] = None,
    batch_tokens: BatchTokens = 16384,
    device: Device = None,
    trust_pickle: TrustPickle = False,
    progress: Progress = True,
) -> None:
    """BUCC 2018 bitext mining: margin-scored candidates, precision/recall/F1 against the gold pairs."""
    from polyalign.evaluate.bucc import evaluate_bucc

    loaded = load_on_device(model, device, trust_pickle)
    result = evaluate_bucc(
        loaded,
        data,
        pair,
        split,
        layer,
        pooling.value,
        batch_tokens=batch_tokens,
        progress=progress,
        prefix=prefix,
    )
    Console().print(
        f"BUCC {pair} {split}, {model_label(model, loaded)}: F1 {result.f1:.2f} (precision {result.precision:.2f}, "
        f"recall {result.recall:.2f}; {result.mined} mined of {result.candidates} candidates)"
    )
    console.print(result.protocol())
    write_result(out, "bucc", result, provenance(model, loaded))


@app.command()
def quickstart(
    out: Annotated[Path, typer.Option(help="Folder for the prepared sample, the run and the report.")] = Path(
        "runs/quickstart"
    ),
    steps: Annotated[int, typer.Option(help="Training steps.")] = 600,
    progress: Progress = True,
) -> None:
    """The main job on the bundled sample: prepare, train a tiny model with translation ranking + TLM, and show
    retrieval on held-out pairs and word-alignment AER before and after training."""
    from polyalign.quickstart import run_quickstart

    run_quickstart(out, steps, progress)


# ---------------------------------------------------------------------------------------------------------
# Word alignment (align/, evaluate/alignment.py)


app.command()(align)


@evaluate_app.command("alignment")
def evaluate_alignment_command(
    model: ModelFolder,
    gold: Annotated[Path, typer.Option(help="Gold folder with src.txt, tgt.txt, gold.txt (e.g. .../de-en).")],
    method: AlignMethod = AlignmentMethod.ot,
    layer: Annotated[int | None, typer.Option(help="Layer to report (0 = embeddings; default: two thirds up).")] = None,
    layers: Annotated[str | None, typer.Option(help="`all`: also sweep every layer (CSV + PNG in --out).")] = None,
    out: Annotated[Path | None, typer.Option(help="Folder for alignment.json and the sweep CSV and plot.")] = None,
    encoding: AlignEncoding = None,
    precision: AlignPrecision = Precision.bf16,
    batch_tokens: BatchTokens = 8192,
    device: Device = None,
    trust_pickle: TrustPickle = False,
    progress: Progress = True,
) -> None:
    """Alignment error rate (sure/possible links), precision and recall on a gold set, at a layer or all."""
    from polyalign.evaluate.alignment import evaluate_alignment

    loaded = load_on_device(model, device, trust_pickle)
    result = evaluate_alignment(
        loaded,
        gold,
        method.value,
        layer,
        wants_sweep(layers, out, loaded.model.config.num_layers),
        encoding.value if encoding else None,
        batch_tokens,
        progress=progress,
        precision=precision.value,
    )
    label = model_label(model, loaded)
    table = Table(title=f"word alignment, {label}, {result.pair}, {method.value}, {result.encoding} encoding")
    for col in ("layer", "AER", "precision", "recall"):
        table.add_column(col, justify="right")
    for row in result.sweep or [result.to_dict()]:
        table.add_row(str(row["layer"]), f"{row['aer']:.2f}", f"{row['precision']:.2f}", f"{row['recall']:.2f}")
    Console().print(table)
    console.print(result.to_dict()["protocol"] + f"; reported layer {result.layer}: AER {result.aer:.2f}")
    write_result(out, "alignment", result, provenance(model, loaded), label if result.sweep is not None else None)


# ---------------------------------------------------------------------------------------------------------
# Model folders: import, export, plug-out, interpolate (cli_models.py)

app.command("import-e5")(import_e5)
app.command()(export)
app.command("plug-out")(plug_out_command)
app.command()(interpolate)


# ---------------------------------------------------------------------------------------------------------
# Fine-tuning: XTREME-style tasks (polyalign/finetune), commands in cli_finetune.py

app.command(cls=TaskHelp)(finetune)
app.command()(xtreme)


def main(args: list[str] | None = None) -> None:
    """Run the CLI; bad input of any kind (options, files, recipes) ends in one line and exit code 2."""
    try:
        code = app(args=args, standalone_mode=False)
    except DataError as err:
        _fail(str(err))
    except click_errors.NoArgsIsHelpError as err:
        err.show()  # the help text, as `polyalign` alone asks for
        sys.exit(err.exit_code)
    except click_errors.UsageError as err:
        command = f" (see `{err.ctx.command_path} --help`)" if err.ctx is not None else ""
        _fail(err.format_message().replace("\n", " ") + command)
    except click_errors.ClickException as err:
        _fail(err.format_message().replace("\n", " "))
    except (KeyboardInterrupt, typer.Abort):
        console.print("interrupted")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True, markup=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
