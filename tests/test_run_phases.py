"""The run is plain data: the head warm-up is a Phase the loop is given (which parameters train, its settings,
counted or not), not a Run inside the Run, and the module a run builds keeps its objectives: none joins or leaves
it after `build_run`, through the warm-up and the run's own steps."""

import dataclasses
import typing

import pytest

from polyalign.config import load_recipe
from polyalign.train import loop, pretrain
from polyalign.train.run import Phase, Run
from tests.test_head_warmup import _overrides, cold_start  # noqa: F401 (a fixture)


@pytest.mark.parametrize("cls", [Run, Phase])
def test_no_run_holds_a_run(cls):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        assert Run not in (hints[f.name], *typing.get_args(hints[f.name])), f"{cls.__name__}.{f.name} is a Run"


@pytest.mark.integration
def test_no_objective_joins_or_leaves_the_module_after_build_run(sample_prepared, cold_start, tmp_path, monkeypatch):  # noqa: F811
    built, seen = [], []
    build_run, train_step = loop.build_run, loop.train_step

    def recorded_build(*args, **kwargs):
        run, prepared = build_run(*args, **kwargs)
        built.append(list(run.module.objectives))
        return run, prepared

    def recorded_step(phase, item):
        train_step(phase, item)
        seen.append((phase.counted, list(phase.module.objectives)))

    monkeypatch.setattr(loop, "build_run", recorded_build)
    monkeypatch.setattr(loop, "train_step", recorded_step)
    pretrain(load_recipe("mlm", _overrides(sample_prepared, cold_start, 2, 3)), tmp_path / "run", progress=False)
    (objectives,) = built
    assert [counted for counted, _ in seen] == [False] * 3 + [True] * 2  # the warm-up's steps, then the run's
    assert all(names == objectives for _, names in seen), (objectives, seen)
