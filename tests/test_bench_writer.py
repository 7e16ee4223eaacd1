"""One writer of Markdown tables in bench/: every page is lines and blocks (bench/reporting.py `Block`), drawn by
`page_text`; no other module calls the table writer or spells a table row."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WRITER = "bench.reporting"


def draws_tables(path: Path) -> bool:
    """Whether a module calls the Markdown table writer or spells a table row (`| a | b |`, `|---|`) itself."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
            "markdown_table",
            "block_lines",
        ):
            return True
        text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
        if text.lstrip().startswith("| ") or "|---" in text:
            return True
    return False


def table_drawers(root: Path) -> set[str]:
    return {
        ".".join(p.relative_to(root).with_suffix("").parts)
        for p in sorted((root / "bench").rglob("*.py"))
        if draws_tables(p)
    }


def test_one_module_draws_the_tables_of_every_page():
    assert table_drawers(ROOT) == {WRITER}


def test_a_page_that_draws_its_own_table_is_found(tmp_path):
    (tmp_path / "bench" / "probes").mkdir(parents=True)
    (tmp_path / "bench" / "probes" / "x.py").write_text('def page(rows):\n    return ["| a | b |", *rows]\n')
    (tmp_path / "bench" / "y.py").write_text("from bench.reporting import markdown_table\nmarkdown_table([], [])\n")
    (tmp_path / "bench" / "z.py").write_text("from bench.reporting import table\ntable(['a'], [[1]])\n")
    assert table_drawers(tmp_path) == {"bench.probes.x", "bench.y"}
