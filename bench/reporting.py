"""What every bench report script shares: the machine line, step timing, metrics files, Markdown tables, JSON output."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor()


def machine() -> str:
    return f"{cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}"


def records(path: Path) -> list[dict]:
    """The lines of a run's metrics.jsonl."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def write_json(path: Path, data: dict, indent: int = 2) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=indent, ensure_ascii=False, default=str) + "\n")


def fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence], align: str = "") -> str:
    """The one writer of Markdown tables in bench/: `align` a letter a column, `l` or `r` (numbers), left when
    absent; cells through `fmt` (strings as they are)."""
    rules = ["---:" if a == "r" else "---" for a in align.ljust(len(header), "l")]
    lines = ["| " + " | ".join(header) + " |", "|" + "".join(f"{r}|" for r in rules)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def table_rows(text: str) -> list[list[str]]:
    """Every row of every Markdown table of a page, as its cells (the header rows included, the rule rows not): what
    the regeneration check compares and the page tests read."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


@dataclass(frozen=True)
class Block:
    """A part of a page as data: a heading (`##`, or `###` at level 3), paragraphs, a table, paragraphs after it."""

    heading: str = ""
    text: tuple[str, ...] = ()
    header: tuple[str, ...] = ()
    rows: tuple[tuple, ...] = ()
    after: tuple[str, ...] = ()
    level: int = 2
    align: str = ""
    """The table's columns, a letter each: `l` or `r` (numbers); left when absent."""


def block_lines(block: Block) -> list[str]:
    """A block in Markdown: each paragraph and the table followed by a blank line."""
    lines = [f"{'#' * block.level} {block.heading}", ""] if block.heading else []
    for paragraph in block.text:
        lines += [paragraph, ""]
    if block.header:
        lines += [markdown_table(block.header, block.rows, block.align), ""]
    for paragraph in block.after:
        lines += [paragraph, ""]
    return lines


def table(header: Sequence[str], rows: Sequence[Sequence], align: str = "") -> Block:
    """A table alone as a block of a page."""
    return Block(header=tuple(header), rows=tuple(map(tuple, rows)), align=align)


def page_text(parts: Sequence[str | Block]) -> str:
    """A page from its parts, one line of Markdown each (a heading, a paragraph, the provenance line) or a block: the
    one place that draws bench/results' tables."""
    return "\n".join(line for part in parts for line in (block_lines(part) if isinstance(part, Block) else [part]))


def page_data(parts: Sequence[str | Block]) -> list:
    """A page's parts as a record keeps them (its JSON's `page`): lines, and each table as its header, rows and
    columns' alignment; bench/page.py draws them back into the same page."""
    out: list = []
    for part in parts:
        if not isinstance(part, Block):
            out.append(part)
            continue
        out += [f"{'#' * part.level} {part.heading}", ""] if part.heading else []
        out += [line for paragraph in part.text for line in (paragraph, "")]
        if part.header:
            out.append({"header": list(part.header), "rows": [list(row) for row in part.rows], "align": part.align})
        out += [line for paragraph in part.after for line in (paragraph, "")]
    return out


def note(notes: dict, key: str) -> list[str]:
    """A person's note on a page (bench/studies/notes/STUDY.json), naming the commit it was written at."""
    n = notes.get(key)
    return [f"- Note (commit {n['commit']}): {n['note']}"] if n else []


def commit() -> str:
    """The repository commit a report is written at (`+dirty` when tracked code, not results, differs from it)."""
    root = Path(__file__).resolve().parents[1]
    run = lambda *args: subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()  # noqa: E731
    # A copy of the tree sent elsewhere (the GPU machine's) is told its commit by the command that sent it there:
    # a .git travelling with it can be older than the tree.
    if sent := os.environ.get("POLYALIGN_COMMIT"):
        return f"{sent[:7]} (the tree sent)"
    head = run("rev-parse", "--short", "HEAD") or "unknown"
    return head + (
        "+dirty" if run("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results") else ""
    )


def provenance(command: str, runs_from: str | None = None) -> str:
    """The line every results page opens with: the command that produced it and the code it ran."""
    if runs_from is None:
        return f"Produced by `{command}` at commit {commit()} ({machine()})."
    code = f"runs made with the code of commits {runs_from}, page written at {commit()}"
    return f"Produced by `{command}` ({code}; {machine()})."
