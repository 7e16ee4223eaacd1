"""`polyalign evaluate tatoeba|bucc|alignment`: measure a model (polyalign/evaluate)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from polyalign.cli.options import (
    AlignEncoding,
    AlignLayer,
    AlignMethod,
    AlignPrecision,
    BatchTokens,
    Device,
    Layer,
    Layers,
    ModelFolder,
    Pooling,
    PoolingOption,
    Precision,
    Progress,
    ResultsFolder,
    Score,
    SoftmaxThreshold,
    TextPrefix,
    TrustPickle,
    eval_data_option,
    load_on_device,
    model_label,
    model_reading,
    provenance,
    reading_flags,
    wants_sweep,
)
from polyalign.io import write_json
from polyalign.outputs import hold_output
from polyalign.tables import console, print_tatoeba

app = typer.Typer(
    name="evaluate",
    no_args_is_help=True,
    rich_markup_mode=None,
    help="tatoeba, bucc, alignment: measure retrieval, bitext mining, word alignment.",
)


TatoebaData = eval_data_option("tatoeba", "Folder of tatoeba.xxx-eng.{xxx,eng} files")
BuccData = eval_data_option("bucc2018", "Folder of {pair}.{split}.{xx,en,gold}[.gz] files, XTREME's format")


def write_result(out: Path | None, name: str, result, about: dict, sweep_title: str | None = None) -> None:
    """An evaluation's result as --out/NAME.json, led by `about` (model, step, command: `provenance`), and, with a
    layer sweep (`sweep_title`), its CSV and plot."""
    if out is None:
        return
    write_json(out / f"{name}.json", about | result.to_dict())
    if sweep_title is not None:
        csv_path, png = result.write_sweep(out, title=sweep_title)
        console.print(f"sweep: {csv_path}, {png}")


@app.command("tatoeba")
def evaluate_tatoeba_command(
    model: ModelFolder,
    data: TatoebaData = None,
    langs: Annotated[str, typer.Option(help="`tatoeba14`, `all`, or a comma list of codes.")] = "tatoeba14",
    layer: Layer = None,
    layers: Layers = None,
    out: ResultsFolder = None,
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

    languages = resolve_languages(langs, data)  # before the model loads: a data error costs no loading time
    with hold_output(out, "polyalign evaluate tatoeba", {"--model": model, "--data": data}):
        loaded = load_on_device(model, device, trust_pickle)
        sweep = wants_sweep(layers, out, loaded.model.config.num_layers)
        result = evaluate_tatoeba(
            loaded, data, languages, layer, batch_tokens, progress, pooling.value, score.value, prefix
        )
        label = model_label(model, loaded)
        print_tatoeba(result, label)
        write_result(out, "tatoeba", result, provenance(model, loaded), f"Tatoeba, {label}" if sweep else None)


@app.command("bucc")
def evaluate_bucc_command(
    model: ModelFolder,
    data: BuccData = None,
    pair: Annotated[str, typer.Option(help="Language pair, xx-en.")] = "zh-en",
    split: Annotated[str, typer.Option(help="`dev` (gold known) or `test`.")] = "dev",
    layer: Layer = None,
    pooling: PoolingOption = Pooling.mean,
    prefix: TextPrefix = "",
    out: ResultsFolder = None,
    batch_tokens: BatchTokens = 16384,
    device: Device = None,
    trust_pickle: TrustPickle = False,
    progress: Progress = True,
) -> None:
    """BUCC 2018 bitext mining: margin-scored candidates, precision/recall/F1 against the gold pairs."""
    from polyalign.evaluate.bucc import evaluate_bucc

    with hold_output(out, "polyalign evaluate bucc", {"--model": model, "--data": data}):
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


@app.command("alignment")
def evaluate_alignment_command(
    model: ModelFolder,
    gold: Annotated[Path, typer.Option(help="Gold folder with src.txt, tgt.txt, gold.txt (e.g. .../de-en).")],
    method: AlignMethod = None,
    softmax_threshold: SoftmaxThreshold = None,
    layer: AlignLayer = None,
    layers: Layers = None,
    out: ResultsFolder = None,
    encoding: AlignEncoding = None,
    precision: AlignPrecision = Precision.bf16,
    batch_tokens: BatchTokens = 8192,
    device: Device = None,
    trust_pickle: TrustPickle = False,
    progress: Progress = True,
) -> None:
    """Alignment error rate (sure/possible links), precision and recall on a gold set (its words as given), at a
    layer or all. The model is read as `polyalign align` reads it with the same flags (by default the folder's
    alignment.json), so the AER is that of the links `align` writes."""
    from polyalign.evaluate.alignment import evaluate_alignment

    flags = reading_flags(method, layer, softmax_threshold, encoding)
    reading = model_reading(model, flags)  # a bad alignment.json or layer stops here, before the model loads
    with hold_output(out, "polyalign evaluate alignment", {"--model": model, "--gold": gold}):
        loaded = load_on_device(model, device, trust_pickle)
        sweep = wants_sweep(layers, out, loaded.model.config.num_layers)
        console.print(f"evaluate alignment: {reading.announce()}; {precision.value}", highlight=False, soft_wrap=True)
        result = evaluate_alignment(
            loaded,
            gold,
            flags.method,
            layer,
            sweep,
            flags.encoding,
            batch_tokens,
            progress=progress,
            precision=precision.value,
            softmax_threshold=softmax_threshold,
        )
        label = model_label(model, loaded)
        threshold = f" at {result.softmax_threshold:g}" if result.softmax_threshold is not None else ""
        table = Table(
            title=f"word alignment, {label}, {result.pair}, {result.method}{threshold}, {result.encoding} encoding"
        )
        for col in ("layer", "AER", "precision", "recall"):
            table.add_column(col, justify="right")
        for row in result.sweep or [result.to_dict()]:
            table.add_row(str(row["layer"]), f"{row['aer']:.2f}", f"{row['precision']:.2f}", f"{row['recall']:.2f}")
        Console().print(table)
        console.print(result.to_dict()["protocol"] + f"; reported layer {result.layer}: AER {result.aer:.2f}")
        write_result(out, "alignment", result, provenance(model, loaded), label if result.sweep is not None else None)
