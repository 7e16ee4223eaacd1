"""The GPU check (bench/perf/gpu_check.py: the runner given the GPU steps): every step reports a result or a reason,
a step that overruns its budget is recorded as failed while the others go on, and the dry run takes every step
through the CPU at tiny sizes through the runner, `python -m bench.run gpu-check --dry-run`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import page
from bench.perf.gpu.throughput import ARMS, FIRST, PEERS
from bench.perf.gpu_check import CALLS, STEPS, TOTAL_BUDGET_S
from bench.reporting import table_rows
from bench.step import NOT_SELECTED, Context, combine, run_step, step_status

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["environment", "gpu-tests", "profile", "throughput", "kernels", "aligner"]
STATUS = re.compile(r"^(ok|skipped: .+|failed: .+)$")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("gpu_check")
    command = [sys.executable, "-m", "bench.run", "gpu-check", "--dry-run", "--out", str(out)]
    subprocess.run(command, cwd=ROOT, check=True, timeout=1500, capture_output=True)
    return json.loads((out / "gpu_check.json").read_text()), (out / "gpu_check.md").read_text()


def test_the_calls_take_the_steps_in_the_order_a_loan_must_prove_them():
    assert [s.name for s in STEPS] == NAMES and CALLS["gpu-check"] == tuple(NAMES)
    assert CALLS["gpu-call-1"] == ("environment", "gpu-tests", "profile") and CALLS["gpu-call-2"] == ("throughput",)
    budgets = {s.name: s.budget_s for s in STEPS}
    assert sum(budgets[n] for n in CALLS["gpu-call-1"]) <= TOTAL_BUDGET_S["gpu-call-1"] <= 150  # its hard cap
    assert all(s.device == "cuda" and s.kind == "gpu" for s in STEPS)
    assert set(FIRST) <= set(ARMS) and [ARMS[a][0] for a in FIRST] == ["mlm", "xlm", "xlm-e"]  # MLM, TLM, XLM-E


@pytest.mark.slow
@pytest.mark.integration
def test_every_step_is_reported_with_a_result_or_a_reason(dry_run):
    result, text = dry_run
    assert [s["name"] for s in result["steps"]] == NAMES  # none vanished, none out of order
    for step in result["steps"]:
        assert STATUS.match(step["status"]), step
        assert not step["status"].startswith("failed"), (step["name"], step["status"])  # the CPU runs every step
        assert step["parts"] and all(STATUS.match(p["status"]) for p in step["parts"].values()), step
        assert f"## {step['title']}: {step['status']}" in text
        assert all(name in text for name in step["parts"])


@pytest.mark.slow
@pytest.mark.integration
def test_the_dry_run_measures_what_each_step_is_for(dry_run):
    steps = {s["name"]: s["parts"] for s in dry_run[0]["steps"]}
    pretrain = steps["gpu-tests"]["torchrun pretrain + resume"]
    assert pretrain["status"] == "ok" and "loss_path" in pretrain  # every step logged, both checkpoints
    profile = steps["profile"]["mlm"]
    assert profile["status"] == "ok" and profile["graph_breaks"] >= 0 and profile["host_syncs"] >= 0
    assert any(name.startswith("kernel: ") for name in steps["profile"])  # the profiler's top events
    kernels = steps["kernels"]
    assert all(
        kernels[arm]["ms"] > 0 for arm in ("SDPA without a bias (flash on CUDA)", "materialised gated bias + SDPA")
    )
    arms = steps["throughput"]
    assert list(arms)[: len(FIRST)] == [FIRST[0], f"{PEERS['xlmr'][0]}, the row above's batches", *FIRST[1:]][:3]
    peers = [f"{PEERS[peer][0]}, the row above's batches" for _, _, peer in ARMS.values() if peer]
    assert set(arms) == {*ARMS, *peers}  # every recipe (so every objective) through train_step, and the peers
    assert all(
        a["status"] == "ok" and a["tokens_per_s"] > 0 and a["mfu_percent_of_measured_matmul"] > 0 for a in arms.values()
    )
    assert all({"torch", "transformers", "rows_x_tokens", "loss_path"} <= set(arms[arm]) for arm in ARMS)
    assert all(arms[arm]["speedup_over_transformers"] > 0 for arm, (_, _, peer) in ARMS.items() if peer)


def test_the_gpu_section_is_sized_above_cpu_scale_and_skipped_without_a_gpu():
    from bench.studies import STUDIES

    evidence = STUDIES["evidence"]
    section = evidence.sections()["xlm-e-gpu"]
    cpu = max(c.setup.budget.max_flops or 0 for c in evidence.comparisons if c.setup.device == "cpu")
    assert section.setup.device == "cuda" and section.setup.budget.max_flops >= 300 * cpu
    assert all("model.hidden_size=768" in a.overrides and "model.num_layers=12" in a.overrides for a in section.arms)


def two_calls(folder: Path, names: list[str], skipped: str) -> list[Path]:
    """Two calls' records: the first ran the first three steps, the second the others."""
    for i, ran in enumerate((names[:3], names[3:])):
        steps = [{"name": n, "title": n, "parts": {}, "status": "ok" if n in ran else skipped} for n in names]
        call = {"command": f"call {i}", "date": str(i), "seconds": 10.0, "steps": steps, "dry_run": False}
        (folder / f"{i}.json").write_text(json.dumps(call | {"code": "abc", "host": "h"}))
    return [folder / "0.json", folder / "1.json"]


