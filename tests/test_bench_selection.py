"""A selection study (bench/selection.py, bench/selection_steps.py, the e5 study): the dev-half rule with the test
halves apart, derived arms, reference rows, the summary's fields, the runner's steps, and the page from a fixture."""

from __future__ import annotations

import dataclasses
import json

import pytest

from bench import page
from bench import selection as S
from bench.reporting import table_rows
from bench.run import Options, run_steps, steps_of
from bench.steps import e5_aligner
from bench.studies import STUDIES
from bench.studies import e5 as E5
from bench.study import Derived, Reference
from polyalign.config import load_recipe

GOLD = ("de-en", "en-fr")
SELECTION = dataclasses.replace(E5.SELECTION, gold_sets=GOLD)
STUDY = dataclasses.replace(E5.STUDY, selection=SELECTION)


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
        Derived("interpolate", 0.5), "softmax-labels", "1000", E5.E5, tuned, "runs/w",
        scores([19.5, 9.5], [19.5, 9.9], [19.0, 9.0]), 5.0,
    )  # fmt: skip
    return {"commit": "abc1234", "date": "2026-01-01 00:00 UTC", "start": {"scores": start},
            "arms": {"softmax-labels": arm, "softmax-labels-wise-0.5": wise}}  # fmt: skip


def test_halves_split_even_and_odd_sentences():
    assert S.halves(5) == {"all": [0, 1, 2, 3, 4], "dev": [0, 2, 4], "test": [1, 3]}


def test_the_rule_decides_on_the_dev_halves_and_never_reads_the_test_halves():
    results = saved()
    # below the start on every dev half beats a lower mean that is worse on one; the interpolation's mean (14.7) loses
    assert S.chosen(SELECTION, results) == ("softmax-labels", "500")
    assert S.chosen(SELECTION, results, trained_only=True) == ("softmax-labels", "500")
    # WiSE-FT's base is the lowest mean among trained checkpoints, above the start on en-fr or not
    assert S.derivation_base(SELECTION, results) == ("softmax-labels", "1000")
    results["arms"]["softmax-labels"]["checkpoints"]["500"]["separate/argmax/test"]["8"] = {"de-en": 0.0, "en-fr": 0.0}
    assert S.chosen(SELECTION, results) == ("softmax-labels", "500")  # the test halves changed, the choice did not
    assert S.chosen(dataclasses.replace(SELECTION, below_start_everywhere=False), results) == ("softmax-labels", "1000")


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
    interpolation = Derived("interpolate", 0.25)
    record = S.derived_record(interpolation, "arm", "1000", "start", "runs/arm/c", "runs/w", {"k": 1}, 8.2)
    assert record["interpolated"] == {"start": "start", "tuned": "runs/arm/c", "weight": 0.25}
    assert record["checkpoints"] == {"1000": {"k": 1}} and record["minutes"] == 8.2 and record["model"] == "runs/w"
    assert record["note"] == "0.75 x the start + 0.25 x arm at step 1000 (WiSE-FT)" and S.is_derived(record)
    assert interpolation.name_for("arm") == "arm-wise-0.25"
    plugged = S.derived_record(Derived("plug-out"), "veco", "60", "start", "runs/veco", "runs/p", {}, 1.0)
    assert (
        plugged["plugged_out"] == {"model": "runs/veco"} and Derived("plug-out").name_for("veco") == "veco-plugged-out"
    )
    assert S.derive_command(Derived("plug-out"), "start", "runs/veco", "runs/p")[:2] == ["plug-out", "--model"]
    with pytest.raises(ValueError, match="wise"):
        Derived("wise")


