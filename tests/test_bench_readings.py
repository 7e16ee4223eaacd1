"""Readings (bench/verdict.py): what a comparison's premises, the method's losses, its diagnostics and an
independent implementation say about why a claim did or did not reproduce, as codes (the page words them)."""

import dataclasses

import pytest

from bench import verdict as V
from bench.studies import evidence as E
from bench.verdict import R, Reading
from tests.bench_sections import CURRENT_AER, STUDY, rows_of, section_of


def reading(cid: str, results: dict, floors=None, extra: dict | None = None, independent=None) -> Reading:
    c, section = section_of(cid, results, floors)
    loaded = {c.section: section, **(extra or {})}
    return V.reading(STUDY, c, rows_of(loaded), loaded, independent)


def test_an_unmet_premise_reads_scale_and_a_met_one_does_not():
    def results(label_aer):
        return {
            "start": {"0": {"aer-ot@label": label_aer}},
            "mlm-tlm": {"0": {"aer-ot@default": 64.9, **CURRENT_AER}},
            "dwa": {"0": {"aer-ot@default": 82.2, **CURRENT_AER, "train": {"dwa/dwa_loss": [3.3, 2.3]}}},
        }  # noqa: E731

    assert reading("xlm-align-dwa-aligned", results(72.2)) == Reading(R.PREMISE_NOT_MET)  # no diagnostic: scale
    assert reading("xlm-align-dwa-aligned", results(20.0)) == Reading(R.LOSS_FALLS)


def detector_seed(aer: float, accuracy: float, generator: float = 9.0) -> dict:
    losses = {f"{o}/generator_loss": [10.0, generator] for o in ("mrtd", "trtd")}
    accuracies = {f"{o}/discriminator_accuracy": [0.8, accuracy] for o in ("mrtd", "trtd")}
    return {
        "aer-ot@default": aer,
        "aer-ot@best": aer,
        **CURRENT_AER,
        "train": {
            **losses,
            **accuracies,
            "mrtd/replaced": [0.15, 0.147],
            "trtd/replaced": [0.15, 0.147],
            "flops": 1e13,
        },
    }


def test_a_detector_at_the_majority_class_or_a_generator_above_the_unigram_floor_is_an_unmet_premise():
    c, section = section_of(
        "xlm-e-aer-ot-1",
        {"xlm": {"0": {"aer-ot@default": 77.0, **CURRENT_AER}}, "xlm-e": {"0": detector_seed(81.0, 0.95, 6.1)}},
        {"unigram": 6.6},
    )
    assert V.unmet_premises(c, section) == []
    section["results"]["xlm-e"]["0"] = detector_seed(81.0, 0.853, 6.1)  # majority 0.853: learned nothing
    assert {ch.label for ch in V.unmet_premises(c, section)} == {
        "MRTD discriminator accuracy",
        "TRTD discriminator accuracy",
    }
    section["results"]["xlm-e"]["0"] = detector_seed(81.0, 0.95, 8.8)  # generator no better than frequency draws
    assert {ch.label for ch in V.unmet_premises(c, section)} == {"MRTD generator loss", "TRTD generator loss"}
    section["floors"] = {}  # no floor measured: that premise is not judged
    assert V.unmet_premises(c, section) == []


def test_models_that_never_passed_the_unigram_floor_read_as_scale_unless_the_gap_grows_with_compute():
    def results(mlm):
        return {
            "xlm": {"0": {"mt-encoder-loss": 6.4, "train": {"mlm/loss": [10.1, mlm]}}},
            "veco": {"0": {"mt-veco-loss": 6.6, "train": {"ca_mlm/own_loss": [9.5, 7.3]}}},
        }  # noqa: E731

    assert reading("veco-mt-vs-encoder", results(7.8), {"unigram": 6.6}) == Reading(R.AT_FLOOR)
    assert reading("veco-mt-vs-encoder", results(5.9), {"unigram": 6.6}) == Reading(R.LOSS_FALLS)
    at_floor = {
        "exp2-mlm-tlm": {"0": {"tatoeba14@dev": 5.0, "train": {"mlm/loss": [9.0, 8.6]}}},
        "exp3-camlm": {"0": {"tatoeba14@dev": 2.0, "train": {"mlm/loss": [9.0, 8.7]}}},
    }
    assert reading("ernie-m-camlm-aligned", at_floor, {"unigram": 6.57}) == Reading(R.AT_FLOOR)
    # at the floor, but a loss still falling in the run's last quarter reads as the budget, not scale
    at_floor["exp3-camlm"]["0"]["train"]["loss_quarters"] = {"mlm": [9.0, 8.8, 8.7, 8.5], "camlm": [9, 9, 9, 9]}
    falling = Reading(R.STILL_FALLING, ("exp3-camlm: mlm",))
    assert reading("ernie-m-camlm-aligned", at_floor, {"unigram": 6.57}) == falling
    at_floor["exp3-camlm"]["0"]["train"]["loss_quarters"]["mlm"] = [9.0, 8.8, 8.7, 8.68]  # flat: scale again
    assert reading("ernie-m-camlm-aligned", at_floor, {"unigram": 6.57}) == Reading(R.AT_FLOOR)


