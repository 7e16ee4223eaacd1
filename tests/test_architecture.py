"""Layers that hold: every import in `polyalign/` goes down the declared order, and no Python module of the
repository is in an import circle. Imports are read with `ast`, lazy ones (inside functions) included."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ARCHITECTURE = ROOT / "ARCHITECTURE.md"
PACKAGE = "polyalign"


def declared_layers(text: str) -> tuple[tuple[str, ...], ...]:
    """The ```layers block of ARCHITECTURE.md, the one place the order is written: a layer per line, bottom
    first, `#` starts a comment. A module belongs to the layer of its longest listed prefix (`polyalign` itself,
    the package's `__init__`, is no prefix of the others)."""
    block = re.search(r"```layers\n(.*?)```", text, re.S).group(1)
    lines = (line.partition("#")[0].split() for line in block.splitlines())
    return tuple(tuple(names) for names in lines if names)


LAYERS = declared_layers(ARCHITECTURE.read_text(encoding="utf-8"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_modules(*folders: str) -> dict[str, Path]:
    return {module_name(p): p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))}


def imported_names(path: Path, name: str) -> list[tuple[str, int]]:
    """(dotted name, line) of every import in the file, at any depth (an import inside a function counts): for
    `from a import b` both `a` and `a.b`, so a submodule imported by name is seen."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `from . import x`, `from ..a import b`
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line}, over the given modules only (each import resolved to the longest
    module name it starts with; a module's import of its own name, as `from a import b` inside `a`, is no edge)."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for imported, line in imported_names(path, name):
            target = imported
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.setdefault(target, line)
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search, modules in sorted order)."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for nxt in sorted(graph.get(node, {})):
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done and (cycle := visit(nxt)):
                return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done and (cycle := visit(start)):
            return cycle
    return None


def describe(cycle: list[str], graph: dict[str, dict[str, int]], modules: dict[str, Path]) -> str:
    steps = [f"{modules[a].relative_to(ROOT)}:{graph[a][b]} imports {b}" for a, b in itertools.pairwise(cycle)]
    return "import circle:\n  " + "\n  ".join(steps)


def layer_of(name: str, layers=LAYERS) -> int | None:
    """Index of the layer of the longest listed prefix of `name` (a prefix ends at a dot), or None."""
    best, index = "", None
    for i, layer in enumerate(layers):
        for prefix in layer:
            under = prefix != PACKAGE and name.startswith(prefix + ".")
            if (name == prefix or under) and len(prefix) > len(best):
                best, index = prefix, i
    return index


def upward_imports(graph: dict[str, dict[str, int]], modules: dict[str, Path], layers=LAYERS) -> list[str]:
    """Every import of a module from a layer above its own, as `file:line: a imports b: why it goes up`."""
    found = []
    for name, edges in sorted(graph.items()):
        for target, line in sorted(edges.items()):
            own, other = layer_of(name, layers), layer_of(target, layers)
            if None not in (own, other) and other > own:  # a module without a layer fails the test above
                where = f"{modules[name].relative_to(ROOT)}:{line}"
                above = f"the layer of {layers[other][0]} is above that of {layers[own][0]} in ARCHITECTURE.md"
                found.append(f"{where}: {name} imports {target}: {above}")
    return found


# ---------------------------------------------------------------------------------------------------------
# The rules


def test_every_polyalign_module_has_a_layer_and_every_declared_name_is_a_module():
    modules = python_modules("polyalign")
    assert [name for name in modules if layer_of(name) is None] == []
    declared = [name for layer in LAYERS for name in layer]
    assert [name for name in declared if name not in modules] == []
    assert len(set(declared)) == len(declared)


def test_no_import_goes_up_the_declared_order():
    modules = python_modules("polyalign")
    assert upward_imports(import_graph(modules), modules) == []


@pytest.mark.parametrize("folders", [("polyalign",), ("polyalign", "bench", "tests")], ids=["package", "repository"])
def test_no_import_circle(folders):
    modules = python_modules(*folders)
    graph = import_graph(modules)
    cycle = find_cycle(graph)
    assert cycle is None, describe(cycle, graph, modules)


FOLDER_FILES = {f"polyalign.io.{f}" for f in ("atomic_dir", "atomic_text_file", "atomic_write_text", "write_json")}
FOLDER_FILES |= {"polyalign.io.read_json", "safetensors.torch.load_file", "safetensors.torch.save_file"}
"""How a module reads and writes a model folder's JSON and safetensors files."""


def test_model_computes_and_never_reads_or_writes_a_model_folder():
    """model/ converts configs and tensors; checkpoint.py and hf_folders.py read and write the folders."""
    modules = python_modules("polyalign/model")
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {imported}"
        for name, path in modules.items()
        for imported, line in imported_names(path, name)
        if imported in FOLDER_FILES
    ]
    assert found == []


# ---------------------------------------------------------------------------------------------------------
# The checks catch what they are for


def test_a_planted_upward_import_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "polyalign" / "model").mkdir(parents=True)
    (tmp_path / "polyalign" / "__init__.py").write_text("")
    (tmp_path / "polyalign" / "model" / "__init__.py").write_text("")
    (tmp_path / "polyalign" / "checkpoint.py").write_text("from polyalign.model import Encoder\n")
    (tmp_path / "polyalign" / "model" / "veco.py").write_text("def save():\n    from polyalign import checkpoint\n")
    modules = python_modules("polyalign")
    found = upward_imports(import_graph(modules), modules)
    assert len(found) == 1 and found[0].startswith("polyalign/model/veco.py:2: polyalign.model.veco")


def test_a_planted_circle_is_caught_and_reported_with_its_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "study.py").write_text("import os\nfrom bench.page import write\n")
    (tmp_path / "bench" / "page.py").write_text("def write():\n    from bench import study\n")
    modules = python_modules("bench")
    graph = import_graph(modules)
    assert find_cycle(graph) == ["bench.page", "bench.study", "bench.page"]
    assert "bench/study.py:2 imports bench.page" in describe(find_cycle(graph), graph, modules)