def test_derive_makes_only_what_no_arm_was_made_from(tmp_path, capsys):
    root = tmp_path / "repo"
    (root / "bench" / "results").mkdir(parents=True)
    (root / "bench" / "results" / "e5.json").write_text(json.dumps(saved()))
    study = dataclasses.replace(STUDY, selection=dataclasses.replace(SELECTION, derived=(
        Derived("interpolate", 0.5), Derived("interpolate", 0.75))))  # fmt: skip
    run_steps(study, ["derive"], Options(dry_run=True, root=root))
    made = [line for line in capsys.readouterr().out.splitlines() if line.startswith("+ ")]
    # the base is softmax-labels at 1000 (lowest dev mean), whose 0.5 interpolation is saved (under another name)
    assert len(made) == 1 and "--weight 0.75" in made[0] and "softmax-labels-wise-0.75" in made[0]


def test_the_steps_run_in_order_and_an_unknown_one_names_them(tmp_path):
    assert list(steps_of(STUDY, Options(root=tmp_path))) == [
        "convert", "sentences", "start", "arms", "derive", "compare", "speed", "fit", "aligner-speed",
    ]  # fmt: skip
    with pytest.raises(SystemExit, match="convert, sentences, start"):
        run_steps(STUDY, ["interpolate"], Options(root=tmp_path))
    with pytest.raises(SystemExit, match="argmax-labels"):
        run_steps(STUDY, ["arms"], Options(dry_run=True, arms=["nope"], root=tmp_path))


def test_a_dry_run_prints_each_arms_training_with_its_schedule_and_stop(tmp_path, capsys):
    (tmp_path / "bench" / "results").mkdir(parents=True)
    run_steps(STUDY, ["arms"], Options(dry_run=True, root=tmp_path))
    commands = [line for line in capsys.readouterr().out.splitlines() if line.startswith("+ ")]
    assert len(commands) == len(E5.ARMS) and all(f"--init-from {tmp_path}/{E5.E5}" in c for c in commands)
    embeddings = next(c for c in commands if "trained-embeddings" in c)
    assert "trainer.max_steps=3000" in embeddings and "trainer.stop_at=500" in embeddings
    assert not (tmp_path / "bench" / "results" / "e5.json").exists()  # a dry run saves nothing


@pytest.mark.parametrize("arm", E5.ARMS, ids=lambda a: a.name)
def test_every_selection_arm_loads_with_its_overrides(arm):
    sets = [f"trainer.max_steps={SELECTION.steps}", f"trainer.save_every={SELECTION.save_every}", *arm.overrides]
    sets += [f"trainer.stop_at={arm.stop_at}"] if arm.stop_at else []
    sets += [f"trainer.max_minutes={arm.minutes:g}", "trainer.stop_at=0"] if arm.minutes else []
    recipe = load_recipe(arm.recipe, sets + (["objectives.0.config.layer=7"] if arm.rule_layer else []))
    assert recipe.trainer.max_steps == SELECTION.steps and arm.init_from == SELECTION.start


def test_reference_rows_are_published_values_or_another_benchs_saved_aer(tmp_path):
    published = Reference("p", "a table", {"de-en": 17.42})
    assert S.reference_values(published, GOLD, tmp_path) == {"de-en": 17.42}
    (tmp_path / "alignment.json").write_text(json.dumps({"eflomal": {"de-en": {"aer": 28.034}, "ja-en": {"aer": 1}}}))
    measured = Reference("eflomal", "its bench", path="alignment.json", key="eflomal")
    assert S.reference_values(measured, GOLD, tmp_path) == {"de-en": 28.03}


def fixture_root(tmp_path):
    (tmp_path / "bench" / "results").mkdir(parents=True)
    eflomal = {g: {"aer": 30.0 + k} for k, g in enumerate(GOLD)}
    (tmp_path / "bench" / "results" / "alignment.json").write_text(json.dumps({"eflomal": eflomal}))
    (tmp_path / "bench" / "results" / "e5.json").write_text(json.dumps(saved()))
    return tmp_path


