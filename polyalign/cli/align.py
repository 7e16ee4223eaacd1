"""`polyalign align`: word links for a user's bitext (two files or one `source ||| target` file), written as
Pharaoh lines, with awesome-align's optional probability and word-pair files beside them."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from polyalign.cli.options import (
    AlignEncoding,
    AlignmentMethod,
    AlignMethod,
    AlignPrecision,
    BatchTokens,
    Device,
    Layer,
    ModelFolder,
    Precision,
    Progress,
    TrustPickle,
    load_on_device,
)
from polyalign.io import DataError, atomic_text_file, where
from polyalign.tables import console

if TYPE_CHECKING:
    from polyalign.align.aligner import EncodedPair

MAX_NOTES = 20
"""Truncated pairs named one by one; any more are counted in one closing line."""

app = typer.Typer()


@app.command()
def align(
    model: ModelFolder,
    src: Annotated[
        Path | None,
        typer.Option(help="Source sentences, one per line, words separated by spaces (alone: `source ||| target`)."),
    ] = None,
    tgt: Annotated[Path | None, typer.Option(help="Target sentences, line-aligned with --src.")] = None,
    pairs: Annotated[
        Path | None,
        typer.Option(help="One file of `source ||| target` lines (fast_align's, eflomal's, awesome-align's format)."),
    ] = None,
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
    method: AlignMethod = AlignmentMethod.argmax,
    softmax_threshold: Annotated[
        float | None,
        typer.Option(
            help="`softmax` only: both probabilities must exceed this (default: awesome-align's 0.001; AccAlign "
            "uses 0.1)."
        ),
    ] = None,
    layer: Layer = None,
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
    """Word-align a bitext; writes Pharaoh links (`i-j`, 0-based, source first), one line per pair. The defaults
    are the recommended setting: argmax on separately encoded sentences at two thirds of the depth."""
    from polyalign.align.aligner import Aligner, check_layer, chunks, default_encoding
    from polyalign.align.bitext import bitext_from_options, check_bitext, read_bitext
    from polyalign.align.extract import SOFTMAX_THRESHOLD
    from polyalign.progress import tqdm

    softmax_threshold = SOFTMAX_THRESHOLD if softmax_threshold is None else softmax_threshold
    if not 0 <= softmax_threshold < 1:
        raise DataError(f"--softmax-threshold {softmax_threshold}: use a probability in [0, 1), e.g. 0.001")
    bitext = bitext_from_options(src, tgt, pairs)
    outputs = {"--out": out, "--output-prob": output_prob, "--output-words": output_words}
    check_new_files(outputs, bitext.paths())
    total = check_bitext(bitext)  # every input line, before the model loads and before anything is written
    encoding = encoding.value if encoding else default_encoding(method.value)
    loaded = load_on_device(model, device, trust_pickle)
    aligner = Aligner(
        loaded, encoding, batch_tokens=batch_tokens, precision=precision.value, softmax_threshold=softmax_threshold
    )
    layer = aligner.default_layer if layer is None else layer
    check_layer(layer, aligner.num_layers)
    languages = (src_lang, tgt_lang) if src_lang and tgt_lang else None
    console.print(f"align: {method.value}, layer {layer}, {encoding} encoding, {precision.value}", highlight=False)
    bar = tqdm(total=total, desc="align", unit="pair", dynamic_ncols=True, mininterval=1.0, disable=not progress)
    cut: list[tuple[int, EncodedPair]] = []
    scored = output_prob is not None  # link probabilities cost a softmax pass: only when asked for
    with ExitStack() as stack, bar:
        links_file = stack.enter_context(atomic_text_file(out)) if out else sys.stdout
        prob_file = stack.enter_context(atomic_text_file(output_prob)) if output_prob else None
        words_file = stack.enter_context(atomic_text_file(output_words)) if output_words else None
        for part in chunks(read_bitext(bitext), chunk):
            encoded = aligner.encode_words([(s, t) for _, s, t in part])
            found = aligner.align_encoded(encoded, [method.value], [layer], languages, with_probabilities=scored)
            found = found[(method.value, layer)] if scored else [(links, []) for links in found[(method.value, layer)]]
            write_pairs(part, found, links_file, prob_file, words_file)
            cut += [(line, p) for (line, _, _), p in zip(part, encoded, strict=True) if p.cut_source or p.cut_target]
            bar.update(len(part))
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


def write_pairs(part, found, links_file: IO[str], prob_file: IO[str] | None, words_file: IO[str] | None) -> None:
    """One line per pair in each file: Pharaoh links, their probabilities, the linked words; `found` holds
    (links, probabilities) per pair."""
    from polyalign.align.words import pharaoh

    links_file.write("".join(pharaoh(links) + "\n" for links, _ in found))
    links_file.flush()
    if prob_file is not None:
        prob_file.write("".join(" ".join(f"{p:.4g}" for p in probs) + "\n" for _, probs in found))
    if words_file is not None:
        for (_, s, t), (links, _) in zip(part, found, strict=True):
            words_file.write(" ".join(f"{s[i]}<sep>{t[j]}" for i, j in links) + "\n")


def report_cut_pairs(cut: list[tuple[int, EncodedPair]], path: Path, positions: int) -> None:
    """One line per pair whose words ran past the model's positions (those words have no links)."""
    for line, p in cut[:MAX_NOTES]:
        console.print(
            f"[yellow]note: {where(path, line)}: past the model's {positions} positions, {p.cut_source} of "
            f"{p.num_source} source and {p.cut_target} of {p.num_target} target words are unaligned[/yellow]",
            highlight=False,
            soft_wrap=True,  # one line per pair, whatever the terminal's width
        )
    if len(cut) > MAX_NOTES:
        console.print(f"[yellow]note: and {len(cut) - MAX_NOTES} more pairs past the positions[/yellow]")
