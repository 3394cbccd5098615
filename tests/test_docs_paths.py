"""The docs name only code that exists (issue 34): every `.py` path of this repository and every
`trainer.`/`trainctl.` module a page of docs/ or the README names is there, so the module maps cannot drift
from the layout again.

What counts as ours: a path whose first folder is one of this repository's (`tests/...`) or one of its packages'
(`targets/slurm/status.py`, `launcher/platforms.py`), found from the repository root, `sdk/`, `sdk/trainctl/`,
`trainer_image/` or `trainer_image/trainer/`; other projects' files (`torch/distributed/run.py`) are not. A dotted
name is a module where it can only be one: after `python -m`, with `:attr`, or when its second part is a module or
package of ours; `trainer.lr` (a job field) and `trainctl.attempts` (a tracker tag) are not modules.
"""

from __future__ import annotations

import ast
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
BASES = ("", "sdk/", "sdk/trainctl/", "trainer_image/", "trainer_image/trainer/")
PACKAGES = {"trainer": ROOT / "trainer_image", "trainctl": ROOT / "sdk"}
# other projects' files whose first folder, or whose name, is one of ours
ELSEWHERE = {"data/openwebtext/prepare.py", "environment.py"}  # nanoGPT's; the sagemaker-training toolkit's

PY_PATH = re.compile(r"(?<![\w./<>-])((?:[\w.-]+/)+[\w.-]*\w\.py)\b")
PY_NAME = re.compile(r"`([\w.-]*\w\.py)`")  # a file named alone, as a code span
DOTTED = re.compile(r"(?<![\w./-])(-m\s+|import\s+|from\s+)?((?:trainer|trainctl)(?:\.\w+)+)(?::(\w+))?(?!\.?[\w/-])")


@cache
def tracked() -> tuple[str, ...]:
    """The repository's files as git knows them: an ignored leftover (a build folder, an old copy, a stale
    `__pycache__` folder) names nothing of ours."""
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return tuple(done.stdout.splitlines())


@cache
def our_folders() -> frozenset[str]:
    """The first folders a path of ours starts with: the repository's, and the packages' below each base."""
    folders = set()
    for path in tracked():
        for base in BASES:
            if path.startswith(base) and "/" in path[len(base) :]:
                folders.add(path[len(base) :].split("/")[0])
    return frozenset(f for f in folders if f[0] != ".")


@cache
def our_file_names() -> frozenset[str]:
    """The names of this repository's `.py` files."""
    return frozenset(Path(p).name for p in tracked() if p.endswith(".py"))


def stale_paths(text: str) -> list[str]:
    """The `.py` paths of ours in `text` that are under none of the bases, and the `.py` names (`loop.py`) that
    no file of this repository has."""
    found = {m.group(1) for m in PY_PATH.finditer(text)}
    ours = {p for p in found if p.split("/")[0] in our_folders() and p not in ELSEWHERE}
    files = set(tracked())
    paths = {p for p in ours if not any(base + p in files for base in BASES)}
    names = {m.group(1) for m in PY_NAME.finditer(text)} - our_file_names() - ELSEWHERE
    return sorted(paths | names)


def module_file(parts: list[str]) -> Path | None:
    """The source file of module `a.b.c` (a package's `__init__.py`), or None."""
    path = PACKAGES[parts[0]].joinpath(*parts)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def top_level_names(source: Path) -> frozenset[str]:
    """The names a module defines or imports at its top level, and those in its `__all__`."""
    tree = ast.parse(source.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                names.update(e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant))
    return frozenset(n for n in names if isinstance(n, str))


def resolves(parts: list[str], attr: str | None) -> bool:
    """`parts` is a module, or a module and one name it defines; `attr` (after `:`) is a name of the module."""
    for n in range(len(parts), 1, -1):
        source = module_file(parts[:n])
        if source is None:
            continue
        rest = parts[n:] + ([attr] if attr else [])
        return len(rest) <= 1 and all(name in top_level_names(source) for name in rest)
    return False


@cache
def trainer_fields() -> frozenset[str]:
    """The `trainer:` section's field names (the SDK's TrainerConfig and the trainer's TrainConfig)."""
    fields: set[str] = set()
    for path, cls in (
        ("sdk/trainctl/spec/trainer.py", "TrainerConfig"),
        ("trainer_image/trainer/config.py", "TrainConfig"),
    ):
        tree = ast.parse((ROOT / path).read_text())
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
        fields.update(n.target.id for n in body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
    return frozenset(fields)


def stale_modules(text: str) -> list[str]:
    """The dotted names in `text` that must be modules of ours (see the module docstring) and are not."""
    stale = set()
    for m in DOTTED.finditer(text):
        forced, name, attr = bool(m.group(1)) or bool(m.group(3)), m.group(2), m.group(3)
        parts = name.split(".")
        if resolves(parts, attr):
            continue
        a_field = parts[0] == "trainer" and parts[1] in trainer_fields()
        a_module = module_file(parts[:2]) is not None
        if forced or (a_module and not a_field) or (parts[0] == "trainer" and len(parts) > 2 and not a_field):
            stale.add(name + (f":{attr}" if attr else ""))
    return sorted(stale)


@pytest.mark.parametrize("doc", DOCS, ids=[d.relative_to(ROOT).as_posix() for d in DOCS])
def test_every_path_and_module_a_doc_names_exists(doc: Path) -> None:
    text = doc.read_text()
    assert not stale_paths(text), f"{doc.name} names .py files that are not there: {stale_paths(text)}"
    assert not stale_modules(text), f"{doc.name} names modules that are not there: {stale_modules(text)}"


@pytest.mark.parametrize(
    ("text", "stale"),
    [
        ("`trainer_image/trainer/launcher/platforms.py`, `targets/slurm/status.py`, `data/jsonl.py`", []),
        (
            "`trainer_image/trainer/loop.py` and `launcher/loop.py`",
            ["launcher/loop.py", "trainer_image/trainer/loop.py"],
        ),
        ("torch/distributed/run.py, `trainctl_ray/target.py`, nanoGPT's data/openwebtext/prepare.py", []),
        ("`tests/sdk/test_schema_doc.py` fails", ["tests/sdk/test_schema_doc.py"]),
        ("`targets/<name>/target.py`", []),
        ("`loop.py`, `checkpoint_files.py`, `environment.py`, the examples' multinode.py", ["checkpoint_files.py"]),
    ],
)
def test_stale_paths_are_found(text: str, stale: list[str]) -> None:
    assert stale_paths(text) == stale


@pytest.mark.parametrize(
    ("text", "stale"),
    [
        ("`python -m trainer.train`, `trainer.checkpoint.files.save`, trainctl.targets.slurm:PLUGIN", []),
        ("`trainer.lr`, trainer.streaming: true, `trainctl.resumed_from.changes`, trainer.kubeflow.org/v1", []),
        ("python -m trainer.nothere, and trainer.loop.", ["trainer.nothere"]),
        ("(trainer.checkpoint_files.save)", ["trainer.checkpoint_files.save"]),
        (
            "`trainer.checkpoint.files.nothing`, `trainctl.targets.nowhere`",
            ["trainctl.targets.nowhere", "trainer.checkpoint.files.nothing"],
        ),
        ("trainctl.targets.slurm:NOPE", ["trainctl.targets.slurm:NOPE"]),
    ],
)
def test_stale_modules_are_found(text: str, stale: list[str]) -> None:
    assert stale_modules(text) == stale