def test_the_summary_carries_the_chosen_start_test_halves_and_the_published_rows(tmp_path):
    root = fixture_root(tmp_path)
    s = S.summary(SELECTION, saved(), root)
    assert (s["arm"], s["step"], s["training_minutes"], s["layer"]) == ("softmax-labels", 500, 5.0, 8)
    assert s["model"] == "bench/work/e5-runs/softmax-labels/checkpoints/step-0000500"
    assert s["aer"] == {"de-en": 18.0, "en-fr": 9.0} and s["aer_test_halves"] == {"de-en": 30.0, "en-fr": 30.0}
    assert s["start"] == {"aer": {"de-en": 20.0, "en-fr": 10.0}} and s["start_test_halves"]["de-en"] == 20.0
    assert s["eflomal"] == {"aer": {"de-en": 30.0, "en-fr": 31.0}}
    assert s["xlm_align_base"]["aer"] == {"de-en": 17.42, "en-fr": 6.71, "en-hi": 31.93, "ro-en-wpt05": 26.5}
    assert s["awesome_align"]["aer"]["de-en"] == 15.2 and "source" in s["awesome_align"]


def test_the_page_from_a_fixture_shows_every_arm_method_layer_and_reference(tmp_path):
    root = fixture_root(tmp_path)
    results = root / "bench" / "results"
    data = saved()
    extra = {"separate/softmax": {"7": {"de-en": 16.0, "en-fr": 8.0}, "8": {"de-en": 16.5, "en-fr": 8.5}}}
    extra["separate/ot"] = data["arms"]["softmax-labels"]["checkpoints"]["1000"]["separate/ot"]
    data["start"]["scores"]["separate/softmax"] = {"7": {"de-en": 21.0, "en-fr": 11.0}, "8": {"de-en": 21.5}}
    checkpoint = scores([21.0, 9.0], [21.0, 9.5], [21.0, 9.0])
    data["arms"]["dwa-beside"] = {"note": "D", "sets": [], "recipe": "bench/recipes/aligner-dwa.yaml",
                                  "minutes": 8.2, "checkpoints": {"500": checkpoint}}  # fmt: skip
    (results / "e5.json").write_text(json.dumps(data))
    text = page.write(STUDY, results, "python -m bench.run e5 --page", notes_dir=tmp_path, root=root).read_text()
    rows = table_rows(text)
    assert ["argmax-labels: not run", "–", "–"] in rows and [
        "softmax-labels (1000 steps, 10.0 min)",
        "17.0",
        "11.0",
    ] in rows
    assert ["chosen: softmax-labels at step 500 (5.0 min)", "18.0", "9.0"] in rows  # full sets; chosen on dev
    assert ["chosen: softmax-labels at step 500 (5.0 min)", "30.0", "30.0"] in rows  # its test halves, apart
    assert ["published: XLM-Align base", "17.42", "6.71"] in rows and ["eflomal (same bitext)", "30.0", "31.0"] in rows
    assert ["dwa-beside at step 500", "21.0", "9.0"] in rows  # the arms at the same step
    summary = json.loads((results / "e5_summary.json").read_text())
    assert summary["arm"] == "softmax-labels" and (results / "e5" / "aer_by_step.png").is_file()
    # every method and layer the start and the chosen one share: the chosen (at 500) has argmax only
    assert ["separate/argmax", "20.0 → 18.0", "10.0 → 9.0"] in rows and not any("separate/softmax" in r for r in rows)
    data["arms"]["softmax-labels"]["checkpoints"]["500"] |= extra
    (results / "e5.json").write_text(json.dumps(data))
    rows = table_rows(page.write(STUDY, results, "cmd", notes_dir=tmp_path, root=root).read_text())
    assert ["separate/softmax", "21.0 → 16.0", "11.0 → 8.0"] in rows  # layer 7, its own table
    assert ["separate/softmax", "21.5 → 16.5", "–"] in rows and ["separate/ot", "25.0 → 22.0", "15.0 → 12.0"] in rows