def test_models_at_the_floor_whose_gap_grows_against_the_paper_with_compute_are_not_read_as_scale():
    # xlm-e-no-trtd-aer-ot has no other budget; veco-ca-mlm neither: build the family of xlm-e-aer-ot-1..3
    floor = {"unigram": 6.6}
    at_floor = {
        "train": {"mlm/loss": [9.0, 7.0], "mrtd/generator_loss": [10.0, 8.0], "trtd/generator_loss": [10.0, 8.0]}
    }
    loaded, c = {}, STUDY.comparison("xlm-e-aer-ot-3")
    for i, (xlm, xlm_e) in enumerate(((80.0, 84.0), (80.0, 83.0), (80.0, 88.0)), start=1):
        d = STUDY.comparison(f"xlm-e-aer-ot-{i}")
        results = {
            "xlm": {"0": {"aer-ot@default": xlm, **CURRENT_AER, **at_floor}},
            "xlm-e": {"0": {"aer-ot@default": xlm_e, **CURRENT_AER, **at_floor}},
        }
        loaded[d.section] = {"section": d.section, "results": results, "floors": floor}
    c = dataclasses.replace(
        c,
        why=dataclasses.replace(
            c.why, checks=tuple(ch for ch in c.why.checks if "loss" in ch.key and not ch.premise_below_floor)
        ),
    )
    study = dataclasses.replace(STUDY, comparisons=tuple(c if x.id == c.id else x for x in STUDY.comparisons))
    rows = {x.id: V.comparison_row(x, loaded.get(x.section)) for x in study.comparisons}
    assert V.reading(study, c, rows, loaded) == Reading(R.AT_FLOOR_GAP_GROWS)
    loaded[c.section]["results"]["xlm-e"]["0"]["aer-ot@default"] = 81.0  # +4 -> +1: the gap shrinks, scale
    rows = {x.id: V.comparison_row(x, loaded.get(x.section)) for x in study.comparisons}
    assert V.reading(study, c, rows, loaded) == Reading(R.AT_FLOOR)


def test_a_loss_of_the_method_that_does_not_fall_makes_the_code_suspect():
    def results(gen):
        return {
            "mlm-tlm": {"0": {"aer-ot@default": 76.0, **CURRENT_AER, "train": {"mlm/loss": [5.89, 5.89]}}},
            "xlm-e-continued": {"0": {"aer-ot@default": 80.0, **CURRENT_AER, "train": {"mrtd/generator_loss": gen}}},
        }  # noqa: E731

    assert reading("xlm-e-continued-aer", results([9.1, 7.5])) == Reading(R.LOSS_FALLS)
    assert reading("xlm-e-continued-aer", results([7.5, 9.1])) == Reading(R.LOSS_FLAT)


SCRATCH_3 = {"xlm": {"0": {"aer-ot@default": 76.2, **CURRENT_AER}}, "xlm-e": {"0": detector_seed(89.0, 0.853)}}


def diagnostic(cid: str, method_aer: float, accuracy: float = 0.95, seeds: str = "0") -> dict:
    d = STUDY.comparison(cid)
    results = {
        d.baseline.name: {s: {"aer-ot@default": 76.0, "aer-ot@best": 75.0, **CURRENT_AER} for s in seeds},
        d.method.name: {s: detector_seed(method_aer, accuracy, 6.0) for s in seeds},
    }
    return {d.section: {"section": d.section, "code": "abc", "results": results, "floors": {"unigram": 6.6}}}


def test_a_diagnostic_with_its_premise_met_separates_code_from_scale():
    short = E.XLM_E_DIAGNOSTIC
    assert short in STUDY.comparison("xlm-e-aer-ot-3").why.diagnostics
    met = Reading(R.PREMISE_NOT_MET, parts=(Reading(R.DIAGNOSTIC_REPRODUCED, (True,)),))
    assert reading("xlm-e-aer-ot-3", SCRATCH_3, extra=diagnostic(short, 73.0)) == met
    trails = Reading(R.PREMISE_NOT_MET, parts=(Reading(R.DIAGNOSTIC_TRAILS),))
    assert reading("xlm-e-aer-ot-3", SCRATCH_3, extra=diagnostic(short, 80.0)) == trails
    idle = reading("xlm-e-aer-ot-3", SCRATCH_3, extra=diagnostic(short, 73.0, accuracy=0.853))
    assert idle == Reading(R.PREMISE_NOT_MET, parts=(Reading(R.DIAGNOSTIC_REPRODUCED, (False,)),))  # yet the effect
    # unmet and against the paper: not read, so the scratch claim's own premise decides
    unread = reading("xlm-e-aer-ot-3", SCRATCH_3, extra=diagnostic(short, 80.0, accuracy=0.853))
    assert unread == Reading(R.PREMISE_NOT_MET)


