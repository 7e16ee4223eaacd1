"""The selection harness (bench/selection.py, bench/selection_steps.py) that the GPU aligner runs: the dev-half rule
with the test halves apart, the layer rule, the offered extraction, interpolations and the arms' training commands,
on a tiny selection declared here."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from bench import selection as S
from bench import selection_steps as H
from bench.step import Context
from bench.study import Candidate, Derived, Protocol, Selection
from polyalign.config import load_recipe

GOLD = ("de-en", "en-fr")
START = "models/start"
SELECTION = Selection(
    START, "data/prepared", "runs", "gold", GOLD, Protocol(8, "separate", "argmax"),
    (Candidate("softmax-labels", "self-align", ("objectives.0.config.labels=softmax",), init_from=START),
     Candidate("softmax-rule-layer", "self-align", (), init_from=START, rule_layer=True)),
    steps=3000, save_every=500, rule_layers=tuple(range(4, 11)),
)  # fmt: skip


def run_of(tmp_path, results: dict, selection: Selection = SELECTION) -> H.Run:
    """A selection's run over `results` in `tmp_path`, its context without a deadline."""
    ctx = Context("selection", tmp_path, tmp_path / "logs", time.time() + 1e9, False)
    return H.Run(selection, tmp_path / "result.json", ctx, "the test", root=tmp_path, results=results)


def scores(full, dev, test, key="separate/argmax", layer="8") -> dict:
    """A checkpoint's scores as the runner saves them: the whole gold sets, their dev and their test halves."""
    cell = lambda values: {layer: dict(zip(GOLD, values, strict=True))}  # noqa: E731
    return {key: cell(full), f"{key}/dev": cell(dev), f"{key}/test": cell(test)}


def saved() -> dict:
    """The start, an arm with two checkpoints, an interpolation of it, and a declared arm that has not run."""
    start = scores([20.0, 10.0], [20.0, 10.0], [20.0, 10.0])
    start |= scores([25.0, 15.0], [25.0, 15.0], [25.0, 15.0], key="separate/ot")
    arm = {
        "note": "A",
        "sets": ["objectives.0.config.labels=softmax"],
        "minutes": 10.0,
        "minutes_at": {"500": 5.0, "1000": 10.0},
        "checkpoints": {
            "500": scores([18.0, 9.0], [19.0, 9.0], [30.0, 30.0]),  # below the start on both dev halves: mean 14
            "1000": scores([17.0, 11.0], [15.0, 11.0], [10.0, 5.0]),  # lower mean (13), above on en-fr; best test
        },
    }
    arm["checkpoints"]["1000"] |= scores([22.0, 12.0], [22.0, 12.0], [22.0, 12.0], key="separate/ot")
    tuned = S.checkpoint_folder(SELECTION, "softmax-labels", 1000)
    wise = S.derived_record(
        Derived(0.5), "softmax-labels", "1000", START, tuned, "runs/w",
        scores([19.5, 9.5], [19.5, 9.9], [19.0, 9.0]), 5.0,
    )  # fmt: skip
    return {"commit": "abc1234", "date": "2026-01-01 00:00 UTC", "start": {"scores": start},
            "arms": {"softmax-labels": arm, "softmax-labels-wise-0.5": wise}}  # fmt: skip


def test_halves_split_even_and_odd_sentences():
    assert S.halves(5) == {"all": [0, 1, 2, 3, 4], "dev": [0, 2, 4], "test": [1, 3]}


def test_the_rule_decides_on_the_dev_halves_and_never_reads_the_test_halves():
    results = saved()
    # below the start on every dev half beats a lower mean that is worse on one; the interpolation's mean (14.7) loses
    assert S.chosen_at(SELECTION, results) == ("softmax-labels", "500", "8")
    assert S.chosen_at(SELECTION, results, trained_only=True) == ("softmax-labels", "500", "8")
    # WiSE-FT's base is the lowest mean among trained checkpoints, above the start on en-fr or not
    assert S.derivation_base(SELECTION, results) == ("softmax-labels", "1000")
    results["arms"]["softmax-labels"]["checkpoints"]["500"]["separate/argmax/test"]["8"] = {"de-en": 0.0, "en-fr": 0.0}
    assert S.chosen_at(SELECTION, results) == ("softmax-labels", "500", "8")  # the test halves moved, not the choice
    assert S.chosen_at(SELECTION, results, below_start_everywhere=False) == ("softmax-labels", "1000", "8")


