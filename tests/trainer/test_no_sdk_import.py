"""The trainer image never imports the SDK: it runs where trainctl is not installed.

(No import cycle and no file over 400 lines in trainer_image/: tests/sdk/test_layout.py checks both
packages.) Every import counts, at module level or inside a function, even under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "trainer_image"


def imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_check_sees_function_level_imports(tmp_path: Path) -> None:
    probe = tmp_path / "m.py"
    probe.write_text("def f():\n    from trainctl.job import Job\n")
    assert "trainctl.job" in imported_names(probe)


def test_the_trainer_never_imports_the_sdk() -> None:
    files = sorted(ROOT.rglob("*.py"))
    assert len(files) > 20
    offenders = {
        str(p.relative_to(ROOT)): sorted(n for n in imported_names(p) if n.split(".")[0] == "trainctl") for p in files
    }
    assert {k: v for k, v in offenders.items() if v} == {}
