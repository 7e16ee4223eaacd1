"""The contract every registered objective keeps with the trainer: through the trainer's own build (recipe ->
model, objective, streams, batches), one step on a tiny model (hidden 32, 2 layers) gives a finite loss whose
gradients reach the encoder, and exactly the parameters it declares unused (`leaves_parameters_unused`) get
none."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from polyalign.config import RECIPES_DIR, Recipe, load_recipe
from polyalign.objectives import OBJECTIVES
from polyalign.train import build_run, start_loader
from tests.conftest import tiny_recipe_overrides


def tiny_recipe_of(name: str, prepared) -> Recipe:
    """The first built-in recipe that trains `name` (its model settings, e.g. VECO's cross-attention, and the
    objective's config), made tiny and reduced to that objective alone, active from step 0, from scratch."""
    overrides = [*tiny_recipe_overrides(prepared), "trainer.loader_workers=0"]
    recipes = (load_recipe(path.stem, overrides) for path in sorted(RECIPES_DIR.glob("*.yaml")))
    recipe = next(r for r in recipes if name in [o.name for o in r.objectives])
    (spec,) = [o for o in recipe.objectives if o.name == name]
    if "allow_cold_start" in {f.name for f in dataclasses.fields(OBJECTIVES[name].Config)}:
        spec.config["allow_cold_start"] = True  # DWA: a random start is enough to check the plumbing
    recipe.objectives = [dataclasses.replace(spec, start_step=0, every=1, offset=0)]
    recipe.trainer.train_only = []  # VECO holds all but the cross-attention of a pretrained start at first
    return recipe


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_one_step_gives_a_finite_loss_and_gradients_reach_the_encoder(name, sample_prepared, tmp_path):
    torch.manual_seed(0)
    recipe = tiny_recipe_of(name, sample_prepared)
    recipe.data.pack = OBJECTIVES[name].reads_packed_rows  # packed rows wherever the objective reads them
    run, _ = build_run(recipe, tmp_path / "run")
    loader = start_loader(run)
    item = next(loader)
    loader.close()
    assert ("example_ids" in item.slots[0][name]) == OBJECTIVES[name].reads_packed_rows
    loss, _, _ = run.trained(item.slots[0])
    loss.backward()
    assert math.isfinite(float(loss.detach()))
    without_gradient = [n for n, p in run.module.named_parameters() if p.requires_grad and p.grad is None]
    declared = [f"model.{part}." for part in OBJECTIVES[name].leaves_parameters_unused]
    # what the trainer is told (DDP's unused-parameter search) is what happens
    assert {d for d in declared if any(n.startswith(d) for n in without_gradient)} == set(declared)
    assert [n for n in without_gradient if not n.startswith(tuple(declared))] == []
    encoder = run.module.model.encoder
    for part in (encoder.embeddings.word, encoder.layers[0], encoder.layers[-1]):
        grads = [p.grad for p in part.parameters() if p.grad is not None]
        assert grads and sum(float(g.abs().sum()) for g in grads) > 0, f"{name}: no gradient in {part}"