def test_the_e5_study_is_one_of_the_harness_and_declares_its_published_rows():
    assert STUDIES["e5"] is E5.STUDY and E5.STUDY.comparisons == ()
    summary_fields = {r.summary for r in E5.SELECTION.references if r.summary}
    assert summary_fields == {"eflomal", "xlm_align_base", "awesome_align"}
    names = {r.name for r in E5.SELECTION.references}
    assert E5.SELECTION.baseline in names and {name for pair in E5.SELECTION.gains for name in pair} <= names


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
    assert S.rule_layer(dataclasses.replace(SELECTION, rule_layers=()), results) is None
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
    assert S.chosen(SELECTION, results) == ("rule-arm", "500")
    record["separate/argmax/dev"]["7"] = {"de-en": 10.0, "en-fr": 9.5}  # lowest mean, above the start at 7 on en-fr
    assert S.chosen_at(SELECTION, results) == ("softmax-labels", "500", "8")


def test_the_offered_extraction_is_the_lowest_mean_on_the_dev_halves_of_the_offered_model_and_layer(tmp_path):
    results = layered()
    checkpoint = results["arms"]["softmax-labels"]["checkpoints"]["500"]
    checkpoint |= scores([30.0, 30.0], [18.0, 8.0], [1.0, 1.0], key="separate/softmax-0.1")  # dev lowest, all not
    checkpoint |= scores([1.0, 1.0], [19.5, 9.0], [1.0, 1.0], key="separate/itermax")  # all lowest, dev not
    checkpoint |= scores([1.0, 1.0], [1.0, 1.0], [1.0, 1.0], key="pair/ot")  # another encoding
    checkpoint |= scores([1.0, 1.0], [1.0, 1.0], [1.0, 1.0], key="separate/ot", layer="7")  # another layer
    assert S.offered(SELECTION, results) == {"arm": "softmax-labels", "step": "500", "layer": "8",
                                             "method": "softmax-0.1"}  # fmt: skip
    del checkpoint["separate/softmax-0.1/dev"]["8"]["en-fr"]  # not measured on every dev half: no candidate
    assert S.offered(SELECTION, results)["method"] == "argmax"
    assert S.chosen_method(dataclasses.replace(SELECTION, rule_layers=()), results, ("softmax-labels", "500", "8")) == (
        "argmax"
    )
    assert S.extraction("softmax-0.1") == ("softmax", 0.1) and S.extraction("softmax") == ("softmax", None)
    summary = S.summary(SELECTION, results, fixture_root(tmp_path))
    assert (summary["method"], summary["layer"], summary["aer"]) == ("argmax", 8, {"de-en": 18.0, "en-fr": 9.0})


def test_compare_is_not_made_again_for_the_offered_aligner_it_compared(tmp_path, capsys):
    (tmp_path / "bench" / "results").mkdir(parents=True)
    results = saved() | {"compare": {"arm": "softmax-labels", "step": 500, "sets": {}}}  # layer 8, argmax: implied
    (tmp_path / "bench" / "results" / "e5.json").write_text(json.dumps(results))
    run_steps(STUDY, ["compare"], Options(dry_run=True, root=tmp_path))
    assert "is compared already" in capsys.readouterr().out
    results["compare"] |= {"layer": 7}
    (tmp_path / "bench" / "results" / "e5.json").write_text(json.dumps(results))
    run_steps(STUDY, ["compare"], Options(dry_run=True, root=tmp_path))
    assert "is compared already" not in capsys.readouterr().out
    assert S.compared(SELECTION, results["compare"]) == ("softmax-labels", "500", "7", "argmax")


def test_a_rule_layer_arm_trains_at_the_rules_layer_and_a_minutes_arm_for_its_minutes(tmp_path, capsys):
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "e5.json").write_text(json.dumps(layered()))
    arms = ["softmax-rule-layer", "dwa-beside", "softmax-labels"]
    run_steps(STUDY, ["arms"], Options(dry_run=True, arms=arms, root=tmp_path))
    commands = [line for line in capsys.readouterr().out.splitlines() if line.startswith("+ ")]
    rule, dwa, plain = (next(c for c in commands if f"e5-runs/{n} " in c) for n in ("softmax-rule-layer", "dwa-beside",
                                                                                   "softmax-labels"))  # fmt: skip
    assert "objectives.0.config.layer=7" in rule and "trainer.stop_at=1000" in rule
    assert "pretrain bench/recipes/aligner-dwa.yaml" in dwa and "objectives.0.config.layer=7" in dwa
    assert dwa.endswith("--set trainer.max_minutes=8.2 --set trainer.stop_at=0 --set objectives.0.config.layer=7")
    assert "config.layer" not in plain


