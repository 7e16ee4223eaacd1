"""bench/perf/speed.py: every arm sees the same batches in the same order, and bench/reporting.py's table writer."""

from __future__ import annotations

from bench.perf.speed import compare_on_same_batches
from bench.reporting import markdown_table


def recording_arms(seen: dict[str, list]):
    def arm(name: str):
        def build():
            seen[name] = []
            return lambda batch: seen[name].append(batch) or float(batch)

        return build

    return {name: arm(name) for name in ("polyalign", "transformers")}


def test_every_arm_steps_through_the_same_batches_in_the_same_order():
    seen: dict[str, list] = {}
    runs = compare_on_same_batches(recording_arms(seen), batches=[0, 1, 2], warmup=2, steps=4)
    assert seen["polyalign"] == seen["transformers"] == [0, 1, 2, 0, 1, 2]  # warm-up 0, 1; timed 2, 0, 1, 2
    assert all(len(r["seconds"]) == 4 and r["losses"] == [2.0, 0.0, 1.0, 2.0] for r in runs.values())


def test_a_budget_stops_the_rounds_after_the_first():
    rounds = []
    runs = compare_on_same_batches(
        recording_arms({}), [0], warmup=0, steps=5, each_round=lambda: rounds.append(1), keep_going=lambda: False
    )
    assert len(rounds) == 1 and all(len(r["seconds"]) == 1 for r in runs.values())


def test_a_table_aligns_numbers_right_and_formats_floats():
    table = markdown_table(["arm", "tokens/s"], [["polyalign", 1.25]], align="lr")
    assert table.splitlines() == ["| arm | tokens/s |", "|---|---:|", "| polyalign | 1.2 |"]
