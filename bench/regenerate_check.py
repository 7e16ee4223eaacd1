"""Regenerate every page under bench/results from its saved results and compare the numbers before and after.

Usage: python -m bench.regenerate_check [--results bench/results] [--keep DIR]
Each page is rewritten into a copy of the results folder (the committed pages are never touched); the check then
compares, page by page, every Markdown table cell and every JSON the writer produces beside the page (verdicts,
summaries; the provenance line aside, as it names the commit the page was written at). Exit 1 when a number moved,
with the first cells that differ; a refactor of the bench proves with it that every page regenerates unchanged.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench import page
from bench.reporting import table_rows
from bench.studies import STUDIES

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
VOLATILE = {"provenance", "commit", "date"}
"""JSON fields that name when and at what commit a file was written, not what it measured."""


def without_volatile(data):
    if isinstance(data, dict):
        return {k: without_volatile(v) for k, v in data.items() if k not in VOLATILE}
    if isinstance(data, list):
        return [without_volatile(v) for v in data]
    return data


def writers(results: Path = RESULTS) -> dict[str, Callable[[Path], list[Path]]]:
    """Every page under `results` by its path there: a function of a results folder that draws it again (from the
    saved JSON) and returns the files it wrote. A study's page comes from its sections; any other page from the JSON
    beside it (a runner's record, a perf bench's or a retired page), by the one drawer (bench/page.py)."""

    def study_writer(study):
        def write(results: Path) -> list[Path]:
            written = page.write(study, results, f"python -m bench.run {study.name} --page")
            jsons = [results / study.name / "verdicts.json", results / f"{study.name}_summary.json"]
            return [written, *(p for p in jsons if p.is_file())]

        return write

    found = {f"{name}.md": study_writer(study) for name, study in STUDIES.items()}
    for md in sorted(results.rglob("*.md")):
        name = md.relative_to(results).as_posix()
        if name not in found and md.with_suffix(".json").is_file():
            found[name] = lambda r, name=name: [page.draw_record(r / Path(name).with_suffix(".json"))]
    return found


def differences(before: Path, after: Path) -> list[str]:
    """How a regenerated file differs from the saved one: table cells for pages, values for JSON files."""
    if not before.is_file():
        return [f"{before.name}: not saved before"]
    if before.suffix == ".json":
        old, new = (without_volatile(json.loads(p.read_text())) for p in (before, after))
        return [] if old == new else [f"{before.name}: the JSON differs"]
    old, new = (table_rows(p.read_text(encoding="utf-8")) for p in (before, after))
    out = [
        f"{before.name}: table row {i}: {a} -> {b}" for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b
    ]
    if len(old) != len(new):
        out.append(f"{before.name}: {len(old)} table rows -> {len(new)}")
    return out


def check(results: Path, scratch: Path) -> tuple[dict[str, int], list[str]]:
    """Regenerate every page into `scratch` (a copy of `results`); the cells compared per page, and what moved."""
    shutil.copytree(results, scratch, dirs_exist_ok=True)
    compared, problems = {}, []
    for name, write in writers(results).items():
        written = write(scratch)
        cells = 0
        for path in written:
            saved = results / path.relative_to(scratch)
            problems += differences(saved, path)
            cells += sum(map(len, table_rows(path.read_text(encoding="utf-8")))) if path.suffix == ".md" else 0
        compared[name] = cells
    return compared, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--keep", type=Path, help="regenerate into this folder and keep it (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        compared, problems = check(args.results, args.keep or Path(tmp) / "results")
    for name, cells in compared.items():
        print(f"{name}: {cells} table cells")
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{len(compared)} pages regenerated, {'numbers moved' if problems else 'every number unchanged'}")
    return 1 if problems else 0


if __name__ != "bench.regenerate_check":  # run as `python -m bench.regenerate_check`
    sys.exit(main())
