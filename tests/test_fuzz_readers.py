"""Readers no input can crash, in short: every target of bench/perf/fuzz.py (each reader a user's file reaches, two
whole commands) reads a few valid files mutated by hypothesis, derandomized, and answers with success or one line,
writing nothing outside its output. The bench runs the same targets on thousands of inputs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.perf.fuzz import TARGETS, Tally, build_seeds, check_one

EXAMPLES = 12


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return build_seeds(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("name", list(TARGETS))
def test_a_mutated_file_is_read_or_answered_in_one_line(name, seeds, tmp_path):
    tally = Tally()

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.data())
    def read(data):
        problem = check_one(TARGETS[name], seeds, tmp_path / "case", data, tally)
        assert problem is None, problem

    read()
    assert tally.inputs >= EXAMPLES and tally.tracebacks == 0 and tally.written_outside == 0
