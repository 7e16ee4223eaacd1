"""bench/perf/gpu_check.py: every step of the GPU check reports a result or a reason, and a step that overruns its
budget is recorded as failed while the others go on. The dry run takes every step through the CPU at tiny sizes."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "perf" / "gpu_check.py"
STEPS = ["environment", "gpu_tests", "throughput", "alignment", "tatoeba"]
STATUS = re.compile(r"^(ok|skipped: .+|failed: .+)$")


def gpu_check():
    """The script as a module (bench/ is not a package); registered so that its dataclasses resolve."""
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("gpu_check")
    command = [sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)]
    subprocess.run(command, cwd=ROOT, check=True, timeout=600, capture_output=True)
    return json.loads((out / "gpu_check.json").read_text()), (out / "gpu_check.md").read_text()


@pytest.mark.slow
@pytest.mark.integration
def test_every_step_is_reported_with_a_result_or_a_reason(dry_run):
    result, page = dry_run
    assert [s["name"] for s in result["steps"]] == STEPS  # none vanished, none out of order
    for step in result["steps"]:
        assert STATUS.match(step["status"]), step
        assert not step["status"].startswith("failed"), (step["name"], step["status"])  # the CPU runs every step
        assert step["parts"] and all(STATUS.match(p["status"]) for p in step["parts"].values()), step
        assert f"## {step['title']}: {step['status']}" in page
        assert all(name in page for name in step["parts"])


@pytest.mark.slow
@pytest.mark.integration
def test_the_dry_run_measures_what_each_step_is_for(dry_run):
    steps = {s["name"]: s["parts"] for s in dry_run[0]["steps"]}
    assert steps["gpu_tests"]["torchrun pretrain + resume"]["status"] == "ok"  # every step logged, both checkpoints
    assert steps["gpu_tests"]["torchrun DDP probe"]["backend"] == "gloo"
    arms = steps["throughput"]
    assert len(arms) == 4 and all(a["status"] == "ok" and a["tokens_per_s"] > 0 for a in arms.values())
    plain = steps["alignment"]["transformers (SimAlign's way)"]
    assert plain["status"] == "ok" and plain["links_f1"] > 0.9  # the same computation: the same links up to bf16
    assert steps["alignment"]["polyalign align"]["pairs_per_s"] > 0
    assert 0 <= steps["alignment"]["polyalign evaluate alignment"]["aer"] <= 100
    assert next(iter(steps["tatoeba"].values()))["status"] == "ok"


def test_a_step_past_its_budget_is_recorded_as_failed(tmp_path):
    record = gpu_check().run_step("throughput", tmp_path, tmp_path / "logs", dry_run=True, budget=1.0)
    assert record["status"].startswith("failed: timed out after"), record


def test_a_step_is_ok_unless_a_part_failed_and_skipped_when_all_were():
    status = gpu_check().step_status
    assert status({"a": {"status": "ok"}, "b": {"status": "skipped: no CUDA"}}) == "ok"
    assert status({"a": {"status": "ok"}, "b": {"status": "failed: exit 1: boom"}}) == "failed: b: exit 1: boom"
    assert status({"a": {"status": "skipped: no CUDA"}}) == "skipped: no CUDA"
    assert status({}) == "failed: recorded nothing"
