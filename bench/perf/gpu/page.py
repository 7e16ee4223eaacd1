"""The GPU check's page from its record (gpu_check.json): one table of steps, then a section per step with a
table of its parts (arms measured alike) or a line per part."""

from __future__ import annotations

from pathlib import Path

from bench.reporting import Block, page_text, table

TABLE_STEPS = {"throughput"}  # steps whose parts are arms measured alike: a table; the others a list


def write_page(r: dict, page: Path) -> Path:
    """gpu_check.md from the check's record, drawn by the one writer."""
    page.write_text(page_text(parts(r)))
    return page


def parts(r: dict) -> list[str | Block]:
    steps = [[s["title"], s["status"], f"{s.get('seconds', 0):.0f}", f"{s.get('budget_s', 0):.0f}"] for s in r["steps"]]
    lines = [
        "# GPU check" + (" (dry run: CPU, tiny sizes; not a measurement)" if r["dry_run"] else ""),
        "",
        f"`{r['command']}` at {r['code']}, {r['date']} on {r['host']}, {r['seconds']:.0f} s in all.",
        "",
        table(["step", "status", "seconds", "budget"], steps, align="llrr"),
    ]
    for s in r["steps"]:
        lines += [f"## {s['title']}: {s['status']}", ""]
        lines += [f"{note}." if not note.endswith(".") else note for note in s.get("notes", [])]
        if s.get("notes"):
            lines.append("")
        lines += [part_table(s["parts"])] if s["name"] in TABLE_STEPS else [*part_list(s["parts"]), ""]
    return lines


def part_list(parts: dict) -> list[str]:
    """A line per part: its status, then its measurements."""
    return [
        f"- **{name}**: {p.get('status', '')}" + "".join(f"; {k} {cell(v)}" for k, v in p.items() if k != "status")
        for name, p in parts.items()
    ]


def part_table(parts: dict) -> Block:
    """A row per part (arms measured alike), a column per measurement."""
    columns = ["status", *dict.fromkeys(k for p in parts.values() for k in p if k != "status")]
    rows = [[name, *(cell(p.get(k, "")) for k in columns)] for name, p in parts.items()]
    return table(["part", *columns], rows, align="ll" + "r" * (len(columns) - 1))


def cell(value) -> str:
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value).replace("|", "/")
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"
