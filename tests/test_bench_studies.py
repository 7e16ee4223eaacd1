"""Studies as data (bench/study.py, bench/studies/) and the runners' pure parts (bench/run.py, bench/sections.py): every
arm loads, sections stay within their limits, dry runs print and keep, notes name their commit and comparison."""

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest

from bench import page
from bench.arm import Budget, fill, key_text
from bench.run import Options, run_steps, steps_of
from bench.sections import SectionRun, budget_overrides, run_dir, run_section, train
from bench.studies import STUDIES
from bench.studies import evidence as E
from bench.study import TRAIN, Section, Setup
from polyalign.config import load_recipe
from tests.bench_sections import ALL, STUDY

ROOT = Path(__file__).resolve().parents[1]


def context(name: str, tmp_path: Path, dry_run: bool = True, study=STUDY) -> SectionRun:
    return SectionRun(
        study.sections()[name], tmp_path / "prepared", tmp_path / "runs", tmp_path / "eval", "py", dry_run
    )


@pytest.mark.parametrize("c", ALL, ids=lambda c: c.id)
def test_every_arm_of_every_comparison_loads_with_its_overrides(c, tmp_path):
    # every recipe resolves and every --set key exists in the recipe schema (load_recipe raises otherwise)
    ctx = context(c.section, tmp_path, study=next(s for s in STUDIES.values() if c in s.comparisons))
    for arm in (a for a in c.arms if a.trained):
        steps = c.setup.budget.estimated_steps(arm)
        recipe = load_recipe(arm.recipe, [*budget_overrides(ctx, steps), *(fill(o, steps) for o in arm.overrides)])
        if c.setup.budget.minutes:  # the trainer's clock, or (max_minutes 0) a step budget of the arm's own
            assert recipe.trainer.max_minutes in (c.setup.budget.minutes, 0.0)
        else:  # an arm at learning rate 0 trains nothing: it saves the start with the recipe's new modules
            assert recipe.trainer.max_steps == steps or recipe.trainer.lr == 0
        if c.setup.budget.max_flops:
            assert recipe.trainer.max_flops == c.setup.budget.max_flops
        for check in c.why.checks:  # a logged check names an objective the arm trains
            if check.arm == arm.name and check.key.startswith("log:"):
                assert check.key.removeprefix("log:").split("/")[0] in {o.name for o in recipe.objectives}, check
        assert (arm.init_from is None) == (c.setup.start is None)


def test_a_misspelt_override_does_not_load():
    arm = dataclasses.replace(E.PPA, overrides=("objectives.0.config.queue_sise=4096",))
    with pytest.raises(Exception, match="queue_sise"):
        load_recipe(arm.recipe, list(arm.overrides))


@pytest.mark.parametrize("study", STUDIES.values(), ids=lambda s: s.name)
def test_every_section_is_one_ab_within_its_cpu_limit(study):
    minutes, done = study.estimates(), set()
    for name, section in study.sections().items():  # in order: what an earlier section did is not counted again
        assert section.problems(done, study.limit_minutes) == [], name
        assert 0 < minutes[name] <= study.limit_minutes
        done |= section.work()


def test_a_section_over_the_limit_or_with_two_setups_or_presets_is_refused():
    ppa = STUDY.sections()["ppa"]
    assert ppa.problems() == []
    longer = Section("ppa", [dataclasses.replace(c, setup=Setup(Budget(steps=900))) for c in ppa.comparisons])
    assert any("CPU-minutes" in p for p in longer.problems())
    a, b = ppa.comparisons[:2]
    assert any(
        "another budget" in p
        for p in Section("ppa", [a, dataclasses.replace(b, setup=Setup(Budget(steps=61)))]).problems()
    )
    first = STUDY.sections()["xlm-e-1"].comparisons[0]
    other = dataclasses.replace(first, baseline=dataclasses.replace(first.baseline, preset=None))
    assert any("preset" in p for p in Section("xlm-e-1", [other]).problems())


def test_budgets_take_exactly_one_amount():
    assert Budget(steps=10).label() == "10 steps" and Budget(minutes=4).label() == "4 training minutes"
    with pytest.raises(ValueError):
        Budget(steps=10, minutes=4)
    with pytest.raises(ValueError):
        Budget()


