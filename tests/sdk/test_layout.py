"""The layout is the map: no import cycles (SDK and trainer), no source file over 400 lines.

The import graph is read from the source with `ast`: module-level AND function-level imports (a
function-level import is still a dependency; placing it in a function only hides a cycle), minus
imports under `if TYPE_CHECKING:` (never executed). Importing `a.b.c` from outside `a.b` also runs
`a/__init__` and `a/b/__init__`, so those are edges too. Targets are loaded by name from their entry
points: targets/registry.py loads each plug-in's declaring module, targets/lookup.py its `Target` module, so
those are edges of those two. The layers (LAYERS) only point down.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from trainctl.targets.registry import _entry_points, names, plugin

BUILT_IN = ("kubernetes", "local", "sagemaker", "slurm")
DECLARED = {n: _entry_points()[n].module for n in names() if _entry_points()[n].module.startswith("trainctl.")}
TARGET_MODULES = {n: plugin(n).target.partition(":")[0] for n in DECLARED}

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


def _imports(tree: ast.AST, type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth; those under `if TYPE_CHECKING:` only when `type_checking`."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def import_graph(name: str, root: Path, type_checking: bool = False) -> dict[str, set[str]]:
    mods = modules(name, root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        here = mod if is_pkg else mod.rpartition(".")[0]
        targets: list[str] = []
        for node in _imports(ast.parse(path.read_text(), str(path)), type_checking):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
                continue
            base = here
            for _ in range(node.level - 1 if node.level else 0):
                base = base.rpartition(".")[0]
            base = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            targets.append(base)
            targets += [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in mods]
        if mod == f"{name}.targets.registry":
            targets += list(DECLARED.values())
        if mod == f"{name}.targets.lookup":
            targets += list(TARGET_MODULES.values())
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


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycle_even_for_the_type_checker(package: str) -> None:
    """A circle through `if TYPE_CHECKING:` runs nowhere, but it still ties two modules into one: neither can be
    read, moved or tested without the other."""
    cycle = find_cycle(import_graph(package, PACKAGES[package], type_checking=True))
    assert cycle is None, "import cycle (type-only edges included): " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_what_it_must() -> None:
    """The checker itself: a function-level import closing a circle counts; TYPE_CHECKING does not."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse("import x\nif TYPE_CHECKING:\n    import y\ndef f():\n    from . import z\n")
    assert sorted(type(n).__name__ for n in _imports(tree)) == ["Import", "ImportFrom"]
    graph = import_graph("trainctl", PACKAGES["trainctl"])
    assert sorted(DECLARED) == list(BUILT_IN)  # trainctl's own targets, found through their entry points
    assert "trainctl.targets.local" in graph["trainctl.targets.registry"]  # a plug-in's declaration, loaded by name
    assert set(TARGET_MODULES.values()) <= graph["trainctl.targets.lookup"]


# The SDK's layers, bottom up (docs/architecture.md), as package rules. A module may import its own layer and those
# under it. `{t}` is a built-in target's name, `*` any module name below; a module's layer is its most specific
# pattern's (a name beats a wildcard, a longer wildcard a shorter one), so a package's rule has named exceptions.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "leaves: the job's parts, a run's identity and causes",
        ("errors", "version", "function", "spec", "spec.*", "runs", "runs.causes", "runs.identity", "runs.times"),
    ),
    ("the run records and facts about runs", ("runs.*",)),
    ("what a plug-in declares, and the declarations remembered", ("targets.plugin", "targets.declared")),
    ("target declarations", ("targets", "targets.{t}", "targets.{t}.section", "targets.{t}.handle")),
    ("the installed targets", ("targets.registry",)),
    ("the spec", ("spec.job_spec",)),
    (
        "the run store, the bundle and the tracker",
        ("runs.store", "runs.removal", "submit", "submit.bundle", "submit.trackers"),
    ),
    ("the interface", ("targets.*",)),
    ("the targets", ("targets.{t}.*",)),
    ("finding a target", ("targets.lookup",)),
    ("the handle", ("run",)),
    ("submitting: checks, resume, the runner", ("submit.*",)),
    ("sweeps", ("sweeps", "sweeps.*")),
    ("the job", ("job",)),
    ("the CLI and the package", ("cli", "cli.*", "", "__main__")),
)


def _matches(pattern: str, name: str) -> bool:
    wanted, parts = pattern.split(".") if pattern else [], name.split(".") if name else []
    if wanted and wanted[-1] == "*":
        wanted, parts = wanted[:-1], parts[: len(wanted) - 1] if len(parts) >= len(wanted) else ["?"]
    return len(wanted) == len(parts) and all(
        w == p or (w == "{t}" and p in DECLARED) for w, p in zip(wanted, parts, strict=True)
    )


def _specificity(pattern: str) -> tuple[bool, int]:
    return (not pattern.endswith("*"), pattern.count(".") + 1 if pattern else 0)