def test_diagnostics_at_two_budgets_read_the_trend_of_the_gap():
    (short, *_), (long, *_) = E.XLM_E_DIAGNOSTICS[:2]
    both = lambda long_aer: {**diagnostic(short, 80.0), **diagnostic(long, long_aer)}  # noqa: E731
    premise_not_met = lambda code: Reading(R.PREMISE_NOT_MET, parts=(Reading(code),))  # noqa: E731
    closing = reading("xlm-e-aer-ot-3", SCRATCH_3, extra=both(78.5))  # +4 at 150 steps, +2.5 at 300
    assert closing == premise_not_met(R.DIAGNOSTIC_GAP_CLOSES)
    assert reading("xlm-e-aer-ot-3", SCRATCH_3, extra=both(84.0)) == premise_not_met(R.DIAGNOSTIC_TRAILS)  # +4, +8
    warm = E.XLM_E_DIAGNOSTICS[3][0]  # another setting's last diagnostic reproduces: the two disagree
    disagree = reading("xlm-e-aer-ot-3", SCRATCH_3, extra={**both(84.0), **diagnostic(warm, 73.0)})
    assert disagree == premise_not_met(R.DIAGNOSTICS_DISAGREE)


def test_a_diagnostic_holding_a_part_in_both_arms_says_whether_the_gap_lies_in_it():
    held = next(c for c in STUDY.comparisons if c.why.localises and c.why.localises[0] == "token embeddings")
    reference = held.why.localises[2]

    def located(held_aer: float, reference_aer: float = 84.0) -> R:
        loaded = {**diagnostic(reference, reference_aer, seeds="01"), **diagnostic(held.id, held_aer, seeds="01")}
        found = V.location_reading(held, rows_of(loaded)[held.id], rows_of(loaded))
        assert found.args == ("token embeddings",)  # the part it names
        return found.code

    assert located(76.1) == R.GAP_IN  # +8 without the hold, +0.1 with it
    assert located(84.0) == located(86.0) == R.GAP_NOT_IN
    assert located(80.0) == R.GAP_NOT_ONLY_IN
    assert located(76.1, reference_aer=75.0) == R.NO_GAP_TO_PLACE


def test_a_diagnostic_that_departs_from_the_paper_is_read_against_the_paper_setting():
    departing = next(c for c in STUDY.comparisons if c.why.departs)
    reference = STUDY.comparison(departing.why.departs[1])
    assert departing.baseline == reference.baseline and departing.setup == reference.setup
    assert departing.method.recipe == reference.method.recipe and departing.method != reference.method
    extra = lambda ref_aer: {**diagnostic(departing.id, 84.0), **diagnostic(reference.id, ref_aer)}  # noqa: E731
    loaded = extra(77.0)
    assert V.reading(STUDY, departing, rows_of(loaded), loaded) == Reading(R.DEPARTURE_EXPLAINS)
    loaded = extra(83.0)  # the paper's setting goes against the paper too: the departure explains nothing
    assert V.reading(STUDY, departing, rows_of(loaded), loaded) == Reading(R.DEPARTURE_DOES_NOT)
    lines, _ = V.diagnostic_lines(STUDY, STUDY.comparison("xlm-e-aer-ot-3"), rows_of(loaded), loaded)
    assert next(x for x in lines if x["diagnostic"] == departing)["read"] == Reading(R.DEPARTS_NOT_READ)


def test_an_independent_implementation_on_the_same_batches_clears_or_convicts_the_code():
    def curve(accuracy, loss):
        return [
            {"step": 25, "discriminator_accuracy": 0.8, "replaced": 0.15, "generator_loss": 10.0},
            {"step": 50, "discriminator_accuracy": accuracy, "replaced": 0.15, "generator_loss": loss},
        ]  # noqa: E731

    result = lambda ours, theirs: {"unigram_floor": 6.6, "curves": {"polyalign": ours, "ref": theirs}}  # noqa: E731
    states, alike = V.independent_states(result(curve(0.85, 8.5), curve(0.851, 8.4)))
    assert states["polyalign"]["majority"] == pytest.approx(0.85) and alike == Reading(R.INDEPENDENT_ALIKE)
    states, otherwise = V.independent_states(result(curve(0.85, 8.5), curve(0.90, 8.4)))
    assert states["ref"]["since"] == 50 and otherwise == Reading(R.INDEPENDENT_OTHERWISE)
    below = V.independent_states(result(curve(0.9, 7.0), curve(0.9, 6.0)))[1]  # one generator below the floor
    assert below == Reading(R.INDEPENDENT_OTHERWISE)
    read = reading("xlm-e-small-batch-aer", {}, independent=result(curve(0.85, 8.5), curve(0.851, 8.4)))
    assert read.also == Reading(R.INDEPENDENT_ALIKE)  # read beside the rule's own reading