def test_sections_share_the_runs_of_the_same_arm_and_nothing_else(tmp_path):
    ppa, no_tlm, xnli = (context(n, tmp_path) for n in ("ppa", "ppa-no-tlm", "ppa-xnli"))
    assert run_dir(ppa, E.PPA, 0) == run_dir(no_tlm, E.PPA, 0) == run_dir(xnli, E.PPA, 0)
    assert run_dir(ppa, E.PPA, 0) != run_dir(ppa, E.PPA, 1)
    assert run_dir(no_tlm, E.PPA_NO_TLM, 0) != run_dir(no_tlm, E.PPA, 0)
    other = dataclasses.replace(E.PPA, overrides=(*E.PPA.overrides, "objectives.0.config.temperature=0.1"))
    assert run_dir(ppa, other, 0) != run_dir(ppa, E.PPA, 0)
    longer = Section("ppa", [dataclasses.replace(c, setup=Setup(Budget(steps=300))) for c in ppa.section.comparisons])
    fewer = Section(
        "ppa",
        [dataclasses.replace(c, setup=Setup(c.setup.budget, languages=("en", "de"))) for c in ppa.section.comparisons],
    )
    assert run_dir(dataclasses.replace(ppa, section=longer), E.PPA, 0) != run_dir(ppa, E.PPA, 0)
    assert run_dir(dataclasses.replace(ppa, section=fewer), E.PPA, 0) != run_dir(ppa, E.PPA, 0)
    assert run_dir(dataclasses.replace(ppa, data=tmp_path / "other"), E.PPA, 0) != run_dir(ppa, E.PPA, 0)
    start = ppa.section.arms[0]  # the start model's measures depend on the languages, not on the budget
    assert run_dir(ppa, start, 0) == run_dir(dataclasses.replace(ppa, section=longer), start, 0)
    assert run_dir(ppa, start, 0) != run_dir(dataclasses.replace(ppa, section=fewer), start, 0)


def declared_run_folders() -> dict[str, str]:
    """The folder name of every arm's seed-0 run in every section of every study, at the section's data."""
    out = {}
    for name, study in STUDIES.items():
        for section_name, section in study.sections().items():
            ctx = SectionRun(
                section, Path(section.setup.data or "bench/work/prepared-all24"), Path("runs"), Path("e"), "py"
            )
            for arm in (a for top in section.arms for a in top.lineage):
                out[f"{name}/{section_name}/{arm.name}"] = run_dir(ctx, arm, 0).name
    return out


def test_every_declared_arm_keeps_the_run_folder_its_saved_runs_live_in():
    # bench/work/STUDY/runs holds hours of CPU under these names: a refactor of the keys must not rename them (an arm
    # whose training changes gets a new folder by design; update tests/bench_run_keys.json with it)
    saved = json.loads((ROOT / "tests" / "bench_run_keys.json").read_text())
    now = declared_run_folders()
    assert {k: now.get(k) for k in saved if now.get(k) != saved[k]} == {}


def test_a_run_key_is_the_literal_of_its_tuple_with_the_budget_as_it_always_read():
    key = ("xlm", ("a=1",), None, None, Budget(steps=250), ("en",), (("start", "m", None),))
    assert key_text(key) == repr(key).replace(repr(Budget(steps=250)), "Budget(steps=250, max_flops=None)")
    assert key_text(Budget(minutes=4.0)) == "Budget(steps=None, max_flops=None, minutes=4.0)"
    with pytest.raises(TypeError, match="run key"):
        key_text((object(),))


def test_a_section_trains_only_the_arms_no_earlier_section_trained(tmp_path, capsys):
    ctx = context("ppa-no-tlm", tmp_path)
    done = run_dir(ctx, E.PPA, 0) / "done"  # the full system's seed 0, as section `ppa` leaves it
    done.parent.mkdir(parents=True)
    done.write_text("250\n")
    run_section(ctx, "evidence")
    lines = [line for line in capsys.readouterr().out.splitlines() if " pretrain " in line]
    assert len(lines) == 1 and "objectives.0.config.tlm=false" in lines[0]
    assert f"--init-from {E.SMALL_BASE}" in lines[0] and "trainer.seed=0" in lines[0]
    assert STUDY.estimates()["ppa-no-tlm"] < STUDY.sections()["ppa-no-tlm"].estimated_minutes() / 2


