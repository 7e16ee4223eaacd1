"""`polyalign quickstart`: the main job on the bundled sample, start to finish (polyalign/quickstart.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from polyalign.cli.options import Progress

app = typer.Typer()


@app.command()
def quickstart(
    out: Annotated[Path, typer.Option(help="Folder for the prepared sample, the run and the report.")],
    steps: Annotated[int, typer.Option(help="Training steps.")] = 600,
    progress: Progress = True,
) -> None:
    """The main job on the bundled sample: prepare, train a tiny model with translation ranking + TLM, and show
    retrieval on held-out pairs and word-alignment AER before and after training."""
    from polyalign.quickstart import run_quickstart

    run_quickstart(out, steps, progress)
