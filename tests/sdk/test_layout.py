"""The layout is the map: no import cycles (SDK and trainer), no source file over 400 lines.

The import graph is read from the source with `ast`: module-level AND function-level imports (a
function-level import is still a dependency; placing it in a function only hides a cycle), minus
imports under `if TYPE_CHECKING:` (never executed). Importing `a.b.c` from outside `a.b` also runs
`a/__init__` and `a/b/__init__`, so those are edges too. Target packages are loaded by name from
targets/table.py (`targets/lookup.py`), so those rows are edges of lookup.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from trainctl.targets.table import TABLE

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"trainctl": ROOT / "sdk" / "trainctl", "trainer": ROOT / "trainer_image" / "trainer"}
MAX_LINES = 400


def modules(name: str, root: Path) -> dict[str, Path]:
    """Module name -> file, for every module of the package (folders without __init__.py hold data)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if not all((root / Path(*rel.parts[:i]) / "__init__.py").exists() for i in range(len(rel.parts))):
            continue  # e.g. targets/sagemaker/shipped/: package data, not a module
        parts = [name, *rel.with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def import_graph(name: str, root: Path) -> dict[str, set[str]]:
    mods = modules(name, root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        here = mod if is_pkg else mod.rpartition(".")[0]
        targets: list[str] = []
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
                continue
            base = here
            for _ in range(node.level - 1 if node.level else 0):
                base = base.rpartition(".")[0]
            base = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            targets.append(base)
            targets += [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in mods]
        if mod == f"{name}.targets.lookup":
            targets += [row.module for row in TABLE]
        mine = set(_ancestors(mod))  # already running when this module runs
        for target in targets:
            for dep in _ancestors(target):
                if dep in mods and dep not in mine and dep != mod:
                    graph[mod].add(dep)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycle(package: str) -> None:
    graph = import_graph(package, PACKAGES[package])
    assert len(graph) > 10 and sum(map(len, graph.values())) > 10  # the graph was really read
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_what_it_must() -> None:
    """The checker itself: a function-level import closing a circle counts; TYPE_CHECKING does not."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse("import x\nif TYPE_CHECKING:\n    import y\ndef f():\n    from . import z\n")
    assert sorted(type(n).__name__ for n in _imports(tree)) == ["Import", "ImportFrom"]
    graph = import_graph("trainctl", PACKAGES["trainctl"])
    assert "trainctl.targets.local.section" in graph["trainctl.spec"]
    assert "trainctl.targets" in graph["trainctl.spec"]  # the parent package runs first
    assert {row.module for row in TABLE} <= graph["trainctl.targets.lookup"]


def test_the_spec_and_renders_stand_below_what_runs_a_job() -> None:
    """The pure spec reaches no target code but the sections; no target reaches job.py, runner.py or run.py."""
    graph = import_graph("trainctl", PACKAGES["trainctl"])

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    packages = {f"trainctl.targets.{row.name}" for row in TABLE}
    allowed = {"trainctl.targets", "trainctl.targets.table", *packages, *(f"{p}.section" for p in packages)}
    assert {m for m in reach("trainctl.spec") if m.startswith("trainctl.targets")} <= allowed
    assert all(not graph[p] for p in ["trainctl.targets", *packages])  # their __init__ imports nothing
    for row in TABLE:
        assert not reach(row.module) & {"trainctl.job", "trainctl.runner", "trainctl.run", "trainctl.cli"}


@pytest.mark.parametrize("folder", ["sdk", "trainer_image"])
def test_no_source_file_over_400_lines(folder: str) -> None:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert len(files) > 10
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"