def step_rows(out: Path, names: list[str]) -> list[list[str]]:
    """The page's table of steps (below its header row)."""
    return table_rows((out / "gpu_check.md").read_text())[1 : len(names) + 1]


def test_two_calls_combine_into_one_page(tmp_path):
    combined = combine(two_calls(tmp_path, NAMES, NOT_SELECTED))
    assert [s["status"] for s in combined["steps"]] == ["ok"] * len(NAMES)
    assert combined["seconds"] == 20.0 and combined["command"] == "call 0 ; call 1"
    (tmp_path / "gpu_check.json").write_text(json.dumps(combined))
    page.draw_record(tmp_path / "gpu_check.json")
    assert step_rows(tmp_path, NAMES) == [[n, "ok", "0", "0"] for n in NAMES]


@pytest.mark.integration  # the runner in a Python process of its own, as it is run after a loan
def test_the_combine_command_writes_the_page_and_the_record(tmp_path):
    calls = two_calls(tmp_path, NAMES, NOT_SELECTED)
    command = [
        sys.executable,
        "-m",
        "bench.run",
        "gpu-check",
        "--combine",
        *map(str, calls),
        "--out",
        str(tmp_path / "o"),
    ]
    subprocess.run(command, cwd=ROOT, check=True, timeout=120, capture_output=True)
    assert json.loads((tmp_path / "o" / "gpu_check.json").read_text()) == combine(calls)
    assert step_rows(tmp_path / "o", NAMES) == [[n, "ok", "0", "0"] for n in NAMES]


@pytest.mark.integration  # the step runs, and is stopped, in a Python process of its own
def test_a_step_past_its_budget_is_recorded_as_failed(tmp_path):
    throughput = {s.name: s for s in STEPS}["throughput"]
    record = run_step(throughput, tmp_path, tmp_path / "logs", dry_run=True, budget=1.0)
    assert record["status"].startswith("failed: timed out after"), record


def test_a_step_is_ok_unless_a_part_failed_and_skipped_when_all_were():
    assert step_status({"a": {"status": "ok"}, "b": {"status": "skipped: no CUDA"}}) == "ok"
    assert step_status({"a": {"status": "ok"}, "b": {"status": "failed: exit 1: boom"}}) == "failed: b: exit 1: boom"
    assert step_status({"a": {"status": "skipped: no CUDA"}}) == "skipped: no CUDA"
    assert step_status({}) == "failed: recorded nothing"


def test_a_part_may_record_a_measurement_called_name(tmp_path):
    """The environment step records the GPU's `name`: on the first GPU this raised a TypeError (part's own name)."""
    ctx = Context("environment", tmp_path, tmp_path / "logs", deadline=0.0, dry_run=True)
    assert ctx.part("gpu", status="ok", name="NVIDIA H200") == {"status": "ok", "name": "NVIDIA H200"}


def test_the_throughput_arms_train_every_registered_objective():
    from polyalign.config import load_recipe
    from polyalign.objectives import OBJECTIVES

    trained = {
        o.name for recipe, overrides, _ in ARMS.values() for o in load_recipe(recipe, list(overrides)).objectives
    }
    assert trained == set(OBJECTIVES)


def test_the_transformers_peer_gets_the_packed_examples_one_per_row_padded():
    import torch

    from bench.perf.gpu.throughput import padded_examples

    packed = {
        "example_ids": torch.tensor([[0, 0, 0, 1, 1, -1], [2, 2, 2, 2, -1, -1]]),
        "input_ids": torch.tensor([[5, 6, 7, 8, 9, 1], [10, 11, 12, 13, 1, 1]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]]),
        "labels": torch.tensor([[-100, 6, -100, -100, 9, -100], [10, -100, -100, -100, -100, -100]]),
    }
    padded = padded_examples(packed, pad=1)
    assert padded["input_ids"].tolist() == [[5, 6, 7, 1], [8, 9, 1, 1], [10, 11, 12, 13]]
    assert padded["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert padded["labels"].tolist() == [[-100, 6, -100, -100], [-100, 9, -100, -100], [10, -100, -100, -100]]
