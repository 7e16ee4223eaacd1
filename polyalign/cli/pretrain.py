"""`polyalign pretrain`: pre-train an encoder with the objectives a recipe names (polyalign/train)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from polyalign.cli.options import Progress, Sets
from polyalign.io import DataError
from polyalign.tables import console

app = typer.Typer()


@app.command()
def pretrain(
    run_dir: Annotated[Path, typer.Option(help="Run folder: recipe, metrics, TensorBoard logs, checkpoints.")],
    recipe: Annotated[
        str | None, typer.Argument(help="Built-in recipe name (mlm, xlm, quickstart, ...) or a YAML path.")
    ] = None,
    data: Annotated[Path | None, typer.Option(help="Prepared data folder (sets data.prepared).")] = None,
    init_from: Annotated[
        Path | None, typer.Option(help="Continue from this model folder (polyalign or Hugging Face).")
    ] = None,
    set_: Sets = None,
    preset: Annotated[
        str | None,
        typer.Option(help="Model size, batch and lr settings from polyalign/recipes/presets/NAME.yaml (--set wins)."),
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in --run-dir from its latest checkpoint.")] = False,
    progress: Progress = True,
) -> None:
    """Pre-train an encoder with the objectives a recipe names. Works under torchrun (DDP)."""
    from polyalign.config import load_recipe
    from polyalign.train import load_run_recipe
    from polyalign.train import pretrain as run_pretrain
    from polyalign.train.distributed import this_process

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
    if this_process()[0] != 0:  # rank 0 speaks for the run
        return
    console.print(
        f"done: {summary['new_steps']} steps in {summary['command_seconds'] / 60:.1f} min (the run: {summary['step']} "
        f"steps, {summary['tokens']:,} tokens, {summary['seconds'] / 60:.1f} training min) -> {run_dir}"
    )