def test_the_page_shows_the_offered_aligner_and_the_ablation_of_every_arm_method_and_layer(tmp_path):
    root = fixture_root(tmp_path)
    results = root / "bench" / "results"
    data = layered()
    data["arms"]["rule-arm"]["checkpoints"]["500"]["separate/argmax/dev"]["7"] = {"de-en": 17.5, "en-fr": 8.5}
    (results / "e5.json").write_text(json.dumps(data))
    rows = table_rows(page.write(STUDY, results, "cmd", notes_dir=tmp_path, root=root).read_text())
    summary = json.loads((results / "e5_summary.json").read_text())
    assert (summary["arm"], summary["step"], summary["layer"], summary["method"]) == ("rule-arm", 500, 7, "argmax")
    assert ["chosen: rule-arm at step 500 (9.0 min), layer 7, argmax", "19.0", "8.5"] in rows
    assert ["rule-arm", "500", "9.0", "13.00 / 13.75"] in rows  # the ablation at layer 7: dev halves / whole sets
    assert ["softmax-labels", "1000", "10.0", "13.00 / 14.00", "17.00 / 17.00"] in rows  # argmax, ot at layer 8
    assert ["start", "", "", "15.00 / 15.00", "20.00 / 20.00"] in rows


def speed_fixture() -> dict:
    run = lambda ours, theirs, mfu: {"polyalign": {"pairs_per_s": ours}, "eflomal": {"pairs_per_s": theirs},  # noqa: E731
                                     "utilisation": {"mfu": mfu}}  # fmt: skip
    return {"threads": 2, "options": ["--method", "argmax", "--encoding", "separate", "--layer", "8"],
            "eflomal_2000": run(150.0, 80.0, 0.21), "eflomal_20000": run(210.0, 800.0, 0.3),
            "simalign_500": {"polyalign": {"pairs_per_s": 100.0}, "simalign": {"pairs_per_s": 22.8}}}  # fmt: skip


def test_the_aligner_speed_section_renders_from_its_json_and_says_how_to_make_it_without():
    from bench.reporting import block_lines

    rows = table_rows(
        "\n".join(line for b in e5_aligner.aligner_speed_blocks(speed_fixture()) for line in block_lines(b))
    )
    assert ["eflomal, 2,000 pairs", "150", "80.0", "1.9x", "21.0%"] in rows
    assert ["eflomal, 20,000 pairs", "210", "800.0", "0.3x", "30.0%"] in rows
    assert ["SimAlign, 500 pairs", "100", "22.8", "4.4x", "–"] in rows
    missing = e5_aligner.aligner_speed_blocks(None)  # no table; the file to make named
    assert not any(b.rows for b in missing) and any(e5_aligner.ALIGNER_SPEED in " ".join(b.text) for b in missing)


def test_the_fitted_models_are_a_table_apart_labelled_transductive():
    from bench.reporting import block_lines

    fit = {"fit": {"start": {"model": E5.E5, "reading": "softmax at 0.1, layer 7", "sets": {"de-en": {
        "all": 21.4, "dev": 22.4, "test": 20.4, "fit": {"minutes": 0.6}}}}}}  # fmt: skip
    blocks = e5_aligner.fit_blocks(saved() | fit, GOLD, E5.PROTOCOL)
    rows = table_rows("\n".join(line for b in blocks for line in block_lines(b)))
    assert any(e5_aligner.TRANSDUCTIVE in " ".join((b.heading, *b.text)) for b in blocks)
    assert ["the start, not fitted (whole sets)", "20.0", "10.0"] in rows
    assert ["the start fitted on each set, read softmax at 0.1, layer 7 (dev halves)", "22.4", "–"] in rows
    assert ["the offered model fitted on each set: not run", "–", "–"] in rows
    assert ["the start: minutes to fit and align", "0.6", "–"] in rows
