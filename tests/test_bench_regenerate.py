"""The regeneration check (bench/regenerate_check.py): a moved table cell or JSON value is found, prose is not."""

import json
import shutil
from pathlib import Path

import pytest

from bench.regenerate_check import ROOT, differences, writers
from bench.reporting import markdown_table, table_rows
from bench.studies import STUDIES

PAGE = "# T\n\nProduced by `x` (commit {commit}).\n\n" + markdown_table(["arm", "aer"], [["a", "{aer}"]]) + "\n"


def test_table_rows_are_the_rows_of_every_table_without_the_rule_rows():
    text = PAGE.format(commit="abc", aer="12.5") + "\n" + markdown_table(["x"], [[1]], align="r")
    assert table_rows(text) == [["arm", "aer"], ["a", "12.5"], ["x"], ["1"]]


def test_a_moved_cell_is_a_difference_and_prose_is_not(tmp_path):
    before, after = tmp_path / "before.md", tmp_path / "after.md"
    before.write_text(PAGE.format(commit="abc", aer="12.5"))
    after.write_text(PAGE.format(commit="def", aer="12.5"))
    assert differences(before, after) == []
    after.write_text(PAGE.format(commit="abc", aer="12.6"))
    assert differences(before, after) == ["before.md: table row 1: ['a', '12.5'] -> ['a', '12.6']"]
    after.write_text(PAGE.format(commit="abc", aer="12.5") + markdown_table(["y"], []))
    assert differences(before, after) == ["before.md: 2 table rows -> 3"]


def test_json_values_differ_but_not_the_commit_they_were_written_at(tmp_path):
    before, after = tmp_path / "v.json", tmp_path / "w.json"
    before.write_text(json.dumps({"provenance": "at abc", "rows": [{"aer": 1.0, "commit": "abc"}]}))
    after.write_text(json.dumps({"provenance": "at def", "rows": [{"aer": 1.0, "commit": "def"}]}))
    assert differences(before, after) == []
    after.write_text(json.dumps({"provenance": "at abc", "rows": [{"aer": 1.5, "commit": "abc"}]}))
    assert differences(before, after) == ["v.json: the JSON differs"]


def test_every_page_under_bench_results_has_a_writer():
    # every page under bench/results, retired ones and the GPU checks' raw records below them included; README.md is
    # the lab's notes over them, written by people
    results = ROOT / "bench" / "results"
    pages = {p.relative_to(results).as_posix() for p in results.rglob("*.md")} - {"README.md"}
    assert set(writers(results)) == pages
    named = {"gpu/check-8ed30a6/gpu_check.md", "reliability.md", "throughput.md", "trim.md", "xtreme.md"}
    assert {f"{name}.md" for name in STUDIES} | named <= pages


PAGES = ["gpu/check-8ed30a6/gpu_check.md", "gpu/evidence-xlm-e-287eca6/gpu_check.md", "reliability.md", "trim.md"]


@pytest.mark.parametrize("name", [*PAGES, "gpu/check-8ed30a6.md", "xtreme.md", "rtd_reference.md"])
def test_records_and_retired_pages_regenerate_from_their_json_alone(name, tmp_path):
    results = ROOT / "bench" / "results"
    saved = Path(name).with_suffix(".json")
    (tmp_path / saved).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(results / saved, tmp_path / saved)
    written = writers(results)[name](tmp_path)
    assert written == [tmp_path / name]
    assert table_rows(written[0].read_text()) and differences(results / name, written[0]) == []
