"""The discipline that keeps `-m "not integration"` to unit tests: a test that trains or starts Python is marked."""

import contextlib
import subprocess
import sys
from types import SimpleNamespace

import pytest

from polyalign.train import pretrain
from tests import integration_mark


@contextlib.contextmanager
def on_purpose():
    """What the block provokes on purpose is forgotten before the hooks check the test that provoked it."""
    by_test, by_fixture = list(integration_mark.done_by_test), dict(integration_mark.done_by_fixture)
    try:
        yield integration_mark
    finally:
        integration_mark.done_by_test[:] = by_test
        integration_mark.done_by_fixture.clear()
        integration_mark.done_by_fixture.update(by_fixture)


def item(marked: bool, fixtures=()):
    marker = object() if marked else None
    return SimpleNamespace(nodeid="t.py::test_x", fixturenames=list(fixtures), get_closest_marker=lambda _: marker)


def test_a_test_that_trains_without_the_mark_fails_and_with_it_passes():
    with on_purpose() as mark:
        mark.check(item(marked=False))  # nothing done: a unit test
        mark.record("pre-trains")
        with pytest.raises(pytest.fail.Exception, match=r"t.py::test_x pre-trains .* add @pytest.mark.integration"):
            mark.check(item(marked=False))
        mark.check(item(marked=True))


def test_a_fixture_that_trained_once_is_held_against_every_unmarked_test_that_uses_it():
    with on_purpose() as mark:
        mark.fixtures_in_setup.append("tiny_run")
        try:
            mark.record("pre-trains")
        finally:
            mark.fixtures_in_setup.pop()
        mark.check(item(marked=False, fixtures=["tmp_path"]))
        with pytest.raises(pytest.fail.Exception, match=r"pre-trains \(fixture tiny_run\)"):
            mark.check(item(marked=False, fixtures=["tiny_run", "tmp_path"]))


def test_the_pretraining_loop_step_and_python_processes_are_recorded_and_other_programs_are_not():
    with on_purpose() as mark:
        with pytest.raises(TypeError):  # the recording wrapper sits where the loop looks its step up
            pretrain.__globals__["train_step"]()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        subprocess.run(["git", "--version"], check=True, capture_output=True)
        assert mark.done_by_test == ["pre-trains", "starts a Python process"]
    assert integration_mark.starts_python("torchrun --nproc_per_node=2 -m polyalign.cli pretrain xlm")
    assert not integration_mark.starts_python(["git", "rev-parse", "HEAD"])
