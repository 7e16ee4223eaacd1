"""The one runner (bench/run.py) over the one step interface (bench/step.py): any step registered with it runs by
name on the CPU, keeps its record, and is drawn by the one drawer (bench/page.py); `--list` names everything."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from bench import registry
from bench.reporting import table_rows
from bench.run import Options, run_check, steps_of
from bench.step import Step
from bench.studies import STUDIES

ROOT = Path(__file__).resolve().parents[1]


def toy_step(calls: list[int]) -> Step:
    def measure(ctx) -> None:
        calls.append(1)
        ctx.note("a toy: two parts measured alike")
        for arm, value in (("a", 1.5), ("b", 2.5)):
            ctx.part(arm, status="ok", value=value, dry_run=ctx.dry_run)

    return Step("toy", "A toy step", measure, kind="probe")


def test_a_registered_step_runs_through_the_runner_on_cpu_and_its_page_is_drawn(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setitem(registry.STEPS, "toy", toy_step(calls))
    result = run_check("toy", tmp_path, ["toy"], dry_run=True, work=None, budgets={})
    saved = json.loads((tmp_path / "toy.json").read_text())
    assert saved == json.loads(json.dumps(result)) and calls == [1]
    (step,) = saved["steps"]
    assert step["status"] == "ok" and step["parts"]["b"] == {"status": "ok", "value": 2.5, "dry_run": True}
    text = (tmp_path / "toy.md").read_text()
    assert text.startswith("# A toy step (dry run") and "- **b**: ok; value 2.5; dry_run True" in text
    assert table_rows(text)[1] == ["A toy step", "ok", "0", "0"]
    run_check("toy", tmp_path, ["toy"], dry_run=True, work=None, budgets={})  # resumed: a step that ended ok stays
    assert calls == [1]
    run_check("toy", tmp_path, ["toy"], dry_run=True, work=None, budgets={}, force=True)
    assert calls == [1, 1]


def test_a_failing_step_is_recorded_with_its_error_in_one_line(tmp_path, monkeypatch):
    def measure(ctx):
        ctx.part("half", status="ok")
        raise ValueError("boom")

    monkeypatch.setitem(registry.STEPS, "bad", Step("bad", "Bad", measure))
    (step,) = run_check("bad", tmp_path, ["bad"], dry_run=True, work=None, budgets={})["steps"]
    assert step["status"] == "failed: ValueError: boom" and step["parts"]["half"] == {"status": "ok"}


def test_the_list_names_every_study_step_and_retired_record():
    listed = registry.listing({name: list(steps_of(s, Options(dry_run=True))) for name, s in STUDIES.items()})
    retired = ["trim", "ot_filtering", "xtreme", "real-start", "gpu/check-8ed30a6"]
    names = [*STUDIES, *registry.STEPS, *registry.CALLS, *retired]
    assert all(f"  {name}: " in listed for name in names)
    assert all(f"  {name}: " not in listed for name in ("legacy", "supervisor"))


def test_only_the_runner_is_a_script():
    scripts = [
        p.relative_to(ROOT).as_posix()
        for p in sorted((ROOT / "bench").rglob("*.py"))
        if any(isinstance(n, ast.Constant) and n.value == "__main__" for n in ast.walk(ast.parse(p.read_text())))
    ]
    assert scripts == ["bench/run.py"]


def test_only_the_drawer_turns_records_into_pages():
    drawing = [
        p.relative_to(ROOT).as_posix()
        for p in sorted((ROOT / "bench").rglob("*.py"))
        if any(f"{name}(" in p.read_text() for name in ("page_text", "block_lines", "markdown_table", "record_text"))
    ]
    assert drawing == ["bench/page.py", "bench/reporting.py"]  # the drawer, and the table writer it draws with


def test_a_perf_benchs_page_is_drawn_from_the_data_its_json_keeps(tmp_path):
    from bench.page import save_page
    from bench.reporting import Block

    parts = ["# A bench", "", "Produced by `cmd`.", "", Block(heading="Counts", header=("", "n"), rows=(("x", 2.25),))]
    page = save_page(tmp_path / "bench.json", {"n": 2.25}, parts)
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["n"] == 2.25 and {"header": ["", "n"], "rows": [["x", 2.25]], "align": ""} in saved["page"]
    assert table_rows(page.read_text()) == [["", "n"], ["x", "2.2"]] and page.read_text().startswith("# A bench\n")