def test_without_a_candidate_below_the_start_everywhere_the_lowest_mean_is_chosen():
    dev = {("a", "1"): {"de-en": 30.0, "en-fr": 1.0}, ("b", "1"): {"de-en": 21.0, "en-fr": 11.0}}  # means 15.5, 16
    assert S.choose(dev, {"de-en": 20.0, "en-fr": 10.0}, GOLD) == ("a", "1")
    assert S.choose({}, {"de-en": 20.0}, GOLD) is None


def test_a_candidate_missing_a_gold_set_or_checkpoints_is_no_candidate():
    results = saved()
    results["arms"]["not-run"] = {"note": "declared, never trained"}
    del results["arms"]["softmax-labels"]["checkpoints"]["500"]["separate/argmax/dev"]["8"]["en-fr"]
    assert set(S.candidates(SELECTION, results, S.DEV)) == {
        ("softmax-labels", "1000"),
        ("softmax-labels-wise-0.5", "1000"),
    }


def test_a_derived_arm_records_what_it_is_made_from_and_its_base_minutes():
    interpolation = Derived(0.25)
    record = S.derived_record(interpolation, "arm", "1000", "start", "runs/arm/c", "runs/w", {"k": 1}, 8.2)
    assert record["interpolated"] == {"start": "start", "tuned": "runs/arm/c", "weight": 0.25}
    assert record["checkpoints"] == {"1000": {"k": 1}} and record["minutes"] == 8.2 and record["model"] == "runs/w"
    assert record["note"] == "0.75 x the start + 0.25 x arm at step 1000 (WiSE-FT)" and S.is_derived(record)
    assert interpolation.name_for("arm") == "arm-wise-0.25"
    assert S.derive_command(interpolation, "start", "runs/arm/c", "runs/w") == [
        "interpolate", "--start", "start", "--tuned", "runs/arm/c", "--weight", "0.25", "--out", "runs/w",
    ]  # fmt: skip


def test_derive_makes_only_what_no_arm_was_made_from(tmp_path, monkeypatch):
    made = []
    monkeypatch.setattr(H.Run, "sh", lambda run, *args, name="": made.append(args) or 0.0)
    selection = replace(SELECTION, derived=(Derived(0.5), Derived(0.75)))
    run = run_of(tmp_path, saved(), selection)
    H.derive(run)
    # the base is softmax-labels at 1000 (lowest dev mean), whose 0.5 interpolation is saved (under another name)
    assert len(made) == 1 and "0.75" in made[0] and "runs/softmax-labels-wise-0.75" in made[0]
    assert run.results["arms"]["softmax-labels-wise-0.75"]["base"] == "softmax-labels"  # recorded: not made again
    H.derive(run)
    assert len(made) == 1


def test_an_unknown_arm_is_refused_with_the_selections_arms(tmp_path):
    run = run_of(tmp_path, saved())
    run.only = ["nope"]
    with pytest.raises(SystemExit, match="softmax-labels, softmax-rule-layer"):
        H.arms(run)


def test_an_arm_trains_on_the_selections_schedule_from_its_start_resumed_when_its_run_exists(tmp_path):
    run, arm = run_of(tmp_path, saved()), SELECTION.arms[0]
    args = H.train_args(run, arm, tmp_path / "runs" / arm.name)
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert args[:2] == ["pretrain", "self-align"] and f"{tmp_path}/{START}" in args and "--resume" not in args
    assert sets == ["trainer.max_steps=3000", "trainer.save_every=500", "trainer.keep_checkpoints=0", *arm.overrides]
    (tmp_path / "runs" / arm.name / "checkpoints").mkdir(parents=True)
    assert H.train_args(run, arm, tmp_path / "runs" / arm.name)[-1] == "--resume"


# ---------------------------------------------------------------------------------------------------------
# The selection rule: the layer rule, the offered model at either layer, the offered extraction


def layered() -> dict:
    """The start at layers 7 and 8 (its layer sweep on the dev halves: 7 is the lowest mean), and candidates there."""
    results = saved()
    start = results["start"]["scores"]
    for key, values in scores([18.0, 9.0], [18.0, 9.0], [18.0, 9.0], layer="7").items():
        start[key] |= values
    results["start_layers_dev"] = {"6": {"de-en": 19.0, "en-fr": 9.5}, "7": {"de-en": 18.0, "en-fr": 9.0},
                                   "8": {"de-en": 20.1, "en-fr": 10.1}, "12": {"de-en": 1.0, "en-fr": 1.0}}  # fmt: skip
    # at layer 7: the lowest mean (13.75), below the start at 8 on both dev halves but above the start at 7 on de-en
    record = {"note": "R", "sets": [], "minutes": 9.0, "layers": [7, 8], "checkpoints": {"500": {}}}
    for layer, dev in (("7", [19.0, 8.5]), ("8", [21.0, 9.0])):
        for key, values in scores(dev, dev, [1.0, 1.0], layer=layer).items():
            record["checkpoints"]["500"].setdefault(key, {}).update(values)
    results["arms"]["rule-arm"] = record
    return results


