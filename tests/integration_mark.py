"""What makes a test an integration test, and the hooks (imported by conftest.py) that hold every test to it.

A test is an integration test when it trains (runs the pre-training loop or the fine-tuning loop, in its body or
through a fixture) or starts Python in a new process (the CLI, torchrun). Such a test carries
`@pytest.mark.integration`, so that `-m "not integration"` runs the unit tests alone, in seconds. A test that
does either without the mark fails, naming what it did and the fix. Calling the CLI in-process to refuse bad
input, print help or align with a random model trains nothing: a unit test may do it.
"""

from __future__ import annotations

import functools
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import polyalign.finetune.loop
import polyalign.train

MARK = "integration"
# Where each loop trains, as (a function of the loop, the name it calls to train, what that means). Patching the
# name in that function's globals catches every caller of the loop however it imported it, and leaves alone a unit
# test that calls `train_step` itself for one step of a tiny run.
LOOPS = (
    (polyalign.train.pretrain, "train_step", "pre-trains"),
    (polyalign.finetune.loop.run_finetune, "finetune_seed", "fine-tunes"),
)

done_by_test: list[str] = []  # what the test now in its setup or call phase did itself
done_by_fixture: dict[str, str] = {}  # fixture name -> what its setup did, once for every test that uses it
fixtures_in_setup: list[str] = []


def record(what: str) -> None:
    if fixtures_in_setup:  # a session fixture is set up once: remember it for every later test that uses it
        done_by_fixture.setdefault(fixtures_in_setup[-1], what)
    else:
        done_by_test.append(what)


def recorded(what: str, function):
    @functools.wraps(function)
    def recording(*args, **kwargs):
        record(what)
        return function(*args, **kwargs)

    return recording


def starts_python(args) -> bool:
    argv = shlex.split(args) if isinstance(args, str) else [str(a) for a in args]
    program = Path(argv[0]).name if argv else ""
    return argv[:1] == [sys.executable] or program.startswith("python") or program == "torchrun"


def record_python_processes() -> None:
    start = subprocess.Popen.__init__

    @functools.wraps(start)
    def starting(self, args, *rest, **kwargs):
        if starts_python(args):
            record("starts a Python process")
        start(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = starting


def record_loops() -> None:
    for loop, name, what in LOOPS:
        loop.__globals__[name] = recorded(what, loop.__globals__[name])


def check(item: pytest.Item) -> None:
    if item.get_closest_marker(MARK):
        return
    done = [
        *done_by_test,
        *(f"{what} (fixture {name})" for name, what in done_by_fixture.items() if name in item.fixturenames),
    ]
    if done:
        pytest.fail(f"{item.nodeid} {done[0]} but is not marked: add @pytest.mark.{MARK}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    fixtures_in_setup.append(fixturedef.argname)
    try:
        return (yield)
    finally:
        fixtures_in_setup.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    done_by_test.clear()
    result = yield
    check(item)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    done_by_test.clear()
    result = yield
    check(item)
    return result


record_loops()
record_python_processes()