def test_an_arm_that_continues_another_starts_from_its_run_of_the_same_seed_trained_first(tmp_path, capsys):
    first = dataclasses.replace(E.PPA, name="first")
    then = dataclasses.replace(E.MLM_TLM, name="then", continues=first)
    c = dataclasses.replace(STUDY.comparison("ppa-vs-start"), id="toy", baseline=E.MLM_TLM, method=then)
    ctx = context("ppa", tmp_path)
    ctx = dataclasses.replace(ctx, section=Section("toy", [c]))
    train(ctx, then, 1)
    lines = [line for line in capsys.readouterr().out.splitlines() if " pretrain " in line]
    assert [x.split(" --run-dir ")[1].split()[0] for x in lines] == [str(run_dir(ctx, a, 1)) for a in (first, then)]
    assert f"--init-from {run_dir(ctx, first, 1)} " in lines[1]
    other = dataclasses.replace(then, continues=dataclasses.replace(first, overrides=("trainer.lr=1e-3",)))
    assert run_dir(ctx, other, 1) != run_dir(ctx, then, 1)  # the run hash follows what it continues
    assert (ctx.section.training_key(first), TRAIN) in ctx.section.work()
    alone = Section("toy", [dataclasses.replace(c, method=dataclasses.replace(then, continues=None))])
    assert ctx.section.estimated_minutes() > alone.estimated_minutes()  # the continued run's training counts


def test_the_start_model_is_measured_with_every_measure_of_the_trained_arms_but_translation():
    xlm_align, veco = STUDY.sections()["xlm-align"], STUDY.sections()["veco"]
    assert xlm_align.arms[0].name == "start" and not xlm_align.arms[0].trained
    assert {"aer-ot", "aer-argmax", "aer-itermax", "retrieval"} <= set(xlm_align.measures_of(xlm_align.arms[0]))
    assert veco.setup.start is None and "mt-veco" in veco.measures_of(next(a for a in veco.arms if a.name == "veco"))


def test_every_code_check_names_a_test_that_exists():
    for c in ALL:
        for node in c.why.code:
            path, name = node.split("::")
            assert f"def {name}(" in (ROOT / path).read_text(), node


@pytest.mark.parametrize("study", STUDIES.values(), ids=lambda s: s.name)
def test_every_note_names_a_commit_and_a_comparison(study):
    # a study's notes file is read, never skipped: a study without one fails here instead of passing unchecked
    notes = json.loads((page.NOTES / f"{study.name}.json").read_text())
    assert notes, f"{study.name}: no note at all"
    named = {c.id for c in study.comparisons}
    for key, value in notes.items():
        assert key == "_page" or key in named, f"{study.name}: note {key!r} names no comparison or step of the study"
        assert set(value) == {"commit", "note"} and value["note"], key
        assert re.fullmatch(r"[0-9a-f]{7,40}", value["commit"]), f"{key}: {value['commit']!r} is no commit hash"


def test_a_dry_run_leaves_an_unfinished_run_as_it_is(tmp_path, capsys):
    # a dry run prints the commands of a fresh run, possibly while that run trains: it must not clear its folder
    ctx = context("ernie-m", tmp_path)
    arm = next(a for a in ctx.section.arms if a.trained)
    training = run_dir(ctx, arm, 0)
    (training / "checkpoints").mkdir(parents=True)
    train(ctx, arm, 0)
    assert (training / "checkpoints").is_dir() and "pretrain" in capsys.readouterr().out
    with pytest.raises(subprocess.CalledProcessError):  # a real run does start the unfinished one afresh
        train(dataclasses.replace(ctx, dry_run=False, python="false"), arm, 0)
    assert not training.exists()


def test_max_seeds_one_leaves_close_comparisons_to_one_seed(tmp_path, monkeypatch):
    calls = []

    def fake_seed(ctx, arm, seed):
        calls.append((arm.name, seed))
        return {"tatoeba14@last": 10.0}  # every arm equal: a difference under `close`, which asks for seed 1

    monkeypatch.setattr("bench.sections.run_seed", fake_seed)
    run_section(context("ppa", tmp_path), "evidence", max_seeds=1)
    assert calls and {seed for _, seed in calls} == {0}
    run_section(context("ppa", tmp_path), "evidence")
    assert {seed for _, seed in calls} == {0, 1}


def test_a_comparison_studys_steps_are_its_sections_run_by_the_one_runner(tmp_path, capsys):
    assert list(steps_of(STUDY, Options())) == list(STUDY.sections())
    with pytest.raises(SystemExit, match="nope: steps of evidence are ppa, "):
        run_steps(STUDY, ["nope"], Options(root=tmp_path))
    run_steps(STUDY, ["ppa"], Options(dry_run=True, work=tmp_path, root=tmp_path))
    printed = capsys.readouterr().out
    assert (
        "section ppa: about" in printed
        and f" pretrain ppa --data bench/work/prepared-all24 --run-dir {tmp_path}" in printed
    )
    assert not (tmp_path / "bench" / "results").exists()  # a dry run writes nothing
