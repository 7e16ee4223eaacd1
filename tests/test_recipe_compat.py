"""Objective configs are composed (a config holds the configs it needs; none has two config bases), and what users
wrote before still means the same: every built-in recipe, and a run folder's `recipe.yaml` saved by earlier code
(tests/old_runs/, flat `--set objectives.N.config.*` keys), load to the settings they loaded to then."""

import dataclasses
import inspect
import json
import shutil
from pathlib import Path

import pytest

import polyalign.objectives as objectives_package
from polyalign.config import RECIPES_DIR, load_recipe
from polyalign.io import DataError
from polyalign.objectives import OBJECTIVES, objective_config
from polyalign.schema import flat_values
from polyalign.train import load_run_recipe

OLD = Path(__file__).resolve().parent / "old_runs"
RECORDED = json.loads((OLD / "objective_configs.json").read_text(encoding="utf-8"))
"""Each recipe's objectives' settings as the code before composition loaded them (dataclasses.asdict)."""


def loaded_settings(recipe) -> list:
    """The recipe's objectives and their settings, as the keys a recipe writes (JSON's lists for tuples)."""
    rows = [
        [s.name, flat_values(objective_config(s.name, s.config, f"objectives.{i}")[1])]
        for i, s in enumerate(recipe.objectives)
    ]
    return json.loads(json.dumps(rows))


def test_every_built_in_recipe_is_recorded():
    assert {p.stem for p in RECIPES_DIR.glob("*.yaml")} <= set(RECORDED)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_recipe_loads_to_the_settings_it_loaded_to_before(name):
    assert loaded_settings(load_recipe(name)) == RECORDED[name]


@pytest.mark.parametrize("name", ["xlm-e", "xlm-align"])
def test_an_old_run_folder_resumes_with_its_settings(tmp_path, name):
    shutil.copy(OLD / f"{name}.yaml", tmp_path / "recipe.yaml")
    recipe = load_run_recipe(tmp_path)
    assert loaded_settings(recipe) == RECORDED[f"tests/old_runs/{name}.yaml"]


def test_set_paths_reach_the_held_configs_as_before():
    recipe = load_recipe("xlm-e", ["objectives.1.config.mask_prob=0.3", "objectives.1.config.swap_prob=0.1"])
    _, trtd = objective_config("trtd", recipe.objectives[1].config, "objectives.1")
    assert (trtd.masking.mask_prob, trtd.masking.swap_prob, trtd.masking.style) == (0.3, 0.1, "ppa")
    assert trtd.masking.replace_probs == (1.0, 0.0, 0.0)  # the holder's default, not TLM's own
    with pytest.raises(DataError, match=r"objectives.1.config.mask_rate: unknown key; known: mask_prob, replace_probs"):
        load_recipe("xlm-e", ["objectives.1.config.mask_rate=0.3"])
    with pytest.raises(DataError, match=r"objectives.1.config: tlm style='bert': use one of"):
        load_recipe("xlm-align", ["objectives.1.config.style=bert"])


def config_classes() -> list[type]:
    seen = {cls.Config for cls in OBJECTIVES.values()}
    for module in vars(objectives_package).values():
        if inspect.ismodule(module) and module.__name__.startswith("polyalign.objectives."):
            seen |= {c for _, c in inspect.getmembers(module, inspect.isclass) if dataclasses.is_dataclass(c)}
    return sorted(seen, key=lambda c: c.__qualname__)


@pytest.mark.parametrize("cls", config_classes(), ids=lambda c: c.__qualname__)
def test_no_objective_config_has_two_config_bases(cls):
    config_bases = [b for b in cls.__bases__ if dataclasses.is_dataclass(b)]
    assert len(config_bases) <= 1, f"{cls.__qualname__} inherits {config_bases}: hold one of them as a field"
