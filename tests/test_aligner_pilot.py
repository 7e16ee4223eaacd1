"""The GPU aligner's learning-rate pilot (bench/perf/gpu/aligner_pilot.py): its rule, its schedule scaled to its
length, and its page drawn from its JSON alone."""

from __future__ import annotations

import json

import pytest

from bench.perf.gpu import aligner_pilot as P
from bench.reporting import table_rows


def test_the_rule_takes_the_largest_rate_that_ends_below_the_start_near_its_own_minimum():
    start = 30.0
    falling = [29.5, 29.0, 28.8, 28.7]
    assert P.decide({5e-5: falling, 2e-5: falling, 1e-5: falling}, start) == 5e-5
    # above the start at its end: out, however low it went before
    assert P.decide({5e-5: [28.0, 29.0, 30.5, 30.1], 2e-5: falling, 1e-5: falling}, start) == 2e-5
    # below the start but climbing back from an earlier low by more than the tolerance: out
    assert P.decide({5e-5: [27.0, 27.2, 27.5, 27.31], 2e-5: [29.0, 28.9, 29.1, 29.2], 1e-5: falling}, start) == 2e-5
    # exactly at the start and exactly the tolerance above its minimum: in
    assert P.decide({5e-5: [29.7, 30.0], 2e-5: falling, 1e-5: falling}, start) == 5e-5
    # none passes: the fallback, whether or not it was run
    assert P.decide({5e-5: [31.0, 32.0], 2e-5: [30.5, 30.2]}, start) == P.FALLBACK == 1e-5


def test_each_rate_runs_the_gpu_arms_recipe_on_a_schedule_of_exactly_the_pilots_steps():
    from bench.perf.gpu.aligner import FULL

    plan = P.plan(2e-5, 40)
    assert (plan.lr, plan.pairs_per_step, plan.tokens_per_step) == (2e-5, FULL.pairs_per_step, FULL.tokens_per_step)
    assert set(FULL.overrides) <= set(plan.overrides) and plan.rule_layers == FULL.rule_layers
    per_pass, steps, every, warmup = plan.schedule(487_053)
    assert (per_pass, steps, every) == (3806, 40, 10)  # 4 checkpoints, the last at the schedule's end
    assert 1 <= warmup < steps and warmup == round(FULL.warmup_share * 40)


def saved_result() -> dict:
    sets = ["de-en", "en-hi"]
    point = lambda step, a, b: {"step": step, "dev": {"de-en": a, "en-hi": b}, "mean": (a + b) / 2}  # noqa: E731
    training = {"max_steps": 8, "warmup_steps": 1, "pairs_seen": 1024, "training_s": 100.0}
    return {
        "command": "python bench/perf/gpu/aligner_pilot.py --piece 330",
        "commit": "abc1234",
        "rule": P.RULE,
        "steps": 8,
        "pairs_per_step": 128,
        "layer": 7,
        "gold_sets": sets,
        "pack": {"command": "python bench/perf/aligner_pack.py --fraction 0.73", "total_pairs": 487_053},
        "measure": {"steps": 2, "step_s": 9.5, "score_s": 40.0},
        "start": {"dev": {"de-en": 20.0, "en-hi": 40.0}, "mean": 30.0},
        "runs": {
            "5e-05": {"training": training, "checkpoints": [point(4, 19.5, 41.25), point(8, 19.0, 42.0)]},
            "1e-05": {"training": training, "checkpoints": [point(4, 19.9, 39.75), point(8, 19.8, 39.5)]},
        },
        "chosen_lr": "1e-05",
    }


def test_the_page_shows_the_command_commit_rule_each_curve_as_numbers_and_a_plot(tmp_path):
    page = P.write_page(saved_result(), tmp_path / "aligner_pilot.md")
    text = page.read_text()
    assert "`python bench/perf/gpu/aligner_pilot.py --piece 330`" in text and "abc1234" in text
    assert P.RULE in text and "lr 1e-05" in text
    rows = table_rows(text)
    assert ["start", "0", "20.00", "40.00", "30.00"] in rows
    assert ["5e-05", "8", "19.00", "42.00", "30.50"] in rows and ["1e-05", "4", "19.90", "39.75", "29.82"] in rows
    assert (tmp_path / "aligner_pilot.png").stat().st_size > 0 and "](aligner_pilot.png)" in text


def test_the_gpu_arm_trains_at_the_rate_the_pilot_chose():
    from bench.perf.gpu.aligner import FULL

    saved = P.RESULTS / f"{P.NAME}.json"
    if not saved.is_file():
        pytest.skip("the pilot has not run here")
    result = json.loads(saved.read_text())
    assert float(result["chosen_lr"]) == FULL.lr
    means = {float(lr): [p["mean"] for p in run["checkpoints"]] for lr, run in result["runs"].items()}
    assert P.decide(means, result["start"]["mean"]) == FULL.lr  # the rule, read again from the saved curves
    assert all(len(points) >= P.CHECKPOINTS for points in means.values())
