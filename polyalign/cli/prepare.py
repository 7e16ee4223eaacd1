"""`polyalign prepare`: train or load a tokenizer and tokenize a corpus into memory-mapped shards."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from polyalign.cli.options import BadLines, Overwrite, Progress, check_new_folder, comma_list
from polyalign.outputs import hold_output
from polyalign.tables import console, print_prepared

app = typer.Typer()


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

    inputs = {"--mono": mono, "--parallel": parallel, "--tokenizer-from": tokenizer_from, "--exclude": exclude}
    with hold_output(out, "polyalign prepare", inputs, replaces=overwrite):
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
    if tokenizer_from is None and meta["vocab_size"] < vocab_size:  # SentencePiece takes what the corpus supports
        console.print(
            f"note: the vocabulary has {meta['vocab_size']:,} pieces, not the {vocab_size:,} of --vocab-size: the "
            "corpus supports no more",
            highlight=False,
            soft_wrap=True,
        )
