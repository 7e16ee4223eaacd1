"""`polyalign align`: word links for a user's bitext (two files or one `source ||| target` file), written as
Pharaoh lines, with awesome-align's optional probability and word-pair files beside them; `polyalign fit-aligner`:
the aligner self-trained on that bitext first, then its links, in one command."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer

import polyalign.cli.options as options
from polyalign.io import DataError, atomic_text_file
from polyalign.outputs import hold_output
from polyalign.tables import console

app = typer.Typer()


@app.command()
def align(
    model: options.ModelFolder,
    src: options.SourceFile = None,
    tgt: options.TargetFile = None,
    pairs: options.PairsFile = None,
    tokenize: options.Tokenize = False,
    out: Annotated[Path | None, typer.Option(help="Write the links to this new file (default: stdout).")] = None,
    output_prob: Annotated[
        Path | None,
        typer.Option(
            help="Also write each link's probability to this new file, one line per pair in the order of its links "
            "(awesome-align's --output_prob_file, for every method)."
        ),
    ] = None,
    output_words: Annotated[
        Path | None,
        typer.Option(
            help="Also write the linked words to this new file, `source<sep>target` per link, one line per pair "
            "(awesome-align's --output_word_file)."
        ),
    ] = None,
    method: options.AlignMethod = None,
    softmax_threshold: options.SoftmaxThreshold = None,
    layer: options.AlignLayer = None,
    src_lang: Annotated[str | None, typer.Option(help="Source language code (for language embeddings).")] = None,
    tgt_lang: Annotated[str | None, typer.Option(help="Target language code (for language embeddings).")] = None,
    encoding: options.AlignEncoding = None,
    precision: options.AlignPrecision = options.Precision.bf16,
    batch_tokens: options.BatchTokens = 8192,
    chunk: Annotated[int, typer.Option(help="Sentence pairs read, length-sorted and aligned at a time.")] = 20000,
    device: options.Device = None,
    trust_pickle: options.TrustPickle = False,
    progress: options.Progress = True,
) -> None:
    """Word-align a bitext; writes Pharaoh links (`i-j`, 0-based word indices, source first), one line per pair.
    The input is words separated by spaces (e.g. Moses-tokenised text), or raw text with --tokenize; a pair with an
    empty side is refused. The defaults read the model as its folder recommends (alignment.json: for
    multilingual-e5-small and aligners made from it, softmax at 0.1 on layer 7), else argmax at two thirds of the
    depth; each sentence encoded alone."""
    from polyalign.align.aligner import Aligner
    from polyalign.align.bitext import bitext_from_options, check_bitext
    from polyalign.align.write import align_bitext, report_cut_pairs

    flags = options.reading_flags(method, layer, softmax_threshold, encoding)
    bitext = bitext_from_options(src, tgt, pairs, tokenize)
    outputs = {"--out": out, "--output-prob": output_prob, "--output-words": output_words}
    check_new_files(outputs, bitext.paths())
    with ExitStack() as stack:
        for option, path in outputs.items():  # each output held while it is written, and never an input
            inputs = {"--model": model, "--src": src, "--tgt": tgt, "--pairs": pairs}
            stack.enter_context(hold_output(path, "polyalign align", inputs, option))
        total = check_bitext(bitext)  # every input line, before the model loads and before anything is written
        reading = options.model_reading(model, flags)  # a bad alignment.json or layer stops here, before loading
        loaded = options.load_on_device(model, device, trust_pickle)
        aligner = Aligner(loaded, batch_tokens=batch_tokens, precision=precision.value, **vars(flags))
        languages = (src_lang, tgt_lang) if src_lang and tgt_lang else None
        console.print(f"align: {reading.announce()}; {precision.value}", highlight=False, soft_wrap=True)
        links = stack.enter_context(atomic_text_file(out)) if out else sys.stdout
        cut = align_bitext(aligner, bitext, total, links, languages, output_prob, output_words, chunk, progress)
    report_cut_pairs(cut, bitext.source, loaded.model.config.max_positions)


def check_new_files(outputs: dict[str, Path | None], inputs: list[Path]) -> None:
    """Output files must be new, distinct, and not an input: nothing a user wrote is overwritten."""
    seen: dict[Path, str] = {path.resolve(): "an input" for path in inputs}
    for option, path in outputs.items():
        if path is None:
            continue
        if path.resolve() in seen:
            raise DataError(f"{option} {path}: is also {seen[path.resolve()]}; write each output to its own file")
        if path.exists():
            raise DataError(f"{option} {path}: already exists; choose another path or remove it yourself")
        seen[path.resolve()] = option


@app.command("fit-aligner")
def fit_aligner(
    ctx: typer.Context,
    model: Annotated[Path | None, typer.Option("--model", help="The start: a model or run folder.")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Folder to create: links.txt, aligner/ (the model), run/, fit.json.")
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Finish the fit in this folder (an --out that a signal or a kill stopped) with the settings it "
            "started with: training from its last checkpoint, then the interpolation and the links."
        ),
    ] = None,
    src: options.SourceFile = None,
    tgt: options.TargetFile = None,
    pairs: options.PairsFile = None,
    tokenize: options.Tokenize = False,
    steps: Annotated[
        int | None, typer.Option(help="Self-training steps of 16 pairs (default: one pass, at most 1,000).")
    ] = None,
    lr: Annotated[float, typer.Option(help="Peak learning rate of the self-training (awesome-align's).")] = 2e-5,
    weight: Annotated[
        float,
        typer.Option(
            help="WiSE-FT interpolation weight of the self-trained model: the aligner is (1 - w) x start + w x "
            "trained (0 = the start, 1 = the trained model)."
        ),
    ] = 0.5,
    src_lang: Annotated[str, typer.Option(help="Source language code (2-3 letters).")] = "src",
    tgt_lang: Annotated[str, typer.Option(help="Target language code (2-3 letters).")] = "tgt",
    method: options.AlignMethod = None,
    softmax_threshold: options.SoftmaxThreshold = None,
    layer: options.AlignLayer = None,
    encoding: options.AlignEncoding = None,
    batch_tokens: options.BatchTokens = 8192,
    device: options.Device = None,
    progress: options.Progress = True,
) -> None:
    """Fit a word aligner to your bitext and write its links: self-train the start model on the bitext
    (awesome-align's objective, recipe self-align), pull it back towards the start (--weight), and align with the
    reading the start's folder recommends (its alignment.json, else argmax two thirds up) or the one the flags
    name; the aligner's folder records that reading. Input as `align`'s: words separated by spaces, or raw text
    with --tokenize. `--resume OUT` finishes an interrupted fit."""
    from polyalign.align.bitext import bitext_from_options
    from polyalign.fit_aligner import FitSettings, resume_fit
    from polyalign.fit_aligner import fit_aligner as fit

    if resume is not None:
        given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name).name == "COMMANDLINE"]
        if extra := [name for name in given if name not in ("--resume", "--device", "--progress", "--no-progress")]:
            raise DataError(
                f"--resume {resume} goes on with the settings the fit started with: drop {', '.join(extra)}"
            )
        resume_fit(resume, options.torch_device(device), progress)
        return
    if model is None or out is None:
        raise DataError("fit-aligner needs --model and --out (or --resume OUT to finish an interrupted fit)")
    if steps is not None and steps < 1:
        raise DataError(f"--steps {steps}: give at least 1 (or leave it out for one pass over the bitext)")
    if not lr > 0:
        raise DataError(f"--lr {lr}: give a positive learning rate, e.g. 2e-5")
    if not 0 <= weight <= 1:
        raise DataError(f"--weight {weight}: give a weight in [0, 1] (0.5 is halfway back to the start)")
    flags = options.reading_flags(method, layer, softmax_threshold, encoding)
    settings = FitSettings(
        steps=steps, src_lang=src_lang, tgt_lang=tgt_lang, flags=flags, lr=lr, weight=weight,
        batch_tokens=batch_tokens, device=options.torch_device(device), progress=progress,
    )  # fmt: skip
    fit(model, bitext_from_options(src, tgt, pairs, tokenize), out, settings)