def layer_of(module: str) -> int:
    """The index in LAYERS of a trainctl module: the layer of the most specific pattern that names it."""
    name = module.removeprefix("trainctl").removeprefix(".")
    found = [
        (_specificity(p), index) for index, (_, patterns) in enumerate(LAYERS) for p in patterns if _matches(p, name)
    ]
    if not found:
        raise AssertionError(f"{module} is in no layer of LAYERS: add it where it belongs")
    return max(found)[1]


def test_no_sdk_module_imports_a_higher_layer() -> None:
    graph = import_graph("trainctl", PACKAGES["trainctl"])
    layers = {mod: layer_of(mod) for mod in graph}
    up = [
        f"{mod} ({LAYERS[layers[mod]][0]}) -> {dep} ({LAYERS[layers[dep]][0]})"
        for mod, deps in sorted(graph.items())
        for dep in sorted(deps)
        if layers[dep] > layers[mod]
    ]
    assert not up, "imports that point up:\n" + "\n".join(up)


def test_the_layer_check_catches_an_arrow_up() -> None:
    order = [
        "trainctl.runs.state",
        "trainctl.targets.slurm.handle",
        "trainctl.spec.job_spec",
        "trainctl.targets.slurm.render",
    ]
    assert [layer_of(m) for m in order] == sorted(layer_of(m) for m in order) and len({layer_of(m) for m in order}) == 4
    assert layer_of("trainctl.cli.k8s") == layer_of("trainctl") == len(LAYERS) - 1
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("trainctl.somewhere_new")


def test_the_spec_and_the_run_records_import_no_target_code() -> None:
    """The spec reaches a target only through its plug-in's declaration (section and handle, pure data); the
    run records reach no target at all; no target reaches job.py, submit/runner.py, submit/resume.py, run.py or the CLI."""
    graph = import_graph("trainctl", PACKAGES["trainctl"])

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    machinery = {
        "trainctl.targets",
        "trainctl.targets.registry",
        "trainctl.targets.plugin",
        "trainctl.targets.declared",
    }
    declarations = machinery | {f"{m}{s}" for m in DECLARED.values() for s in ("", ".section", ".handle")}
    assert {m for m in reach("trainctl.spec.job_spec") if m.startswith("trainctl.targets")} <= declarations
    assert "trainctl.targets.slurm.section" in reach("trainctl.spec.job_spec")  # through targets/registry.py, by name
    assert not {m for m in graph["trainctl.spec.job_spec"] if m.startswith("trainctl.targets")} - machinery
    assert not {m for m in graph["trainctl.runs.state"] if m.startswith("trainctl.targets")}
    # run_state is data only: it reaches no trainctl module but two standard-library leaves, causes.py
    # (owns `Cause`; the SLURM batch script runs it where trainctl is not installed) and runs/times.py (how
    # times read, shared with the CLI's table, which must not load pydantic for `--help`), and its own
    # runs/record.py (the record part a render builds), which reaches nothing
    leaves = {"trainctl.runs.causes", "trainctl.runs.times"}
    assert (
        not {m for m in reach("trainctl.runs.state") if m.startswith("trainctl.")} - leaves - {"trainctl.runs.record"}
    )
    assert not {m for m in reach("trainctl.runs.record") if m.startswith("trainctl.")}
    assert not {m for leaf in leaves for m in graph[leaf] if m.startswith("trainctl.")}
    above = {"trainctl.job", "trainctl.submit.runner", "trainctl.submit.resume", "trainctl.run", "trainctl.cli"}
    for module in TARGET_MODULES.values():
        assert not reach(module) & above


@pytest.mark.parametrize("folder", ["sdk", "trainer_image"])
def test_no_source_file_over_400_lines(folder: str) -> None:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert len(files) > 10
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


# The trainer's two programs (docs/architecture.md): the launcher (trainer/launch.py, slurm_worker.py and
# launcher/) starts and watches the workers; training (trainer/train.py, training/, data/, checkpoint/) is what
# each worker runs. They share only the modules at the top of trainer/ (config, records, status, heartbeat...).
TRAINER_SIDES = {
    "launcher": ("launcher", "launch", "slurm_worker"),
    "training": ("training", "data", "checkpoint", "train"),
}


def _side(module: str) -> str | None:
    part = module.split(".")[1] if module.count(".") else ""
    return next((side for side, parts in TRAINER_SIDES.items() if part in parts), None)


def test_the_trainers_launcher_and_training_import_nothing_of_each_other() -> None:
    graph = import_graph("trainer", PACKAGES["trainer"], type_checking=True)
    sides = {mod: _side(mod) for mod in graph}
    assert {s for s in sides.values() if s} == set(TRAINER_SIDES)  # both folders exist and were read
    across = [f"{m} -> {d}" for m, deps in sorted(graph.items()) for d in sorted(deps) if sides[m] and sides[d]
              and sides[m] != sides[d]]  # fmt: skip
    assert not across, "the launcher and training reach into each other:\n" + "\n".join(across)
