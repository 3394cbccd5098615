"""Fixtures for the trainer-image checks: a small Dockerfile reader and the project's pins.

No Docker engine runs here, so these tests read the Dockerfile the way BuildKit would (line
continuations, build-argument defaults, stages) and compare it with the files it depends on.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Instruction:
    """One Dockerfile instruction, continuation lines joined as BuildKit joins them."""

    keyword: str
    value: str
    line: int


@dataclass
class Stage:
    """A `FROM ... AS name` block."""

    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def values(self, keyword: str) -> list[str]:
        return [i.value for i in self.instructions if i.keyword == keyword]


@dataclass
class Dockerfile:
    """The parsed Dockerfile: global ARG defaults (before the first FROM) and the stages."""

    global_args: dict[str, str]
    stages: list[Stage]
    instructions: list[Instruction]

    def expand(self, text: str) -> str:
        """Substitute `${NAME}` / `$NAME` with the global ARG defaults (what a plain build uses);
        a default that names an earlier ARG is expanded too, as the builder does."""

        def sub(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2)
            if name not in self.global_args:
                raise KeyError(f"{name} has no global ARG default in the Dockerfile")
            return self.global_args[name]

        for _ in range(5):
            text, n = re.subn(r"\$\{(\w+)\}|\$(\w+)", sub, text)
            if not n:
                break
        return text

    def with_args(self, overrides: dict[str, str]) -> Dockerfile:
        """The same file as a build with `--build-arg` overrides sees it (a flavor)."""
        unknown = set(overrides) - set(self.global_args)
        if unknown:
            raise KeyError(f"build arguments {sorted(unknown)} are not global ARGs of the Dockerfile")
        return Dockerfile({**self.global_args, **overrides}, self.stages, self.instructions)

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def lineage(self, stage: Stage) -> list[Stage]:
        """`stage` and every stage it is built FROM, nearest first."""
        chain = [stage]
        names = {s.name: s for s in self.stages if s.name}
        while chain[-1].image in names:
            chain.append(names[chain[-1].image])
        return chain


def parse_dockerfile(text: str) -> Dockerfile:
    """Parse enough of the Dockerfile grammar for these checks (no heredocs: the file has none)."""
    instructions: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continuation are dropped, as BuildKit does
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, value = full.partition(" ")
        instructions.append(Instruction(keyword.upper(), value.strip(), start))
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            parts = ins.value.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(image=parts[0], name=name))
        elif not stages:
            assert ins.keyword == "ARG", f"line {ins.line}: only ARG may precede the first FROM"
            key, _, default = ins.value.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append(ins)
    return Dockerfile(global_args=global_args, stages=stages, instructions=instructions)


def read_version_module() -> dict[str, str]:
    """sdk/trainctl/version.py's constants, read without importing the SDK."""
    tree = ast.parse((REPO / "sdk/trainctl/version.py").read_text())
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if isinstance(node.value, ast.Constant):
                out[name] = str(node.value.value)
            elif isinstance(node.value, ast.JoinedStr):
                out[name] = "".join(
                    str(v.value) if isinstance(v, ast.Constant) else out[ast.unparse(v.value)]
                    for v in node.value.values
                    if isinstance(v, ast.Constant | ast.FormattedValue)
                )
    return out


def read_lock(path: Path) -> dict[str, str]:
    """`name==version` pins of a pip requirements lock, names normalized (PEP 503)."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", line)
        if m:
            pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return pins


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def dockerfile() -> Dockerfile:
    return parse_dockerfile((REPO / "Dockerfile").read_text())


@pytest.fixture(scope="session")
def lock() -> dict[str, str]:
    return read_lock(REPO / "trainer_image/requirements.lock")


def read_args(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a flavor's build-argument file (comments and blanks skipped)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


@pytest.fixture(scope="session")
def cpu_args() -> dict[str, str]:
    return read_args(REPO / "trainer_image/flavor-cpu.args")


@pytest.fixture(scope="session")
def cpu_lock() -> dict[str, str]:
    return read_lock(REPO / "trainer_image/requirements-cpu.lock")


@pytest.fixture(scope="session")
def build_lock() -> dict[str, str]:
    return read_lock(REPO / "trainer_image/build-requirements.lock")


@pytest.fixture(scope="session")
def version_module() -> dict[str, str]:
    return read_version_module()


@pytest.fixture(scope="session")
def trainer_pyproject() -> dict[str, object]:
    import tomllib

    return tomllib.loads((REPO / "trainer_image/pyproject.toml").read_text())


@pytest.fixture(scope="session")
def venv_bin() -> Path:
    """The bin directory of the interpreter running the tests (the project venv)."""
    return Path(sys.executable).parent
