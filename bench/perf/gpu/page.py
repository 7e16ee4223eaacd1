"""The GPU check's page: one table per step, a row per part, a column per measurement."""

from __future__ import annotations

from bench.reporting import markdown_table

TABLE_STEPS = {"throughput"}  # steps whose parts are arms measured alike: a table; the others a list


def page(r: dict) -> str:
    lines = [
        "# GPU check" + (" (dry run: CPU, tiny sizes; not a measurement)" if r["dry_run"] else ""),
        "",
        f"`{r['command']}` at {r['code']}, {r['date']} on {r['host']}, {r['seconds']:.0f} s in all.",
        "",
        markdown_table(
            ["step", "status", "seconds", "budget"],
            [
                [s["title"], s["status"], f"{s.get('seconds', 0):.0f}", f"{s.get('budget_s', 0):.0f}"]
                for s in r["steps"]
            ],
            align="llrr",
        ),
    ]
    for s in r["steps"]:
        lines += ["", f"## {s['title']}: {s['status']}", ""]
        lines += [f"{note}." if not note.endswith(".") else note for note in s.get("notes", [])]
        if s.get("notes"):
            lines.append("")
        lines += part_table(s["parts"]) if s["name"] in TABLE_STEPS else part_list(s["parts"])
    return "\n".join(lines) + "\n"


def part_list(parts: dict) -> list[str]:
    """A line per part: its status, then its measurements."""
    return [
        f"- **{name}**: {p.get('status', '')}" + "".join(f"; {k} {cell(v)}" for k, v in p.items() if k != "status")
        for name, p in parts.items()
    ]


def part_table(parts: dict) -> list[str]:
    """A row per part (arms measured alike), a column per measurement."""
    columns = ["status", *dict.fromkeys(k for p in parts.values() for k in p if k != "status")]
    rows = [[name, *(cell(p.get(k, "")) for k in columns)] for name, p in parts.items()]
    return [markdown_table(["part", *columns], rows, align="ll" + "r" * (len(columns) - 1))]


def cell(value) -> str:
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value).replace("|", "/")
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


# ---------------------------------------------------------------------------------------------------------
