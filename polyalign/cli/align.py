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
from polyalign.tables import console

app = typer.Typer()


@app.command()
def align(
    model: options.ModelFolder,
    src: options.SourceFile = None,
    tgt: options.TargetFile = None,
    pairs: options.PairsFile = None,
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
    method: options.AlignMethod | None = None,
    softmax_threshold: Annotated[
        float | None,
        typer.Option(
            help="`softmax` only: both probabilities must exceed this (default: the model folder's alignment.json, "
            "else awesome-align's 0.001; AccAlign uses 0.1)."
        ),
    ] = None,
    layer: options.Layer = None,
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
    """Word-align a bitext; writes Pharaoh links (`i-j`, 0-based, source first), one line per pair. The defaults
    are the recommended setting: the model folder's own (its alignment.json: for multilingual-e5-small and aligners
    made from it, softmax at 0.1 on layer 7), else argmax at two thirds of the depth; each sentence encoded alone."""
    from polyalign.align.aligner import Aligner, check_layer, default_encoding
    from polyalign.align.bitext import bitext_from_options, check_bitext
    from polyalign.align.reading import read_reading
    from polyalign.align.write import align_bitext, report_cut_pairs
    from polyalign.checkpoint import resolve_model_folder

    if softmax_threshold is not None and not 0 <= softmax_threshold < 1:
        raise DataError(f"--softmax-threshold {softmax_threshold}: use a probability in [0, 1), e.g. 0.001")
    bitext = bitext_from_options(src, tgt, pairs)
    outputs = {"--out": out, "--output-prob": output_prob, "--output-words": output_words}
    check_new_files(outputs, bitext.paths())
    total = check_bitext(bitext)  # every input line, before the model loads and before anything is written
    reading = read_reading(resolve_model_folder(model))  # a bad alignment.json stops here, before the model loads
    method_name = method.value if method else reading.method
    encoding = encoding.value if encoding else default_encoding(method_name)
    loaded = options.load_on_device(model, device, trust_pickle)
    aligner = Aligner(
        loaded, encoding, batch_tokens=batch_tokens, precision=precision.value, softmax_threshold=softmax_threshold
    )
    layer = aligner.default_layer if layer is None else layer
    check_layer(layer, aligner.num_layers)
    languages = (src_lang, tgt_lang) if src_lang and tgt_lang else None
    threshold = f" at {aligner.softmax_threshold:g}" if method_name == "softmax" else ""
    source = f" (the folder's alignment.json: {reading.chosen_by})" if reading.chosen_by and not method else ""
    console.print(
        f"align: {method_name}{threshold}, layer {layer}, {encoding} encoding, {precision.value}{source}",
        highlight=False,
    )
    with ExitStack() as stack:
        links = stack.enter_context(atomic_text_file(out)) if out else sys.stdout
        cut = align_bitext(
            aligner, bitext, total, links, method_name, layer, languages, output_prob, output_words, chunk, progress
        )
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
    model: options.ModelFolder,
    out: Annotated[Path, typer.Option(help="Folder to create: links.txt, aligner/ (the model), run/, fit.json.")],
    src: options.SourceFile = None,
    tgt: options.TargetFile = None,
    pairs: options.PairsFile = None,
    steps: Annotated[
        int | None, typer.Option(help="Self-training steps of 16 pairs (default: one pass, at most 1,000).")
    ] = None,
    src_lang: Annotated[str, typer.Option(help="Source language code (2-3 letters).")] = "src",
    tgt_lang: Annotated[str, typer.Option(help="Target language code (2-3 letters).")] = "tgt",
    layer: options.Layer = None,
    progress: options.Progress = True,
) -> None:
    """Fit a word aligner to your bitext and write its links: self-train the start model on the bitext
    (awesome-align's objective, recipe self-align), pull it halfway back to the start, align with argmax."""
    from polyalign.align.bitext import bitext_from_options
    from polyalign.fit_aligner import FitSettings
    from polyalign.fit_aligner import fit_aligner as fit

    if steps is not None and steps < 1:
        raise DataError(f"--steps {steps}: give at least 1 (or leave it out for one pass over the bitext)")
    settings = FitSettings(steps=steps, src_lang=src_lang, tgt_lang=tgt_lang, layer=layer, progress=progress)
    fit(model, bitext_from_options(src, tgt, pairs), out, settings)