def test_the_layer_rule_takes_the_starts_lowest_mean_dev_layer_among_its_own():
    results = layered()
    assert S.rule_layer(SELECTION, results) == "7"  # layer 12's lower mean is outside the rule's layers (4 to 10)
    assert S.candidate_layers(SELECTION, results) == ["8", "7"]
    assert S.rule_layer(replace(SELECTION, rule_layers=()), results) is None
    results["start_layers_dev"]["6"] = {"de-en": 17.0, "en-fr": 9.0}
    assert S.rule_layer(SELECTION, results) == "6"


def test_a_candidate_at_the_rule_layer_is_held_against_the_start_at_that_layer():
    results = layered()
    # rule-arm at 7 (mean 13.75) is below the start at 8 everywhere but not the start at 7 (19 > 18 on de-en): the
    # checkpoint at 500 of softmax-labels (below the start at 8 on both dev halves, mean 14) is chosen
    assert S.chosen_at(SELECTION, results) == ("softmax-labels", "500", "8")
    record = results["arms"]["rule-arm"]["checkpoints"]["500"]
    record["separate/argmax/dev"]["7"] = {"de-en": 17.5, "en-fr": 8.5}  # now below the start at 7 on both
    assert S.chosen_at(SELECTION, results) == ("rule-arm", "500", "7")
    record["separate/argmax/dev"]["7"] = {"de-en": 10.0, "en-fr": 9.5}  # lowest mean, above the start at 7 on en-fr
    assert S.chosen_at(SELECTION, results) == ("softmax-labels", "500", "8")


def test_the_offered_extraction_is_the_lowest_mean_on_the_dev_halves_of_the_offered_model_and_layer():
    results = layered()
    checkpoint = results["arms"]["softmax-labels"]["checkpoints"]["500"]
    checkpoint |= scores([30.0, 30.0], [18.0, 8.0], [1.0, 1.0], key="separate/softmax-0.1")  # dev lowest, all not
    checkpoint |= scores([1.0, 1.0], [19.5, 9.0], [1.0, 1.0], key="separate/itermax")  # all lowest, dev not
    checkpoint |= scores([1.0, 1.0], [1.0, 1.0], [1.0, 1.0], key="pair/ot")  # another encoding
    checkpoint |= scores([1.0, 1.0], [1.0, 1.0], [1.0, 1.0], key="separate/ot", layer="7")  # another layer
    pick = S.chosen_at(SELECTION, results)
    assert pick == ("softmax-labels", "500", "8") and S.chosen_method(SELECTION, results, pick) == "softmax-0.1"
    del checkpoint["separate/softmax-0.1/dev"]["8"]["en-fr"]  # not measured on every dev half: no candidate
    assert S.chosen_method(SELECTION, results, pick) == "argmax"
    checkpoint["separate/itermax/dev"]["8"] = {"de-en": 1.0, "en-fr": 1.0}
    assert S.chosen_method(replace(SELECTION, rule_layers=()), results, pick) == "argmax"  # no rule: the protocol's
    assert S.extraction("softmax-0.1") == ("softmax", 0.1) and S.extraction("softmax") == ("softmax", None)


def test_a_rule_layer_arm_trains_at_the_rules_layer_once_the_start_is_measured_there(tmp_path):
    plain, rule = SELECTION.arms
    run = run_of(tmp_path, layered())
    assert "objectives.0.config.layer=7" in H.train_args(run, rule, tmp_path / "r")
    assert not any("config.layer" in a for a in H.train_args(run, plain, tmp_path / "p"))
    with pytest.raises(SystemExit, match="layer rule's layer is not measured yet"):
        H.train_args(run_of(tmp_path, saved()), rule, tmp_path / "r")


def test_the_gpu_aligners_arms_load_with_their_overrides_at_the_rules_layer(tmp_path):
    from bench.perf.gpu.aligner import FULL, Inputs, selection

    inputs = Inputs(tmp_path / "start", tmp_path / "prepared", tmp_path / "gold", ("de-en",), 487_053, {})
    declared = selection(FULL, inputs, tmp_path)
    run = run_of(tmp_path, layered(), declared)
    for arm in declared.arms:
        args = H.train_args(run, arm, tmp_path / arm.name)
        recipe = load_recipe(arm.recipe, [args[i + 1] for i, a in enumerate(args) if a == "--set"])
        assert recipe.trainer.max_steps == declared.steps and recipe.objectives[0].config["layer"] == 7
