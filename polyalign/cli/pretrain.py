"""`polyalign pretrain`: pre-train an encoder with the objectives a recipe names (polyalign/train)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from polyalign.cli.options import Progress, Sets
from polyalign.io import DataError
from polyalign.outputs import check_output
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
    inputs = {"data.prepared": spec.data.prepared, "init_from": spec.init_from}
    check_output(run_dir, inputs, "--run-dir")  # the run folder's lock is the run's own (train/guard.py)
    for note in batch_notes(spec):
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    summary = run_pretrain(spec, run_dir, resume=resume, progress=progress)
    if this_process()[0] != 0:  # rank 0 speaks for the run
        return
    console.print(
        f"done: {summary['new_steps']} steps in {summary['command_seconds'] / 60:.1f} min (the run: {summary['step']} "
        f"steps, {summary['tokens']:,} tokens, {summary['seconds'] / 60:.1f} training min) -> {run_dir}"
    )


def batch_notes(recipe) -> list[str]:
    """A note for each stream whose one batch holds more tokens than its whole corpus: every batch then repeats the
    corpus (a small corpus with a recipe made for a large one)."""
    from polyalign.data.prepared import PreparedData
    from polyalign.objectives import OBJECTIVES

    if recipe.data.prepared is None:
        return []
    meta = PreparedData(recipe.data.prepared).meta
    wanted = recipe.data.languages
    tokens = {
        "mono": sum(s["tokens"] for lang, s in meta["mono"].items() if wanted is None or lang in wanted),
        "parallel": sum(
            sum(s["tokens"])
            for s in meta["parallel"].values()
            if wanted is None or (s["src"] in wanted and s["tgt"] in wanted)
        ),
    }
    notes = {}
    for spec in recipe.objectives:
        kind = OBJECTIVES[spec.name].stream
        budget = getattr(recipe.data.for_objective(spec), kind).max_tokens
        if 0 < tokens[kind] < budget:
            key = f"data.{kind}.max_tokens" if not spec.stream else f"objectives.{spec.name}.stream.max_tokens"
            notes[key] = (
                f"{key}={budget:,} is more than the whole {kind} corpus ({tokens[kind]:,} tokens in "
                f"{recipe.data.prepared}): every batch repeats the corpus; a smaller {key} gives distinct batches"
            )
    return list(notes.values())
